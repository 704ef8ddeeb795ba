/**
 * Issue 29 point 5, the sidebar in a browser: layer ticks "index short-name", no stale message
 * over a figure, the spectrum opened into view with its title whole, a visible caret, "N model(s)"
 * with write batches only in the tooltip, long ids on one line (ellipsis, whole id as tooltip).
 * Screenshots at 1400 and 900 px, light and dark: ui-tests/screenshots/sidebar-polish-*.png
 * (copied to docs/img).
 */
import { expect, test } from './fixtures';
import { newNotebookWithStore, runCode, shot } from './helpers';

const LONG_ID = 'bert-base-uncased-finetuned-sst2-seed-000042-checkpoint-step-001200';

for (const width of [1400, 900]) {
  test(`sidebar polish at ${width} px`, async ({ page, tmpPath }) => {
    await page.setViewportSize({ width, height: 900 });
    await newNotebookWithStore(page, tmpPath, `polish${width}.ipynb`);
    await runCode(
      page,
      `_ = None if "${LONG_ID}" in session.models else session.models.add(mlp(7), "${LONG_ID}")\n` +
        'session.compute.apply("frob_norm", "esd", "pl_alpha", progress=False); print("computed")'
    );
    await page.locator('.jp-SideBar [data-id="diffract-runs"]').click();
    const panel = page.locator('#diffract-runs');
    const store = panel.locator(`.diffract-store[data-path="${tmpPath}/.diffract"]`);
    await expect(store).toBeVisible({ timeout: 15000 });
    const row = store.locator('.diffract-store-row');
    // no "segments" on the row; what they are is in its tooltip
    await expect(row).not.toContainText('segment');
    await expect(row).toHaveAttribute('title', /write batch(es)? on disk/);
    // the caret is readable: its colour contrasts with the panel like body text
    const caretColour = await row.locator('.diffract-caret').evaluate(el => getComputedStyle(el).color);
    const textColour = await row.locator('.diffract-store-name').evaluate(el => getComputedStyle(el).color);
    expect(caretColour).toBe(textColour);
    await row.click();
    await expect(store.locator('.diffract-store-meta')).toHaveText(/^3 models · /);
    // a long id: one line, cut with an ellipsis, whole in its tooltip
    const longRow = store.locator(`.diffract-model[data-model="${LONG_ID}"]`);
    const idSpan = longRow.locator('.diffract-id-text');
    await expect(idSpan).toHaveAttribute('title', LONG_ID);
    const box = await idSpan.evaluate(el => ({ h: el.getBoundingClientRect().height, lh: parseFloat(getComputedStyle(el).lineHeight) || 16, cut: el.scrollWidth > el.clientWidth }));
    expect(box.h).toBeLessThan(box.lh * 1.6);
    expect(box.cut).toBe(true);
    await shot(page, `sidebar-polish-${width}-list-light`, panel);
    await page.theme.setDarkTheme();
    await shot(page, `sidebar-polish-${width}-list-dark`, panel);
    await page.theme.setLightTheme();
    await store.locator('.diffract-model[data-model="m1"]').click();
    // esd first (a message: no per-layer numbers), then a per-layer field: the message goes
    await panel.locator('.diffract-toggle-arrays').click();
    await panel.locator('.diffract-field[data-field="esd"]').click();
    const chart = panel.locator('.diffract-chart');
    await expect(chart.locator('.diffract-empty')).toContainText('no per-layer numbers');
    await panel.locator('.diffract-field[data-field="frob_norm"]').click();
    await expect(chart).toHaveAttribute('data-points', '4', { timeout: 20000 });
    await expect(chart.locator('.diffract-empty')).toHaveCount(0);
    // x ticks: depth index and a short name telling the layers apart
    await expect(chart.locator('.xtick text')).toHaveText(['0 layers.0', '1 layers.1', '2 layers.2', '3 layers.3']);
    // a clicked point opens its spectrum, scrolled into view, its title inside the figure
    await chart.evaluate((gd: any) => gd.emit('plotly_click', { points: [{ customdata: gd.data[0].customdata[2] }] }));
    const esd = panel.locator('.diffract-esd');
    await expect(esd).toHaveAttribute('data-eigenvalues', /\d+/, { timeout: 20000 });
    await expect(panel.locator('.diffract-esd-head')).toBeInViewport();
    await expect(esd.locator('.gtitle')).toBeInViewport();
    const fits = await esd.evaluate(el => {
      const svg = el.querySelector('svg.main-svg')!.getBoundingClientRect();
      const t = el.querySelector('.gtitle')!.getBoundingClientRect();
      return t.left >= svg.left - 1 && t.right <= svg.right + 1 && t.top >= svg.top - 1;
    });
    expect(fits).toBe(true);
    await shot(page, `sidebar-polish-${width}-light`, panel);
    await page.theme.setDarkTheme();
    await shot(page, `sidebar-polish-${width}-dark`, panel);
    await page.theme.setLightTheme();
  });
}
