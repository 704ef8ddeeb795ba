/**
 * Panels (issues 16 and 19): the export bar (PNG / SVG through Plotly's own toolbar
 * download, CSV of the plotted values), the compare and evolution kinds, the ESD panel's
 * exponent tick labels and xmin line, in light and dark themes at 1400 and 900 px: each panel
 * fits its output (no horizontal scrollbar) and plots the values Python computed.
 */
import * as fs from 'fs';
import { expect, test } from './fixtures';
import { COMBOS, expectAllClose, expectFits, newNotebookWithStore, plotTraces, printedJson, runCode, setLook, shot, showAndResize } from './helpers';

test.describe('panels: export, compare, evolution, ESD ticks', () => {
  test('export bar: PNG and SVG from the plot toolbar, CSV of the plotted values', async ({ page, tmpPath }) => {
    test.setTimeout(240000);
    await newNotebookWithStore(page, tmpPath, 'export.ipynb');
    const idx = await runCode(
      page,
      'import json\nsession.compute.apply("slow_norm", progress=False)\np = FieldPanel(session, "slow_norm")\ndisplay(p)\n' +
        'print("CSV" + json.dumps(p.to_csv()))\nprint("Y" + json.dumps([list(t.y) for t in p.figure.data]))'
    );
    const csvText = await printedJson<string>(page, idx, 'CSV');
    const ys = await printedJson<number[][]>(page, idx, 'Y');
    const panel = page.locator('.diffract-panel').last();
    await expect.poll(async () => (await plotTraces(panel)).length, { timeout: 30000 }).toBe(2);
    for (const { theme, width } of [COMBOS[0], COMBOS[3]]) {
      await setLook(page, theme, width);
      await showAndResize(page, panel, width);
      const traces = await plotTraces(panel);
      traces.forEach((t, i) => expectAllClose(t.y as number[], ys[i], 1e-12, `trace ${i}`));
      await expectFits(panel, `export ${theme} ${width}`, true);
      await shot(page, `panel-export-${theme}-${width}`, panel);

      // PNG: Plotly's toolbar camera, format from the export bar's toggle (PNG by default)
      await panel.locator('button', { hasText: 'PNG' }).click();
      await panel.locator('.js-plotly-plot').hover(); // the toolbar shows on hover (Plotly's default)
      let camera = panel.locator('.modebar-btn[data-title="Download plot as a PNG"]');
      await expect(camera).toHaveCount(1, { timeout: 30000 });
      let [download] = await Promise.all([page.waitForEvent('download'), camera.click()]);
      expect(download.suggestedFilename()).toBe('slow_norm-line.png');
      const png = fs.readFileSync(await download.path());
      expect(png.subarray(1, 4).toString()).toBe('PNG');

      // SVG: the toggle makes the figure again with the new toolbar config
      await panel.locator('button', { hasText: 'SVG' }).click();
      await panel.locator('.js-plotly-plot').hover();
      camera = panel.locator('.modebar-btn[data-title="Download plot"]');
      await expect(camera).toHaveCount(1, { timeout: 30000 });
      [download] = await Promise.all([page.waitForEvent('download'), camera.click()]);
      expect(download.suggestedFilename()).toBe('slow_norm-line.svg');
      const svg = fs.readFileSync(await download.path(), 'utf8');
      expect(svg).toContain('<svg');
      expect(svg).toContain('slow_norm across depth');
      await expect.poll(async () => (await plotTraces(panel)).length).toBe(2); // redrawn with its data

      // CSV: the link's file is the panel's to_csv(), the plotted values
      [download] = await Promise.all([page.waitForEvent('download'), panel.locator('.diffract-panel-csv-link').click()]);
      expect(download.suggestedFilename()).toBe('slow_norm-line.csv');
      const got = fs.readFileSync(await download.path(), 'utf8');
      expect(got).toBe(csvText);
      const rows = got.trim().split('\n').slice(1);
      expect(rows.length).toBe(8);
      const yCol = rows.map(r => Number(r.split(',')[2]));
      expectAllClose(yCol, ys.flat(), 1e-12, 'csv y');
    }
  });

  test('compare, evolution and ESD panels in both themes at 1400 and 900 px', async ({ page, tmpPath }) => {
    test.setTimeout(300000);
    await newNotebookWithStore(page, tmpPath, 'kinds2.ipynb');
    // a tracked run added by hand: steps 100, 9, 10 (ids sort wrongly as strings)
    const setup = [
      'import json',
      '_ = [session.models.add(mlp(s), f"run-{s}", meta={"track": {"run": "run", "step": s}}) for s in (100, 9, 10)]',
      'session.compute.apply("slow_norm", "esd", "pl_alpha", "pl_esd_xmin", progress=False)',
      'cmp = FieldPanel(session, "slow_norm", kind="compare", models=["m1", "m2"], mode="ratio")',
      'evo = FieldPanel(session, "slow_norm", kind="evolution", run="run")',
      'esd = FieldPanel(session, kind="esd", slice="layers.1.weight", model_id="m1")',
      'display(cmp, evo, esd)',
      'v = {(r["model_id"], r["name"]): r["slow_norm"] for r in session.results.export_table("slow_norm", export_format="list")}',
      'names = [f"layers.{i}.weight" for i in range(4)]',
      'print("CMP" + json.dumps([v[("m2", n)] / v[("m1", n)] for n in names]))',
      'print("EVO" + json.dumps([[v[(f"run-{s}", n)] for s in (9, 10, 100)] for n in names]))',
      'print("XMIN" + json.dumps(session.results.get("pl_esd_xmin", "layers.1.weight", "m1")))',
      'print("TICKS" + json.dumps(list(esd.figure.layout.xaxis.ticktext)))'
    ].join('\n');
    const idx = await runCode(page, setup);
    const ratio = await printedJson<number[]>(page, idx, 'CMP');
    const evo = await printedJson<number[][]>(page, idx, 'EVO');
    const xmin = await printedJson<number>(page, idx, 'XMIN');
    const ticks = await printedJson<string[]>(page, idx, 'TICKS');
    const panels = page.locator('.diffract-panel');
    await expect(panels).toHaveCount(3, { timeout: 60000 });
    const [cmp, evoPanel, esd] = [panels.nth(0), panels.nth(1), panels.nth(2)];

    for (const { theme, width } of COMBOS) {
      await setLook(page, theme, width);
      const tag = `${theme}-${width}`;

      await showAndResize(page, cmp, width);
      await expect.poll(async () => (await plotTraces(cmp)).length, { timeout: 30000 }).toBe(1);
      const [c] = await plotTraces(cmp);
      expectAllClose(c.y as number[], ratio, 1e-12, `compare ratio ${tag}`);
      expect(c.x).toEqual([1, 3, 5, 7]); // the weights among the common slices (biases have no slow_norm)
      await expect(cmp.locator('.diffract-panel-status')).toContainText('slow_norm: m2 / m1');
      await expectFits(cmp, `compare ${tag}`, true);
      await shot(page, `panel-compare-${tag}`, cmp);

      await showAndResize(page, evoPanel, width);
      const [hm, ...lines] = await plotTraces(evoPanel);
      expect(hm.type).toBe('heatmap');
      expect(hm.x).toEqual([0, 1, 2]); // one column per step, labelled below in training-step order
      hm.z.forEach((row, i) => expectAllClose(row as number[], evo[i], 1e-12, `evolution row ${i} ${tag}`));
      expect(lines.length).toBe(4);
      lines.forEach((t, i) => {
        expect(t.x).toEqual([9, 10, 100]);
        expectAllClose(t.y as number[], evo[i], 1e-12, `evolution line ${i} ${tag}`);
      });
      const colLabels = await evoPanel.locator('.xaxislayer-above .xtick text').allTextContents();
      expect(colLabels).toEqual(['9', '10', '100']);
      await expectFits(evoPanel, `evolution ${tag}`, true);
      await shot(page, `panel-evolution-${tag}`, evoPanel);

      await showAndResize(page, esd, width);
      const labels = (await esd.locator('.xaxislayer-above .xtick text').allTextContents()).map(l => l.replace(/\u200b/g, ''));
      expect(labels.length).toBeGreaterThanOrEqual(2);
      const wanted = ticks.map(t => t.replace('<sup>', '').replace('</sup>', ''));
      for (const l of labels) {
        expect(l, 'exponent tick label, no SI prefix').toMatch(/^10[-−]?\d+$/);
        expect(wanted).toContain(l);
      }
      const xminLine = (await plotTraces(esd)).find(t => t.name !== null && t.name.startsWith('xmin='));
      expect(xminLine, 'the xmin line').toBeTruthy();
      expectAllClose(xminLine!.x as number[], [xmin, xmin], 1e-12, `xmin ${tag}`);
      await expectFits(esd, `esd ${tag}`, true);
      await shot(page, `panel-esd-ticks-${tag}`, esd);
    }

    // a new snapshot lands: the live evolution panel gains a column without a refresh call
    await setLook(page, 'light', 1400);
    await runCode(
      page,
      'session.models.add(mlp(50), "run-50", meta={"track": {"run": "run", "step": 50}})\n' +
        'run = run_with_progress(session, "slow_norm")\nrun'
    );
    await expect(page.locator('.jp-OutputArea-output').last()).toContainText('done', { timeout: 60000 });
    // the kernel's panel has the new column (the run's commit events redrew it)...
    const after = await runCode(page, 'print("EVOX" + json.dumps({"x": list(evo.figure.data[1].x), "updates": evo.updates, "rebuilds": evo.rebuilds}))');
    const state = await printedJson<{ x: number[]; updates: number; rebuilds: number }>(page, after, 'EVOX');
    expect(state.x).toEqual([9, 10, 50, 100]);
    // ...and so does the browser's plot
    await evoPanel.scrollIntoViewIfNeeded();
    await expect.poll(async () => (await plotTraces(evoPanel))[1]?.x, { timeout: 60000 }).toEqual([9, 10, 50, 100]);
    await expect(evoPanel.locator('.xaxislayer-above .xtick text')).toHaveText(['9', '10', '50', '100']);
    await shot(page, 'panel-evolution-new-step', evoPanel);
  });
});
