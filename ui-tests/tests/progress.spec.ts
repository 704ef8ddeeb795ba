import { expect, test } from './fixtures';
import type { Locator } from '@playwright/test';
import { newNotebookWithStore, outputText, plotTraces, runCode, shot } from './helpers';

/** A kernel that fails on the first layer of each model. */
const FAILING = `
import diffract

@diffract.kernel(outputs="first_fails", min_ndim=2, replace=True)
def first_fails(weights):
    if 24 in weights.shape:
        raise ValueError("no norm for a first layer")
    return 1.0
`;

/** The first number of a "3/8 ..." text in `loc`. */
async function first(loc: Locator): Promise<number> {
  return Number(((await loc.textContent()) ?? '').split('/')[0]);
}

/** Mid-run checks on a running progress widget of 8 slow slices in one chunk. */
async function expectLive(w: Locator): Promise<void> {
  await expect(w).toHaveAttribute('data-status', 'running');
  await expect(w.locator('.diffract-chunks')).toHaveText('0/1');
  // the kernel in progress, with its slices in this chunk, moves before the chunk ends
  await expect(w.locator('.diffract-current')).toHaveText(/^slow_norm on m[12]:layers\.\d\.weight$/, { timeout: 20000 });
  await expect(w.locator('.diffract-detail-text')).toHaveText(/^kernel slow_norm \(1 of 1\): [2-7]\/8 slices · step [2-7]\/8$/);
  await expect(w.locator('.diffract-counter')).toHaveText(/^[2-7] of 8 requested values$/);
  await expect(w.locator('.diffract-slices')).toHaveText(/^[2-7]\/8/);
  await expect(w).toHaveAttribute('data-status', 'running');
  // the clock ticks between messages, the ETA is given
  const t0 = await w.locator('.diffract-elapsed').textContent();
  await w.page().waitForTimeout(1200);
  expect(await w.locator('.diffract-elapsed').textContent()).not.toBe(t0);
  await expect(w.locator('.diffract-eta')).toHaveText(/^(estimating…|about .+)$/);
  // values finished inside the chunk are committed as it goes (every 2 s)
  await expect(w.locator('.diffract-slices')).toHaveText(/^[2-8]\/8 \([1-7] stored\)$/, { timeout: 20000 });
  await expect(w).toHaveAttribute('data-status', 'running');
}

async function expectDone(w: Locator): Promise<void> {
  await expect(w).toHaveAttribute('data-status', 'done', { timeout: 30000 });
  await expect(w.locator('.diffract-slices')).toHaveText('8/8');
  await expect(w.locator('.diffract-chunks')).toHaveText('1/1');
  await expect(w.locator('.diffract-kernel-calls')).toHaveText('8');
  await expect(w.locator('.diffract-outcome')).toHaveText(/^done: 8 computed · 0 already stored · 8 not applicable \(requested values\)$/);
  await expect(w.locator('.diffract-cancel')).toBeHidden();
  await expect(w.locator('.diffract-now')).toBeHidden();
  await expect(w.locator('.diffract-eta-item')).toBeHidden();
  await expect(w.locator('[role=progressbar]')).toHaveAttribute('aria-valuenow', '100');
}

for (const [theme, width] of [
  ['light', 1400],
  ['dark', 900]
] as const) {
  test(`a default run (one chunk) shows its slices and time as it goes, then how it ended (${theme}, ${width} px)`, async ({ page, tmpPath }) => {
    await page.setViewportSize({ width, height: 900 });
    if (theme === 'dark') {
      await page.theme.setDarkTheme();
    }
    await newNotebookWithStore(page, tmpPath, `progress-${theme}.ipynb`);
    // the default memory budget: all 8 weight slices in one chunk, one worker, 0.9 s a slice
    await runCode(page, 'run = run_with_progress(session, "slow_norm", delay=0.9, workers=1)\nrun');
    const w = page.locator('.diffract-progress').last();
    await expectLive(w);
    await shot(page, `progress-live-${theme}-${width}`, w);
    await expectDone(w);
    await shot(page, `progress-done-${theme}-${width}`, w);
    const idx = await runCode(page, 'print("stored", sum(r.get("slow_norm") is not None for r in session.results.export_metrics("slow_norm", export_format="list")))');
    await expect.poll(async () => outputText(page, idx)).toContain('stored 8');
  });
}

