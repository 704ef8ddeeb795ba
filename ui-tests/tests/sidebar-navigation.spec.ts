/**
 * The sidebar that navigates (issue 16 point 3, issue 19 point 4): a width that fits ids and
 * times and follows a drag, a sortable model table, a tracked run's checkpoints under one row
 * in step order, "changed" following the fields (not when a model was added), and a chart
 * point opening that slice's spectrum. Light and dark themes, 1400 and 900 px windows.
 */
import type { Locator } from '@playwright/test';

import { expect, test } from './fixtures';
import { dragSidebarEdge, newNotebookWithStore, outputText, runCode, shot } from './helpers';

/** Tracked checkpoints, added out of step order, with ids whose string order is not the step's. */
const CHECKPOINTS = [
  // one line per statement: the cell editor would re-indent a block
  '_ = [session.models.add(mlp(s % 5), f"train-{s}", meta={"track": {"run": "train", "step": s}}) for s in (100, 9, 10)]',
  'session.compute.apply("frob_norm", "esd", "pl_alpha", progress=False)',
  'print("checkpoints", len(session.models.ids()))'
].join('\n');

async function rowIds(table: Locator): Promise<string[]> {
  return table.locator('tr.diffract-run, tr.diffract-model').evaluateAll(rows => rows.map(r => ((r as HTMLElement).dataset.run ? `run:${(r as HTMLElement).dataset.run}` : (r as HTMLElement).dataset.model!)));
}

