import { expect, test } from './fixtures';
import { expectAllClose, newNotebookWithStore, outputText, plotTraces, printedJson, runCode, shot } from './helpers';

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
    await expect(w.locator('.diffract-current')).toContainText(/slow_norm on m[12]:layers\./);
    await shot(page, 'progress-running', w);
    // the kernel is idle while the run goes on, so it receives the click
    await w.locator('.diffract-cancel').click();
    await expect(w).toHaveAttribute('data-status', 'cancelled', { timeout: 20000 });
    const done = Number((await w.locator('.diffract-chunks').textContent())!.split('/')[0]);
    expect(done).toBeGreaterThanOrEqual(2);
    expect(done).toBeLessThan(8);
    // after the end: no Cancel, no "now", and counts from the report
    await expect(w.locator('.diffract-cancel')).toBeHidden();
    await expect(w.locator('.diffract-now')).toBeHidden();
    await expect(w.locator('.diffract-outcome')).toContainText(/^cancelled: kept \d+ computed value\(s\) · 8 not applicable · \d+ not computed \(run again to finish\)$/);
    await expect(w.locator('.diffract-progress-status')).toHaveText('cancelled: finished values kept');
    expect(Number(await w.locator('[role=progressbar]').getAttribute('aria-valuenow'))).toBeLessThan(100);
    await shot(page, 'progress-cancelled', w);
    const idx = await runCode(
      page,
      'rows = session.results.export_metrics("slow_norm", export_format="list")\n' +
        'kept = sum(r.get("slow_norm") is not None for r in rows)\n' +
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

  test('progress inside one chunk, a ticking clock, done, nothing to compute', async ({ page, tmpPath }) => {
    await newNotebookWithStore(page, tmpPath, 'progress2.ipynb');
    // the default memory budget: all 8 slices in one chunk (one worker: one slice after another)
    await runCode(page, 'run = run_with_progress(session, "slow_norm", delay=0.8, workers=1)\nrun');
    const w = page.locator('.diffract-progress').last();
    await expect(w).toHaveAttribute('data-status', 'running');
    await expect(w.locator('.diffract-chunks')).toHaveText('0/1');
    // slices move inside the one chunk (run/chunks.py emits an event per kernel call)
    await expect(w.locator('.diffract-slices')).toHaveText(/^[1-7]\/8/, { timeout: 20000 });
    const t0 = await w.locator('.diffract-elapsed').textContent();
    await page.waitForTimeout(1300);
    expect(await w.locator('.diffract-elapsed').textContent()).not.toBe(t0);
    await shot(page, 'progress-in-chunk', w);
    await expect(w).toHaveAttribute('data-status', 'done', { timeout: 30000 });
    await expect(w.locator('.diffract-slices')).toHaveText('8/8');
    await expect(w.locator('.diffract-outcome')).toHaveText(/^done: 8 computed · 0 already stored/);
    await expect(w.locator('.diffract-cancel')).toBeHidden();
    await expect(w.locator('.diffract-now')).toBeHidden();
    await expect(w.locator('.diffract-progress-title')).toHaveText('slow_norm on 8 slices');
    await shot(page, 'progress-done', w);
    // everything stored: says so
    await runCode(page, 'run_with_progress(session, "slow_norm")');
    const again = page.locator('.diffract-progress').last();
    await expect(again.locator('.diffract-outcome')).toHaveText(/^nothing to compute/, { timeout: 20000 });
    // the failures list in the browser: ui-tests/tests/progress.spec.ts
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
    // the Frobenius norms straight from the weights (not from the store): what every panel must show
    const refIdx = await runCode(
      page,
      'import json\nREF = {m: {n: float(np.sqrt((w.astype("float64") ** 2).sum())) for n, w in mlp(i).items() if w.ndim == 2} for i, m in enumerate(["m1", "m2"])}\n' +
        'print("REF" + json.dumps(REF))'
    );
    const ref = await printedJson<Record<string, Record<string, number>>>(page, refIdx, 'REF');
    expect(Object.keys(ref.m1)).toHaveLength(4);
    const line = page.locator('.diffract-panel').first();
    await expect(line.locator('.scatterlayer .trace')).toHaveCount(2);
    const lineTraces = await plotTraces(line);
    expect(lineTraces.map(t => t.name)).toEqual(['m1', 'm2']);
    for (const t of lineTraces) {
      const names = t.customdata.map(c => c[1]);
      expect(names).toEqual(['layers.0.weight', 'layers.1.weight', 'layers.2.weight', 'layers.3.weight']);
      expectAllClose(t.y as number[], names.map(n => ref[t.name!][n]), 1e-5, `line ${t.name}`);
    }
    await shot(page, 'panel-live', line);
    // hover shows model, name, type, value
    const idx = await runCode(page, 'print(list(panel.figure.data[0].customdata[0]))');
    await expect.poll(async () => outputText(page, idx)).toContain("'m1', 'layers.0.weight', 'dense'");
    await page.theme.setDarkTheme();
    await shot(page, 'panel-dark', line);
    await page.theme.setLightTheme();

    // ESD with its power-law fit: the histogram holds every stored eigenvalue, the fit line starts
    // at the stored xmin with slope -alpha on log-log axes
    const esdIdx = await runCode(
      page,
      'session.compute.apply("esd", "pl_alpha", "pl_esd_xmin", progress=False)\n' +
        'esd = FieldPanel(session, kind="esd", slice="layers.1.weight", model_id="m1")\ndisplay(esd)\n' +
        'uid = session.models.slice("layers.1.weight", "m1").uid\n' +
        'print("ESD" + json.dumps({"evals": [float(v) for v in np.asarray(session.results.get("esd", uid), dtype=float)], ' +
        '"alpha": float(session.results.get("pl_alpha", uid)), "xmin": float(session.results.get("pl_esd_xmin", uid))}))'
    );
    const stored = await printedJson<{ evals: number[]; alpha: number; xmin: number }>(page, esdIdx, 'ESD');
    const esd = page.locator('.diffract-panel').last();
    // the ESD, its power-law fit and the xmin line
    await expect(esd.locator('.scatterlayer .trace')).toHaveCount(3);
    const [hist, fit, xminLine] = await plotTraces(esd);
    expect(String(xminLine.name)).toMatch(/^xmin=/);
    expectAllClose(xminLine.x as number[], [stored.xmin, stored.xmin], 1e-9, 'xmin line at the stored xmin');
    const evals = stored.evals.filter(v => Number.isFinite(v) && v > 0);
    const lo = Math.min(...evals);
    const hi = Math.max(...evals);
    expect(hist.mode).toBe('markers');
    expect(hist.x.length).toBeGreaterThanOrEqual(5);
    for (const c of hist.x as number[]) {
      expect(c).toBeGreaterThanOrEqual(lo * (1 - 1e-9));
      expect(c).toBeLessThanOrEqual(hi * (1 + 1e-9));
    }
    // density x bin width x N is the bin's count: whole numbers that add up to every eigenvalue
    // (60 log-spaced bins between the smallest and the largest, esd_spec's default)
    const r = Math.pow(hi / lo, 1 / 60);
    const counts = (hist.x as number[]).map((c, k) => (hist.y[k] as number) * c * (Math.sqrt(r) - 1 / Math.sqrt(r)) * evals.length);
    for (const n of counts) {
      expect(Math.abs(n - Math.round(n))).toBeLessThan(1e-6);
      expect(Math.round(n)).toBeGreaterThanOrEqual(1);
    }
    const plotted = counts.reduce((a, b) => a + Math.round(b), 0);
    expect(plotted, 'every eigenvalue is in a bin').toBe(evals.length);
    expect(fit.mode).toBe('lines');
    expect(fit.name).toContain(`α=${Number(stored.alpha.toPrecision(3))}`);
    const fx = fit.x as number[];
    const fy = fit.y as number[];
    expectAllClose([fx[0], fx[fx.length - 1]], [stored.xmin, hi], 1e-9, 'fit line x range');
    const slope = (Math.log(fy[fy.length - 1]) - Math.log(fy[0])) / (Math.log(fx[fx.length - 1]) - Math.log(fx[0]));
    expectAllClose([slope], [-stored.alpha], 1e-9, 'fit line slope');
    const tail = evals.filter(v => v >= stored.xmin).length / evals.length;
    expectAllClose([fy[0]], [(tail * (stored.alpha - 1)) / stored.xmin], 1e-9, 'fit line at xmin');
    await shot(page, 'panel-esd', esd);

    // heatmap layer x model: every cell is the norm of that model's layer
    await runCode(page, 'FieldPanel(session, "slow_norm", kind="heatmap")');
    const heatmap = page.locator('.diffract-panel').last();
    await expect(heatmap.locator('.heatmaplayer, .hm')).not.toHaveCount(0);
    await expect
      .poll(async () => (await plotTraces(heatmap)).flatMap(t => t.z.flat()).filter(v => typeof v === 'number').length, { timeout: 30000 })
      .toBe(8);
    const [hm] = await plotTraces(heatmap);
    expect(hm.type).toBe('heatmap');
    expect(hm.y).toEqual(['m1', 'm2']);
    hm.y.forEach((m: string, i: number) => {
      const names = hm.customdata[i].map((c: string[]) => c[1]);
      expect(names).toEqual(['layers.0.weight', 'layers.1.weight', 'layers.2.weight', 'layers.3.weight']);
      expectAllClose(hm.z[i] as number[], names.map((n: string) => ref[m][n]), 1e-5, `heatmap row ${m}`);
    });
    await shot(page, 'panel-heatmap', heatmap);
  });
});
