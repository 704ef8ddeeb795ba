/**
 * Tracked runs in JupyterLab.
 * - notebooks/track_training.ipynb: while its training cell runs, the tracker's worker commits
 *   a checkpoint every 25 steps and the evolution panel (layer x step heatmap of pl_alpha)
 *   gains columns, in step order, before the cell has finished; at the end its columns are the
 *   committed steps the cell prints.
 * - the "Weight runs" sidebar: a tracked checkpoint's run across training under its chart, one
 *   column per committed step, gaining columns as the tracker commits more with no click; a
 *   run of one step says it needs two; light and dark themes, 1400 and 900 px windows.
 */
import type { Locator } from '@playwright/test';
import * as fs from 'fs';
import * as path from 'path';
import { expect, test } from './fixtures';
import { dragSidebarEdge, newNotebookWithStore, openSidebarStore, outputText, plotTraces, runCode, shot } from './helpers';

const NOTEBOOK = path.resolve(__dirname, '..', '..', 'notebooks', 'track_training.ipynb');
const SETUP_CELL = 1; // imports, data, model
const TRACKER_CELL = 3; // session, tracker, evolution panel
const TRAIN_CELL = 5; // the training loop

/** The step columns of the panel's heatmap as Plotly.js holds them: one column per step (x is
 * the column index), labelled with the step numbers (the x axis' ticktext). */
async function columns(page: any): Promise<number[]> {
  const panel = page.locator('.diffract-panel').last();
  await panel.scrollIntoViewIfNeeded(); // a windowed notebook detaches cells out of view
  const traces = await plotTraces(panel);
  const heat = traces.find(t => t.type === 'heatmap');
  if (!heat) {
    return [];
  }
  const ticks: string[] = await panel.evaluate((root: Element) => {
    const gd = root.querySelector('.js-plotly-plot') as any;
    return gd && gd.layout && gd.layout.xaxis && Array.isArray(gd.layout.xaxis.ticktext) ? gd.layout.xaxis.ticktext.map(String) : [];
  });
  const x = (heat.x as number[]).map(Number);
  return x.map(i => Number(ticks[i])); // the step of each column
}

test('the evolution panel gains columns while the training cell runs', async ({ page, tmpPath }) => {
  test.setTimeout(300000);
  await page.contents.uploadContent(fs.readFileSync(NOTEBOOK, 'utf8'), 'text', `${tmpPath}/track_training.ipynb`);
  await page.notebook.openByPath(`${tmpPath}/track_training.ipynb`);
  await page.notebook.activate('track_training.ipynb');
  await page.notebook.runCell(SETUP_CELL);
  await expect.poll(async () => outputText(page, SETUP_CELL), { timeout: 120000 }).toContain('parameters');
  await page.notebook.runCell(TRACKER_CELL);
  const panel = page.locator('.diffract-panel').last();
  await expect(panel).toBeVisible({ timeout: 60000 });
  expect(await columns(page)).toEqual([]); // no step committed yet

  await page.notebook.runCell(TRAIN_CELL, { wait: false });
  const seen: number[] = [];
  const deadline = Date.now() + 240000;
  let finished = false;
  while (Date.now() < deadline) {
    finished = (await outputText(page, TRAIN_CELL)).includes('committed steps:');
    const n = (await columns(page)).length;
    if (!finished && (seen.length === 0 || n !== seen[seen.length - 1])) {
      seen.push(n); // column counts observed while the cell was still running
    }
    if (finished) {
      break;
    }
    await page.waitForTimeout(250);
  }
  expect(finished, 'the training cell finished').toBe(true);
  const growing = seen.filter(n => n > 0);
  expect(growing.length, `column counts seen while training ran: ${seen}`).toBeGreaterThanOrEqual(2);
  expect([...growing].sort((a, b) => a - b)).toEqual(growing); // never fewer columns than before

  const printed = (await outputText(page, TRAIN_CELL)).split('\n').find(l => l.startsWith('committed steps:')) ?? '';
  const steps = JSON.parse(printed.slice('committed steps:'.length).trim()) as number[];
  await expect.poll(async () => columns(page), { timeout: 30000 }).toEqual(steps);
  expect(steps[0]).toBe(0);
  expect(steps[steps.length - 1]).toBe(600);
  expect(Math.max(...growing)).toBeLessThanOrEqual(steps.length);
  await panel.scrollIntoViewIfNeeded();
  await shot(page, 'tracking-evolution', panel);
});

/** What the sidebar's across-training chart plots: its heatmap's columns (one per step) and
 * rows, the steps it is drawn for, and the outlined column. */