for (const width of [1400, 900]) {
  test(`sidebar at ${width} px: width, sorting, tracked run, changed time, a point's ESD, both themes`, async ({ page, tmpPath }) => {
    test.setTimeout(240000);
    await page.setViewportSize({ width, height: 1000 });
    await newNotebookWithStore(page, tmpPath, `side2-${width}.ipynb`);
    const idx = await runCode(page, CHECKPOINTS);
    await expect.poll(async () => outputText(page, idx), { timeout: 90000 }).toContain('checkpoints 5');
    await page.locator('.jp-SideBar [data-id="diffract-runs"]').click();
    const panel = page.locator('#diffract-runs');

    // a default width where ids wrap at most once and the time column stays whole
    const w0 = (await panel.boundingBox())!.width;
    expect(w0).toBeGreaterThanOrEqual(299);

    const store = panel.locator(`.diffract-store[data-path="${tmpPath}/.diffract"]`);
    await expect(store).toBeVisible({ timeout: 15000 });
    await store.locator('.diffract-store-row').click();
    const table = store.locator('table.diffract-models');
    // the run is one row with its step range; its checkpoints open in step order
    const run = table.locator('tr.diffract-run[data-run="train"]');
    await expect(run).toContainText('steps 9–100 (3 checkpoints)');
    expect(await rowIds(table)).toEqual(['run:train', 'm1', 'm2']);
    await run.click();
    expect(await rowIds(table)).toEqual(['run:train', 'train-9', 'train-10', 'train-100', 'm1', 'm2']);
    await expect(table.locator('tr.diffract-checkpoint .diffract-model-id')).toHaveText(['step 9', 'step 10', 'step 100']);
    // nothing runs past the panel's edge: the table's columns share its width
    const overflow = async () => table.evaluate(t => ({ table: t.getBoundingClientRect().right, panel: t.closest('#diffract-runs')!.getBoundingClientRect().right, scroll: t.closest('#diffract-runs')!.scrollWidth - t.closest('#diffract-runs')!.clientWidth }));
    const o = await overflow();
    expect(o.table, JSON.stringify(o)).toBeLessThanOrEqual(o.panel);
    expect(o.scroll, JSON.stringify(o)).toBeLessThanOrEqual(0);

    // sortable: by model (numbers as numbers), descending, then back to the server's order
    const head = (key: string) => table.locator(`th[data-sort="${key}"]`);
    await head('model').click();
    await expect(head('model')).toHaveAttribute('aria-sort', 'ascending');
    expect(await rowIds(table)).toEqual(['m1', 'm2', 'run:train', 'train-9', 'train-10', 'train-100']);
    await head('model').click();
    expect(await rowIds(table)).toEqual(['run:train', 'train-9', 'train-10', 'train-100', 'm2', 'm1']);
    await head('model').click();
    await expect(head('model')).toHaveAttribute('aria-sort', 'none');

    // "changed" follows the fields: a field computed on m2 alone moves m2's time, not m1's
    const changed = (m: string) => table.locator(`tr.diffract-model[data-model="${m}"] .diffract-time`);
    const m1Before = await changed('m1').textContent();
    const m2Before = await changed('m2').textContent();
    const j = await runCode(page, 'time.sleep(1.2)\nsession.filter(model_ids="m2").compute.apply("stable_rank", progress=False)\nprint("m2 done")');
    await expect.poll(async () => outputText(page, j), { timeout: 60000 }).toContain('m2 done');
    await expect(changed('m2')).not.toHaveText(m2Before!, { timeout: 15000 }); // the 3 s poll
    await expect(changed('m1')).toHaveText(m1Before!);
    await head('changed').click(); // newest first
    expect((await rowIds(table))[0]).toBe('m2');
    await head('changed').click();
    await head('changed').click();

    // a checkpoint's chart: click a point, its spectrum opens under the chart with xmin marked
    await table.locator('tr.diffract-model[data-model="train-10"]').click();
    await panel.locator('.diffract-field[data-field="pl_alpha"]').click();
    const chart = panel.locator('.diffract-chart');
    await expect(chart).toHaveAttribute('data-points', '4', { timeout: 20000 });
    await chart.evaluate((gd: any) => gd.emit('plotly_click', { points: [{ customdata: gd.data[0].customdata[1] }] }));
    await expect(chart).toHaveAttribute('data-copied', 'layers.1.weight');
    const esd = panel.locator('.diffract-esd');
    await expect(esd).toHaveAttribute('data-eigenvalues', '48', { timeout: 15000 }); // a 48 x 48 weight
    expect(Number(await esd.getAttribute('data-xmin'))).toBeGreaterThan(0);
    await expect(panel.locator('.diffract-esd-head')).toContainText('spectrum of layers.1.weight (train-10)');
    // the figure route's esd figure (diffract.viz): the log-binned density, the fit, the xmin line
    const metas = await esd.evaluate((gd: any) => (gd.data as { meta?: string }[]).map(t => t.meta ?? ''));
    expect(metas[0]).toBe('eigenvalue');
    expect(metas.filter(m => m === 'xmin')).toHaveLength(1);
    const density = await esd.evaluate((gd: any) => gd.data[0].y as number[]);
    expect(density.length).toBeGreaterThan(0);
    expect(density.every(d => d > 0)).toBe(true);
    // its x axis reads eigenvalues as numbers, not SI prefixes (10n, 1μ)
    const ticks = await esd.locator('.xtick text').allTextContents();
    expect(ticks.length).toBeGreaterThan(0);
    expect(ticks.filter(t => /[0-9][nμmk]$/.test(t)), ticks.join(' | ')).toEqual([]);
    await shot(page, `sidebar2-${width}-light`, panel);
    await panel.locator('.diffract-esd-box').scrollIntoViewIfNeeded();
    await shot(page, `sidebar2-esd-${width}-light`, panel.locator('.diffract-esd-box'));

    // dragging the sidebar's edge wider: the panel and its charts follow
    await dragSidebarEdge(page, 120);
    await expect.poll(async () => (await panel.boundingBox())!.width).toBeGreaterThan(w0 + 100);
    await expect
      .poll(async () => esd.evaluate((gd: any) => gd._fullLayout.width as number))
      .toBeGreaterThan(w0 + 60);

    await page.theme.setDarkTheme();
    await expect(panel.locator('.diffract-esd-head')).toBeVisible();
    const dark = await panel.evaluate(el => getComputedStyle(el).backgroundColor);
    expect(dark).not.toBe('rgb(255, 255, 255)');
    await shot(page, `sidebar2-esd-${width}-dark`, panel.locator('.diffract-esd-box'));
    await panel.evaluate(el => el.scrollTo(0, 0));
    await shot(page, `sidebar2-${width}-dark`, panel);
    // closing the spectrum
    await panel.locator('.diffract-esd-close').click();
    await expect(panel.locator('.diffract-esd-box')).toBeHidden();
    await page.theme.setLightTheme();
  });
}
