import { expect, test } from '@jupyterlab/galata';
import { newNotebookWithStore, outputText, runCode, shot } from './helpers';

test.describe('widget kit', () => {
  test('filter builder: build a filter, the count updates, the scope computes', async ({ page, tmpPath }) => {
    await newNotebookWithStore(page, tmpPath, 'filter.ipynb');
    await runCode(page, 'fb = session.utils.filter_builder()\nfb');
    const w = page.locator('.diffract-filter');
    await expect(w).toBeVisible();
    const count = w.locator('.diffract-count');
    await expect(count).toHaveText('16 of 16 slices');

    await w.locator('.diffract-names').fill('re:layers\\.[01]\\..*');
    await expect(count).toHaveText('8 of 16 slices');
    await w.locator('.diffract-model-chip[data-value="m1"]').click();
    await expect(count).toHaveText('4 of 16 slices');
    await w.locator('.diffract-type-chip[data-value="dense"]').click();
    await expect(count).toHaveText('2 of 16 slices');
    await expect(w.locator('.diffract-preview tbody tr')).toHaveCount(2);

    // a bad pattern is an inline error, then fixed
    await w.locator('.diffract-names').fill('re:layers.((');
    await expect(w.locator('.diffract-error')).toContainText('invalid regular expression');
    await expect(count).toHaveText('invalid filter');
    await shot(page, 'filter-builder-error', w);
    await w.locator('.diffract-names').fill('re:layers\\.[01]\\..*');
    await expect(count).toHaveText('2 of 16 slices');
    await expect(w.locator('.diffract-json')).toContainText('"model_ids":["m1"]');
    await shot(page, 'filter-builder', w);

    const idx = await runCode(
      page,
      'sc = fb.scope\nr = sc.compute.apply("frob_norm", progress=False)\n' +
        'print("scope", len(sc), r.ok, sc.filter_chain == session.filter(model_ids=["m1"], param_names=["re:layers\\\\.[01]\\\\..*"], param_types=["dense"]).filter_chain, sc.results.fields())'
    );
    await expect.poll(async () => outputText(page, idx)).toContain("scope 2 True True ['frob_norm'");
  });

  test('progress: advances, Cancel stops early and keeps finished fields', async ({ page, tmpPath }) => {
    await newNotebookWithStore(page, tmpPath, 'progress.ipynb');
    // 8 weight slices, one per chunk, 1.2 s each
    await runCode(page, 'run = run_with_progress(session, "slow_norm", memory_budget=1, delay=1.2)\nrun');
    const w = page.locator('.diffract-progress');
    await expect(w).toBeVisible();
    await expect(w).toHaveAttribute('data-status', 'running');
    await expect.poll(async () => Number((await w.locator('.diffract-chunks').textContent())!.split('/')[0]), { timeout: 30000 }).toBeGreaterThanOrEqual(2);
    await expect(w.locator('.diffract-current')).toContainText('slow_norm @ layers.');
    await shot(page, 'progress-running', w);
    // the kernel is idle while the run goes on, so it receives the click
    await w.locator('.diffract-cancel').click();
    await expect(w).toHaveAttribute('data-status', 'cancelled', { timeout: 20000 });
    const done = Number((await w.locator('.diffract-chunks').textContent())!.split('/')[0]);
    expect(done).toBeGreaterThanOrEqual(2);
    expect(done).toBeLessThan(8);
    await shot(page, 'progress-cancelled', w);
    const idx = await runCode(
      page,
      'rows = session.results.export_metrics("slow_norm", export_format="list")\n' +
        'kept = sum(r["slow_norm"] is not None for r in rows)\n' +
        'print("cancelled", run.report.cancelled, "kept", kept, "chunks", run.report.chunks, kept == run.report.chunks)'
    );
    await expect.poll(async () => outputText(page, idx)).toMatch(/cancelled True kept \d+ chunks \d+ True/);

    // `await run`: the cell stays busy until the run ends, and the click still reaches the kernel
    await page.notebook.addCell(
      'code',
      'session.compute.erase("slow_norm")\nr2 = run_with_progress(session, "slow_norm", memory_budget=1, delay=1.2, display=True)\n' +
        'report = await r2\nprint("awaited", report.cancelled, report.chunks)'
    );
    const idx2 = (await page.notebook.getCellCount()) - 1;
    await page.notebook.runCell(idx2, { wait: false });
    const w2 = page.locator('.diffract-progress').last();
    await expect(w2).toHaveAttribute('data-status', 'running');
    await expect.poll(async () => Number((await w2.locator('.diffract-chunks').textContent())!.split('/')[0]), { timeout: 30000 }).toBeGreaterThanOrEqual(1);
    await w2.locator('.diffract-cancel').click();
    await expect(w2).toHaveAttribute('data-status', 'cancelled', { timeout: 20000 });
    await expect.poll(async () => outputText(page, idx2), { timeout: 20000 }).toMatch(/awaited True [1-7]\b/);
  });

  test('panel: updates live while a computation lands fields', async ({ page, tmpPath }) => {
    await newNotebookWithStore(page, tmpPath, 'panel.ipynb');
    await runCode(page, 'panel = FieldPanel(session, "slow_norm", kind="line")\npanel');
    const status = page.locator('.diffract-panel-status');
    await expect(status).toContainText('nothing stored yet');
    await runCode(page, 'run = run_with_progress(session, "slow_norm", memory_budget=1, delay=1.0)');
    await expect(status).toContainText(/\d+ values/, { timeout: 30000 });
    const first = Number((await status.textContent())!.match(/(\d+) values/)![1]);
    await expect.poll(async () => Number((await status.textContent())!.match(/(\d+) values/)![1]), { timeout: 30000 }).toBeGreaterThan(first);
    await expect(status).toContainText('8 values', { timeout: 30000 });
    const plot = page.locator('.diffract-panel .js-plotly-plot');
    await expect(plot.locator('.scatterlayer .trace')).toHaveCount(2);
    await shot(page, 'panel-live', page.locator('.diffract-panel'));
    // hover shows model, name, type, value
    const idx = await runCode(page, 'print(list(panel.figure.data[0].customdata[0]))');
    await expect.poll(async () => outputText(page, idx)).toContain("'m1', 'layers.0.weight', 'dense'");
    await page.theme.setDarkTheme();
    await shot(page, 'panel-dark', page.locator('.diffract-panel'));
    await page.theme.setLightTheme();
    // the other kinds: ESD with its power-law fit, heatmap layer x model
    await runCode(
      page,
      'session.compute.apply("esd", "pl_alpha", "pl_esd_xmin", progress=False)\n' +
        'esd = FieldPanel(session, kind="esd", slice="layers.1.weight", model_id="m1")\nesd'
    );
    const esd = page.locator('.diffract-panel').last();
    await expect(esd.locator('.scatterlayer .trace')).toHaveCount(2);
    await shot(page, 'panel-esd', esd);
    await runCode(page, 'FieldPanel(session, "slow_norm", kind="heatmap")');
    await expect(page.locator('.diffract-panel').last().locator('.heatmaplayer, .hm')).not.toHaveCount(0);
    await shot(page, 'panel-heatmap', page.locator('.diffract-panel').last());
  });
});
