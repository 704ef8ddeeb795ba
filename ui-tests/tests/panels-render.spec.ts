import { expect, test } from './fixtures';
import { newNotebookWithStore, plotTraces, runCode, shot } from './helpers';

/** Numbers a rendered Plotly figure holds: heatmap cells, or the y values of the other traces. */
async function plottedValues(panel: import('@playwright/test').Locator): Promise<number> {
  const traces = await plotTraces(panel);
  return traces.reduce((n, t) => n + (t.type === 'heatmap' ? t.z.flat() : t.y).filter(v => typeof v === 'number' && Number.isFinite(v)).length, 0);
}

test.describe('panels always render', () => {
  test('20 heatmap panels in a row (live and read-only) each plot their data', async ({ page, tmpPath }) => {
    test.setTimeout(300000);
    await newNotebookWithStore(page, tmpPath, 'heatmaps.ipynb');
    await runCode(page, 'session.compute.apply("slow_norm", "esd", "pl_alpha", progress=False)\nro = Session(path=".diffract", readonly=True)\nprint("ok")');
    // 20 panels, each shown right after it is made: every widget's first render races its first
    // data update (4 cells of 5, alternating the live session and a read-only one)
    for (let i = 0; i < 4; i++) {
      const src = i % 2 === 0 ? 'session' : 'ro';
      await runCode(page, `for _ in range(5):\n    display(FieldPanel(${src}, "slow_norm", kind="heatmap"))`);
    }
    const panels = page.locator('.diffract-panel');
    await expect(panels).toHaveCount(20, { timeout: 60000 });
    for (let i = 0; i < 20; i++) {
      const p = panels.nth(i);
      await p.scrollIntoViewIfNeeded();
      await expect(p.locator('.diffract-panel-status')).toContainText('8 values');
      await expect.poll(async () => plottedValues(p), { timeout: 20000, message: `heatmap panel ${i}` }).toBe(8);
      await expect(p.locator('.heatmaplayer image, .hm image')).not.toHaveCount(0);
    }
    await shot(page, 'panel-heatmap-20th', panels.nth(19));
  });

  for (const [width, theme] of [[1400, 'light'], [900, 'dark']] as const) {
  test(`every panel kind renders its data, live and read-only (${theme}, ${width} px)`, async ({ page, tmpPath }) => {
    test.setTimeout(240000);
    await page.setViewportSize({ width, height: 900 });
    if (theme === 'dark') {
      await page.theme.setDarkTheme();
    }
    await newNotebookWithStore(page, tmpPath, 'kinds.ipynb');
    await runCode(page, 'session.compute.apply("slow_norm", "frob_norm", "esd", "pl_alpha", progress=False)\nro = Session(path=".diffract", readonly=True)\nprint("ok")');
    const cells: [string, number][] = [];
    for (const src of ['session', 'ro']) {
      cells.push([`FieldPanel(${src}, "slow_norm", kind="line")`, 8]);
      cells.push([`FieldPanel(${src}, "slow_norm", kind="bar")`, 8]);
      cells.push([`FieldPanel(${src}, "slow_norm", kind="heatmap")`, 8]);
      cells.push([`FieldPanel(${src}, ("frob_norm", "slow_norm"), kind="scatter")`, 8]);
      cells.push([`FieldPanel(${src}, kind="esd", slice="layers.1.weight", model_id="m1")`, -1]);
    }
    await runCode(page, cells.slice(0, 5).map(([code]) => `display(${code})`).join('\n'));
    await runCode(page, cells.slice(5).map(([code]) => `display(${code})`).join('\n'));
    const panels = page.locator('.diffract-panel');
    await expect(panels).toHaveCount(cells.length, { timeout: 60000 });
    for (let i = 0; i < cells.length; i++) {
      const p = panels.nth(i);
      await p.scrollIntoViewIfNeeded();
      const want = cells[i][1];
      if (want > 0) {
        await expect.poll(async () => plottedValues(p), { timeout: 20000, message: cells[i][0] }).toBe(want);
      } else {
        await expect.poll(async () => plottedValues(p), { timeout: 20000, message: cells[i][0] }).toBeGreaterThan(4);
      }
    }
    await shot(page, `panel-kinds-${theme}-${width}`, panels.nth(2));
  });
  }
});