async function sidebarColumns(chart: Locator): Promise<{ columns: number; rows: number; steps: string; outlined: number | null }> {
  return chart.evaluate((gd: any) => {
    const heat = (gd.data ?? []).find((t: any) => t.type === 'heatmap');
    const rect = (gd.layout?.shapes ?? []).find((s: any) => s.type === 'rect' && s.xref === 'x');
    return {
      columns: heat ? heat.z[0].length : 0,
      rows: heat ? heat.z.length : 0,
      steps: gd.dataset.steps ?? '',
      outlined: rect ? (rect.x0 + rect.x1) / 2 : null
    };
  });
}

/** The chart's title as drawn, its lines joined by " / ". */
async function titleText(chart: Locator): Promise<string> {
  return chart.evaluate(gd => {
    const title = gd.querySelector('.gtitle');
    const lines = Array.from(title?.querySelectorAll('tspan.line') ?? []).map(t => t.textContent ?? '');
    return lines.length ? lines.join(' / ') : (title?.textContent ?? '');
  });
}

/** Tick labels of one axis that overlap their neighbour (none when they fit). */
async function overlappingTicks(chart: Locator, axis: string): Promise<string[]> {
  return chart.evaluate((gd: Element, sel: string) => {
    const boxes = Array.from(gd.querySelectorAll(sel)).map(t => ({ text: t.textContent ?? '', r: t.getBoundingClientRect() }));
    const out: string[] = [];
    boxes.sort((a, b) => a.r.left - b.r.left || a.r.top - b.r.top);
    for (let i = 1; i < boxes.length; i++) {
      const a = boxes[i - 1].r;
      const b = boxes[i].r;
      if (a.right > b.left + 1 && a.bottom > b.top + 1 && b.bottom > a.top + 1) {
        out.push(`${boxes[i - 1].text}|${boxes[i].text}`);
      }
    }
    return out;
  }, axis);
}

/** The chart fits the panel: nothing past its right edge, the title inside the figure. */
async function fitsPanel(chart: Locator): Promise<Record<string, number | boolean>> {
  return chart.evaluate(gd => {
    const panel = gd.closest('#diffract-runs')!;
    const svg = gd.querySelector('svg.main-svg')!.getBoundingClientRect();
    const title = gd.querySelector('.gtitle')!.getBoundingClientRect();
    return {
      svgRight: svg.right,
      panelRight: panel.getBoundingClientRect().right,
      scroll: panel.scrollWidth - panel.clientWidth,
      titleInside: title.left >= svg.left - 1 && title.right <= svg.right + 1 && title.top >= svg.top - 1
    };
  });
}

