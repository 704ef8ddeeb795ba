/**
 * Issue 29 point 5, the panel items, in JupyterLab in light and dark at 1400 and 900 px windows
 * (a 900 px window gives a ~468 px output): each is asserted in the page and kept as a named
 * screenshot (point5-<item>-<theme>-<width>.png) for docs/img.
 *
 * a  a heatmap panel's layer axis names its layers (one tick per column, no -0.5..3.5 numbers)
 * b  an ESD panel's xmin line spans the plot from its bottom to its top
 * c  a line panel's header says "4 layers · 2 models", not "values · traces"
 * d  with the plot hovered (the Plotly toolbar shown) no title box meets the toolbar's box, the
 *    evolution panel's two-line title included; the title starts under the toolbar row
 */
import type { Locator } from '@playwright/test';
import { expect, test } from './fixtures';
import { COMBOS, expectFits, newNotebookWithStore, plotTraces, runCode, setLook, shot, showAndResize } from './helpers';

interface Box {
  x: number;
  y: number;
  width: number;
  height: number;
}

function overlaps(a: Box, b: Box): boolean {
  return a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
}

/** Hover the plot until Plotly's toolbar is shown (opacity 1), return the toolbar's and the title's boxes. */
async function titleAndToolbar(panel: Locator): Promise<{ title: Box; bar: Box }> {
  await panel.locator('.nsewdrag').first().hover();
  const bar = panel.locator('.modebar').first();
  await expect.poll(async () => bar.evaluate(el => Number(getComputedStyle(el).opacity)), { timeout: 10000 }).toBe(1);
  const title = await panel.locator('.infolayer .g-gtitle').first().boundingBox();
  const barBox = await bar.boundingBox();
  expect(title, 'the figure has a title').not.toBeNull();
  expect(barBox, 'the toolbar is laid out').not.toBeNull();
  return { title: title!, bar: barBox! };
}

test('point 5 a-d: heatmap layer axis, ESD xmin line, line header, titles clear of the toolbar (light and dark, 1400 and 900 px)', async ({ page, tmpPath }) => {
  test.setTimeout(300000);
  await newNotebookWithStore(page, tmpPath, 'point5.ipynb');
  await runCode(
    page,
    [
      '_ = [session.models.add(mlp(s), f"run-{s}", meta={"track": {"run": "run", "step": s}}) for s in (100, 9, 10)]',
      'session.compute.apply("slow_norm", "esd", "pl_alpha", "pl_esd_xmin", progress=False)',
      'line = FieldPanel(session, "slow_norm", kind="line", models=["m1", "m2"])',
      'heat = FieldPanel(session, "slow_norm", kind="heatmap", models=["m1", "m2"])',
      'esd = FieldPanel(session, kind="esd", slice="layers.1.weight", model_id="m1")',
      'evo = FieldPanel(session, "slow_norm", kind="evolution", run="run")',
      'display(line, heat, esd, evo)'
    ].join('\n')
  );
  const panels = page.locator('.diffract-panel');
  await expect(panels).toHaveCount(4, { timeout: 60000 });
  const [line, heat, esd, evo] = [0, 1, 2, 3].map(i => panels.nth(i));

  for (const { theme, width } of COMBOS) {
    await setLook(page, theme, width);
    const tag = `${theme}-${width}`;

    // a: one tick per heatmap column, each naming its layer in depth order
    await showAndResize(page, heat, width);
    await expect.poll(async () => (await plotTraces(heat)).length, { timeout: 30000 }).toBe(1);
    await expect(heat.locator('.diffract-panel-status')).toContainText('2 models × 4 layers');
    const ticks = await heat.locator('.xaxislayer-above .xtick text').allTextContents();
    expect(ticks.length, `heatmap ticks ${tag}: ${ticks}`).toBe(4);
    ticks.forEach((t, i) => expect(t, `heatmap tick ${i} ${tag}`).toMatch(new RegExp(`layers\\.${i}(\\.|$)`)));
    await expectFits(heat, `heatmap ${tag}`, true);
    await shot(page, `point5-a-${tag}`, heat);

    // b: the xmin line runs from the plot area's bottom edge to its top edge
    await showAndResize(page, esd, width);
    const traces = await plotTraces(esd);
    const xminIndex = traces.findIndex(t => t.name !== null && t.name.startsWith('xmin='));
    expect(xminIndex, `the xmin line ${tag}`).toBeGreaterThanOrEqual(0);
    const xminPath = await esd.locator('.scatterlayer .trace').nth(xminIndex).locator('path.js-line').boundingBox();
    const area = await esd.locator('.draglayer .nsewdrag').first().boundingBox();
    expect(xminPath, `xmin line drawn ${tag}`).not.toBeNull();
    expect(Math.abs(xminPath!.y - area!.y), `xmin line top vs plot top ${tag}`).toBeLessThanOrEqual(2);
    expect(Math.abs(xminPath!.y + xminPath!.height - (area!.y + area!.height)), `xmin line bottom vs plot bottom ${tag}`).toBeLessThanOrEqual(2);
    await expect(esd.locator('.diffract-panel-status')).not.toContainText('trace');
    await expectFits(esd, `esd ${tag}`, true);
    await shot(page, `point5-b-${tag}`, esd);

    // c: the header in the user's terms
    await showAndResize(page, line, width);
    const status = line.locator('.diffract-panel-status');
    await expect(status).toContainText('4 layers · 2 models');
    await expect(status).not.toContainText('trace');
    await expect(status).toBeInViewport();
    await expectFits(line, `line ${tag}`, true);
    await shot(page, `point5-c-${tag}`, line);

    // d: hovered, the toolbar shows; every title starts under its row and meets none of it
    for (const [name, panel] of [['line', line], ['heatmap', heat], ['esd', esd], ['evolution', evo]] as const) {
      await showAndResize(page, panel, width);
      const { title, bar } = await titleAndToolbar(panel);
      const what = `${name} ${tag}: title ${JSON.stringify(title)} toolbar ${JSON.stringify(bar)}`;
      expect(overlaps(title, bar), what).toBe(false);
      expect(title.y, what).toBeGreaterThanOrEqual(bar.y + bar.height - 1);
    }
    const evoTitle = await evo.locator('.infolayer .g-gtitle text tspan.line').count();
    expect(evoTitle, 'the evolution title has two lines').toBe(2);
    await expectFits(evo, `evolution ${tag}`, true);
    await titleAndToolbar(evo);
    await shot(page, `point5-d-${tag}`, evo);
  }
});
