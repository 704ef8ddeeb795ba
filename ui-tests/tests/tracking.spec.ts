/**
 * notebooks/track_training.ipynb in JupyterLab: while its training cell runs, the tracker's
 * worker commits a checkpoint every 25 steps and the evolution panel (layer x step heatmap of
 * pl_alpha) gains columns, in step order, before the cell has finished; at the end its columns
 * are the committed steps the cell prints.
 */
import * as fs from 'fs';
import * as path from 'path';
import { expect, test } from './fixtures';
import { outputText, plotTraces, shot } from './helpers';

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