test('the sidebar shows a tracked run across training and follows the tracker with no click', async ({ page, tmpPath }) => {
  test.setTimeout(300000);
  await page.setViewportSize({ width: 1400, height: 1000 });
  await newNotebookWithStore(page, tmpPath, 'sidebar-evolution.ipynb');
  // a tracker analyzing pl_alpha on the 4 dense layers; steps 0, 10, 20 committed
  const tracked = await runCode(
    page,
    [
      // room for every step (no snapshot thinned however slow the machine)
      'tracker = session.track("train", ["pl_alpha"], every=10, param_types=["dense"], max_pending=8, policy="block", block_timeout=60)',
      '_ = [tracker.step(mlp(s // 10), step=s) for s in (0, 10, 20)]',
      'print("flushed", tracker.flush(120), "committed", tracker.steps())'
    ].join('\n')
  );
  await expect.poll(async () => outputText(page, tracked), { timeout: 120000 }).toContain('committed [0, 10, 20]');

  const { panel, store } = await openSidebarStore(page, tmpPath);
  const run = store.locator('tr.diffract-run[data-run="train"]');
  await expect(run).toContainText('steps 0–20 (3 checkpoints)');
  // a plain model has no across-training view
  await store.locator('tr.diffract-model[data-model="m1"]').click();
  await expect(panel.locator('.diffract-detail-title')).toContainText('m1');
  await expect(panel.locator('.diffract-evolution-box')).toHaveCount(0);

  // a checkpoint: the run's steps under its chart, one column per committed step, its own outlined
  await run.click();
  await store.locator('tr.diffract-model[data-model="train-s000000010"]').click();
  const chart = panel.locator('.diffract-evolution');
  await expect(chart).toHaveAttribute('data-steps', '0,10,20', { timeout: 20000 });
  expect(await sidebarColumns(chart)).toEqual({ columns: 3, rows: 4, steps: '0,10,20', outlined: 1 });
  expect(await titleText(chart)).toBe('pl_alpha across training · run train / 3 checkpoints (steps 0–20)');
  await expect(panel.locator('.diffract-evolution-note')).toContainText('Outlined: step 10');

  // the tracker commits two more steps: the chart gains their columns by itself (the 3 s poll)
  const more = await runCode(page, '_ = [tracker.step(mlp(s // 10), step=s) for s in (30, 40)]\nprint("flushed", tracker.flush(120), "committed", tracker.steps())');
  await expect.poll(async () => outputText(page, more), { timeout: 120000 }).toContain('committed [0, 10, 20, 30, 40]');
  await expect(chart).toHaveAttribute('data-steps', '0,10,20,30,40', { timeout: 20000 });
  expect(await sidebarColumns(chart)).toEqual({ columns: 5, rows: 4, steps: '0,10,20,30,40', outlined: 1 });
  expect(await titleText(chart)).toBe('pl_alpha across training · run train / 5 checkpoints (steps 0–40)');
  await expect(run).toContainText('steps 0–40 (5 checkpoints)');
  await expect(store.locator('tr.diffract-selected')).toHaveAttribute('data-model', 'train-s000000010');

  // a click on a column opens that step's checkpoint
  await chart.evaluate((gd: any) => gd.emit('plotly_click', { points: [{ customdata: gd.data[0].customdata[0][3] }] }));
  await expect(store.locator('tr.diffract-selected')).toHaveAttribute('data-model', 'train-s000000030');
  await expect.poll(async () => (await sidebarColumns(chart)).outlined).toBe(3);

  // the run row's "across training" button: the newest checkpoint, the run under its chart
  await run.locator('button.diffract-run-evolution').click();
  await expect(store.locator('tr.diffract-selected')).toHaveAttribute('data-model', 'train-s000000040');
  await expect.poll(async () => (await sidebarColumns(chart)).outlined).toBe(4);
  await expect(panel.locator('.diffract-evolution-box')).toBeInViewport();
  // the run row's click still hides its checkpoints, the selected one among them
  await run.click();
  await expect(store.locator('tr.diffract-checkpoint')).toHaveCount(0);
  await run.click();
  await expect(store.locator('tr.diffract-checkpoint')).toHaveCount(5);

  // the sidebar dragged wider and back: the chart is drawn again at each width
  const chartWidth = async () => chart.evaluate((gd: any) => gd._fullLayout.width as number);
  const before = await chartWidth();
  await dragSidebarEdge(page, 160);
  await expect.poll(chartWidth).toBeGreaterThan(before + 100);
  expect(await sidebarColumns(chart)).toMatchObject({ columns: 5, outlined: 4 });
  await dragSidebarEdge(page, -160);
  await expect.poll(chartWidth).toBeLessThan(before + 20);

  for (const width of [1400, 900]) {
    // tall enough for the run's row (its button) and the chart under the selected checkpoint
    await page.setViewportSize({ width, height: 1300 });
    await expect.poll(async () => fitsPanel(chart)).toMatchObject({ scroll: 0, titleInside: true });
    const fit = await fitsPanel(chart);
    expect(fit.svgRight as number, JSON.stringify(fit)).toBeLessThanOrEqual(fit.panelRight as number);
    expect(await overlappingTicks(chart, '.xy .xtick text')).toEqual([]);
    expect(await overlappingTicks(chart, '.x2y2 .xtick text')).toEqual([]);
    expect(await overlappingTicks(chart, '.xy .ytick text')).toEqual([]);
    await page.mouse.move(width - 10, 10); // no row under the mouse (its hover colour)
    await panel.evaluate(el => el.scrollTo(0, el.scrollHeight));
    await shot(page, `sidebar-across-training-light-${width}`, panel);
    // the theme's colours: re-plotted from the model's data, no request
    const light = await chart.evaluate((gd: any) => gd._fullLayout.font.color);
    await page.theme.setDarkTheme();
    await expect.poll(async () => chart.evaluate((gd: any) => gd._fullLayout.font.color)).not.toBe(light);
    expect(await sidebarColumns(chart)).toMatchObject({ columns: 5, outlined: 4 });
    await panel.evaluate(el => el.scrollTo(0, el.scrollHeight));
    await shot(page, `sidebar-across-training-dark-${width}`, panel);
    await page.theme.setLightTheme();
  }

  // a run of one step: the view says it needs two, and nothing is drawn
  const solo = await runCode(page, 'solo = session.track("solo", ["pl_alpha"], param_types=["dense"])\nsolo.step(mlp(3), step=0)\nprint("solo", solo.flush(120), solo.steps())');
  await expect.poll(async () => outputText(page, solo), { timeout: 120000 }).toContain('solo True [0]');
  const soloRun = store.locator('tr.diffract-run[data-run="solo"]');
  await expect(soloRun).toContainText('step 0 (1 checkpoint)', { timeout: 20000 });
  await soloRun.locator('button.diffract-run-evolution').click();
  await expect(chart.locator('.diffract-empty')).toContainText('needs two steps: run solo has one checkpoint so far (step 0)');
  await expect(chart).not.toHaveAttribute('data-steps', /.*/);
});