test('a blocking apply in the kernel\'s main thread updates the widget while the cell runs', async ({ page, tmpPath }) => {
  await newNotebookWithStore(page, tmpPath, 'progress-blocking.ipynb');
  await page.notebook.addCell('code', 'report = session.compute.apply("slow_norm", delay=0.9, workers=1)\nprint("blocking done", report.computed)');
  const idx = (await page.notebook.getCellCount()) - 1;
  await page.notebook.runCell(idx, { wait: false });
  const w = page.locator('.diffract-progress').last();
  await expect(w).toBeVisible({ timeout: 30000 });
  await expect(w.locator('.diffract-detail-text')).toHaveText(/[2-7]\/8 slices/, { timeout: 20000 });
  expect(await outputText(page, idx)).not.toContain('blocking done');
  const n = await first(w.locator('.diffract-slices'));
  await expect.poll(async () => first(w.locator('.diffract-slices')), { timeout: 20000 }).toBeGreaterThan(n);
  await shot(page, 'progress-blocking', w);
  await expect.poll(async () => outputText(page, idx), { timeout: 30000 }).toContain('blocking done 8');
  await expect(w).toHaveAttribute('data-status', 'done');
  await expect(w.locator('.diffract-slices')).toHaveText('8/8');
});

test('failures: slice, kernel and message in an expandable list (light and dark, 1400 and 900 px)', async ({ page, tmpPath }) => {
  await newNotebookWithStore(page, tmpPath, 'progress-failures.ipynb');
  // the first layer of each model is the only matrix with a side of 24 (a module: the notebook
  // editor would re-indent a function typed into a cell)
  await page.contents.uploadContent(FAILING, 'text', `${tmpPath}/ui_failing.py`);
  await runCode(page, 'import ui_failing\nfailing = run_with_progress(session, "first_fails")\nfailing');
  const w = page.locator('.diffract-progress').last();
  await expect(w).toHaveAttribute('data-status', 'done', { timeout: 30000 });
  await expect(w.locator('.diffract-failures')).toHaveText('2');
  await expect(w.locator('.diffract-outcome')).toHaveText(/^done: 6 computed · 0 already stored · 8 not applicable · 2 failed \(requested values\)$/);
  const list = w.locator('.diffract-failure-list');
  await expect(list.locator('summary')).toHaveText('2 failures');
  await list.locator('summary').click();
  await expect(list.locator('.diffract-failure')).toHaveCount(2);
  await expect(list.locator('.diffract-failure').first().locator('td')).toHaveText(['m1:layers.0.weight', 'first_fails', 'ValueError: no norm for a first layer']);
  await expect(list.locator('.diffract-failure').nth(1).locator('td').first()).toHaveText('m2:layers.0.weight');
  for (const width of [1400, 900]) {
    await page.setViewportSize({ width, height: 900 });
    await page.theme.setLightTheme();
    await shot(page, `progress-failures-light-${width}`, w);
    await page.theme.setDarkTheme();
    await shot(page, `progress-failures-dark-${width}`, w);
  }
  await page.theme.setLightTheme();
  // everything stored: nothing to compute, no Cancel
  await runCode(page, 'run_with_progress(session, "slow_norm", delay=0.0)');
  await expect(page.locator('.diffract-progress').last()).toHaveAttribute('data-status', 'done', { timeout: 30000 });
  await runCode(page, 'run_with_progress(session, "slow_norm")');
  const again = page.locator('.diffract-progress').last();
  await expect(again.locator('.diffract-outcome')).toHaveText(/^nothing to compute/, { timeout: 20000 });
  await expect(again.locator('.diffract-cancel')).toBeHidden();
  await shot(page, 'progress-nothing-to-compute', again);
});

test('a live panel fills while the one chunk of a default run goes on', async ({ page, tmpPath }) => {
  await newNotebookWithStore(page, tmpPath, 'progress-panel.ipynb');
  await runCode(page, 'panel = FieldPanel(session, "slow_norm", kind="line")\npanel');
  const status = page.locator('.diffract-panel-status');
  await expect(status).toContainText('nothing stored yet');
  await runCode(page, 'run = run_with_progress(session, "slow_norm", delay=0.9, workers=1)\nrun');
  const w = page.locator('.diffract-progress').last();
  await expect(w.locator('.diffract-chunks')).toHaveText('0/1');
  // values committed inside the chunk reach the panel before the run ends
  await expect(status).toContainText(/\b[1-7] values\b/, { timeout: 20000 });
  const plot = page.locator('.diffract-panel').first();
  // and the plot draws them (points in its traces), still before the run ends
  await expect.poll(async () => (await plotTraces(plot)).reduce((n, t) => n + (t.y as number[]).length, 0), { timeout: 10000 }).toBeGreaterThan(0);
  await expect(w).toHaveAttribute('data-status', 'running');
  await expect(w.locator('.diffract-chunks')).toHaveText('0/1');
  await shot(page, 'progress-live-panel', plot);
  await expect(w).toHaveAttribute('data-status', 'done', { timeout: 30000 });
  await expect(status).toContainText('8 values', { timeout: 20000 });
});
