import { expect, test } from './fixtures';
import { newNotebookWithStore, outputText, runCode, shot } from './helpers';

test.describe('JupyterLab integration', () => {
  for (const [width, theme] of [[1400, 'light'], [900, 'dark']] as const) {
  test(`sidebar lists the store, shows fields and a chart, Open in notebook inserts a working cell (${theme}, ${width} px)`, async ({ page, tmpPath }) => {
    await page.setViewportSize({ width, height: 900 });
    if (theme === 'dark') {
      await page.theme.setDarkTheme();
    }
    await newNotebookWithStore(page, tmpPath, 'sidebar.ipynb');
    await runCode(page, 'session.compute.apply("frob_norm", "stable_rank", progress=False); print("computed")');
    await page.locator('.jp-SideBar [data-id="diffract-runs"]').click();
    const panel = page.locator('#diffract-runs');
    await expect(panel).toBeVisible();
    const store = panel.locator(`.diffract-store[data-path="${tmpPath}/.diffract"]`);
    await expect(store).toBeVisible({ timeout: 15000 });
    await store.locator('.diffract-store-row').click();
    const m1 = store.locator('.diffract-model[data-model="m1"]');
    await expect(m1).toBeVisible();
    await expect(m1.locator('td').nth(1)).toHaveText('8');
    // the text filter
    await panel.locator('.diffract-search').fill('m2');
    await expect(store.locator('.diffract-model')).toHaveCount(1);
    await panel.locator('.diffract-search').fill('');
    await m1.click();
    await expect(panel.locator('.diffract-field[data-field="frob_norm"]')).toBeVisible();
    await expect(panel.locator('.diffract-field[data-field="stable_rank"]')).toBeVisible();
    await panel.locator('.diffract-field[data-field="frob_norm"]').click();
    await expect(panel.locator('.diffract-chart .main-svg').first()).toBeVisible({ timeout: 20000 });
    await expect(panel.locator('.diffract-chart')).toHaveAttribute('data-points', '4');
    await shot(page, theme === 'light' ? 'sidebar' : `sidebar-${theme}-${width}`, panel);
    // refreshes by itself when the store changes
    await runCode(page, 'session.models.add(mlp(7), "m3"); print("added")');
    await expect(store.locator('.diffract-model[data-model="m3"]')).toBeVisible({ timeout: 15000 });

    await panel.locator('.diffract-open').click();
    // wait for the inserted cell itself (its marker comment), not for a count that is already true
    const marker = 'opened from the "Weight runs" sidebar';
    let idx = -1;
    await expect
      .poll(
        async () => {
          const n = await page.notebook.getCellCount();
          idx = -1;
          for (let i = n - 1; i >= 0 && idx < 0; i--) {
            if ((await page.notebook.getCellTextInput(i)).includes(marker)) {
              idx = i;
            }
          }
          return idx;
        },
        { timeout: 15000 }
      )
      .toBeGreaterThanOrEqual(0);
    const inserted = await page.notebook.getCellTextInput(idx);
    // a fresh name (the notebook's `session` stays the user's), the model and the chosen field
    expect(inserted).toContain('runs_session = Session(path=".diffract", readonly=True)');
    expect(inserted).toContain('runs_scope = runs_session.filter(model_ids=["m1"])');
    expect(inserted).toContain('FieldPanel(runs_scope, "frob_norm")');
    expect(inserted).not.toMatch(/(^|\n)session =/);
    await page.notebook.runCell(idx);
    await expect.poll(async () => outputText(page, idx)).toMatch(/\['m1'\] 8 slices; fields: \[.*'frob_norm'.*'stable_rank'/);
    const check = await runCode(page, 'print("still", type(session).__name__, session.readonly, type(runs_session).__name__, runs_session.readonly)');
    await expect.poll(async () => outputText(page, check)).toContain('still Session False Session True');
    await shot(page, theme === 'light' ? 'sidebar-open-in-notebook' : `sidebar-open-in-notebook-${theme}-${width}`);
    // a second insert takes the next free name
    await panel.locator('.diffract-open').click();
    await expect
      .poll(async () => {
        const n = await page.notebook.getCellCount();
        for (let i = n - 1; i >= 0; i--) {
          const t = await page.notebook.getCellTextInput(i);
          if (t.includes('runs_session_2 = Session(')) {
            return true;
          }
        }
        return false;
      }, { timeout: 15000 })
      .toBe(true);
  });
  }

  test('magics run in a notebook', async ({ page }) => {
    await page.notebook.createNew('magics.ipynb');
    await runCode(page, '%load_ext diffract');
    await runCode(page, 'import numpy as np\nw = {f"l{i}.weight": np.random.default_rng(i).normal(size=(32, 16)) for i in range(3)}\nsession = %diffract open');
    let idx = await runCode(page, '%diffract add w --id tiny');
    await expect.poll(async () => outputText(page, idx)).toContain("added 3 slices as 'tiny'");
    await runCode(page, '%diffract compute frob_norm stable_rank');
    await expect(page.locator('.diffract-progress').last()).toHaveAttribute('data-status', 'done', { timeout: 30000 });
    await runCode(page, '%diffract show frob_norm');
    await expect(page.locator('.diffract-panel-status').last()).toContainText('3 values');
    idx = await runCode(page, '%diffract runs');
    await expect.poll(async () => outputText(page, idx)).toContain('tiny');
    idx = await runCode(page, '%diffract compute not_a_field');
    await expect.poll(async () => outputText(page, idx)).toContain('UsageError');
    expect(await outputText(page, idx)).not.toContain('Traceback');
    await shot(page, 'magics');
  });
});

test.describe('sidebar states', () => {
  test('version mismatch, server errors and the empty state explain what to do', async ({ page, consoleGuard }) => {
    // this test answers /diffract/api/stores with a 404 itself; Chromium logs every failed
    // resource load as a console error
    consoleGuard.allow(/\/diffract\/api\/stores/, 'the 404 this test routes on purpose');
    await page.route('**/diffract/api/version*', route => route.fulfill({ json: { version: '0.0.0-old', api: 1, package: 'diffract-lab' } }));
    await page.route('**/diffract/api/stores*', route => route.fulfill({ json: { root: '', stores: [] } }));
    await page.reload();
    await page.locator('.jp-SideBar [data-id="diffract-runs"]').click();
    const panel = page.locator('#diffract-runs');
    const version = panel.locator('.diffract-version');
    await expect(version).toBeVisible();
    await expect(version).toContainText('Version mismatch');
    await expect(version).toContainText('0.0.0-old');
    await expect(version).toContainText('pip install "diffract-lab==0.0.0-old"');
    await expect(panel.locator('.diffract-empty')).toContainText('No diffract stores under this folder yet');
    await shot(page, 'sidebar-version-mismatch', panel);

    await page.route('**/diffract/api/stores*', route => route.fulfill({ status: 404, json: { error: 'not found' } }));
    await panel.locator('.diffract-reload').click();
    await expect(panel.locator('.diffract-banner.diffract-error')).toContainText('jupyter server extension enable diffract');
  });
});

// The guard itself: each of these must fail (test.fail), so a guard that lets errors through
// turns them red.
test.describe('console guard', () => {
  test('a console error fails the test', async ({ page }) => {
    test.fail();
    await page.evaluate(() => console.error('diffract-ui: a deliberate console error'));
  });

  test('an uncaught page error fails the test', async ({ page }) => {
    test.fail();
    await page.evaluate(() => {
      window.setTimeout(() => {
        throw new Error('diffract-ui: a deliberate uncaught error');
      });
    });
    await page.waitForTimeout(200); // let the timer fire
  });

  test('a deprecation warning fails the test', async ({ page }) => {
    test.fail();
    await page.evaluate(() => console.warn("[anywidget] Deprecation Warning for test: Direct export of a 'render'"));
  });
});
