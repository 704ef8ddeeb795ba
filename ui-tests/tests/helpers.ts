import { expect, IJupyterLabPageFixture } from '@jupyterlab/galata';
import type { Locator } from '@playwright/test';
import * as fs from 'fs';
import * as path from 'path';

/** Screenshots go to test-results (artifacts) and to ui-tests/screenshots (for the docs). */
export async function shot(page: IJupyterLabPageFixture, name: string, target?: { screenshot(o: object): Promise<Buffer> }): Promise<void> {
  const dir = path.resolve(__dirname, '..', 'screenshots');
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, `${name}.png`);
  if (target) {
    await target.screenshot({ path: file });
  } else {
    await page.screenshot({ path: file });
  }
  const results = path.resolve(__dirname, '..', 'test-results', 'screenshots');
  fs.mkdirSync(results, { recursive: true });
  fs.copyFileSync(file, path.join(results, `${name}.png`));
}

/** Python that builds a small store in the notebook's folder: models m1, m2 with 4 layers. */
export const SETUP = `
import numpy as np, time, diffract
from diffract import Session
from diffract.widgets import run_with_progress, FieldPanel, FilterBuilder

def mlp(seed, layers=4, width=48):
    rng = np.random.default_rng(seed)
    out, d = {}, 24
    for i in range(layers):
        out[f"layers.{i}.weight"] = rng.normal(size=(width, d)).astype("float32")
        out[f"layers.{i}.bias"] = rng.normal(size=width).astype("float32")
        d = width
    return out

@diffract.kernel(outputs="slow_norm", min_ndim=2, replace=True)
def slow_norm(weights, delay=0.0):
    """The Frobenius norm, slowly (to watch progress)."""
    time.sleep(delay)
    return float(np.sqrt((weights.astype("float64") ** 2).sum()))

session = Session()
for i, m in enumerate(["m1", "m2"]):
    if m not in session.models:
        session.models.add(mlp(i), m)
`.trim();

/** Append a code cell with \`code\`, run it, return its index. */
export async function runCode(page: IJupyterLabPageFixture, code: string): Promise<number> {
  const n = await page.notebook.getCellCount();
  const lastText = n ? await page.notebook.getCellTextInput(n - 1) : 'x';
  let idx: number;
  if (n === 1 && lastText.trim() === '') {
    await page.notebook.setCell(0, 'code', code);
    idx = 0;
  } else {
    await page.notebook.addCell('code', code);
    idx = (await page.notebook.getCellCount()) - 1;
  }
  await page.notebook.runCell(idx);
  return idx;
}

export async function outputText(page: IJupyterLabPageFixture, idx: number): Promise<string> {
  const out = await page.notebook.getCellTextOutput(idx);
  return (out ?? []).join('\n');
}

/** A notebook in the test folder whose kernel imports SETUP (uploaded as ui_setup.py: the
 * notebook editor would re-indent it if typed into a cell). */
export async function newNotebookWithStore(page: IJupyterLabPageFixture, tmpPath: string, name: string): Promise<void> {
  await page.contents.uploadContent(SETUP + '\n', 'text', `${tmpPath}/ui_setup.py`);
  await page.notebook.createNew(name);
  const idx = await runCode(page, 'from ui_setup import *\nprint("ready", len(session))');
  await expect.poll(async () => outputText(page, idx), { timeout: 60000 }).toContain('ready 16');
}

/** Open the "Weight runs" sidebar and expand the test folder's store (`tmpPath/.diffract`). */
export async function openSidebarStore(page: IJupyterLabPageFixture, tmpPath: string): Promise<{ panel: Locator; store: Locator }> {
  await page.locator('.jp-SideBar [data-id="diffract-runs"]').click();
  const panel = page.locator('#diffract-runs');
  const store = panel.locator(`.diffract-store[data-path="${tmpPath}/.diffract"]`);
  await expect(store).toBeVisible({ timeout: 15000 });
  await store.locator('.diffract-store-row').click();
  return { panel, store };
}

/** Drag the left sidebar's edge `dx` px (wider when positive). */
export async function dragSidebarEdge(page: IJupyterLabPageFixture, dx: number): Promise<void> {
  const handle = page.locator('#jp-main-split-panel > .lm-SplitPanel-handle').first();
  const hb = (await handle.boundingBox())!;
  await page.mouse.move(hb.x + hb.width / 2, hb.y + 200);
  await page.mouse.down();
  await page.mouse.move(hb.x + hb.width / 2 + dx, hb.y + 200, { steps: 8 });
  await page.mouse.up();
}

/** One trace as the page's Plotly figure holds it (`gd.data`), arrays as plain arrays. */
export interface PlotTrace {
  type: string;
  name: string | null;
  mode: string | null;
  x: any[];
  y: any[];
  z: any[][];
  customdata: any[];
}

/**
 * The data of the Plotly figure inside `container` (or the figure itself), read from the page:
 * what Plotly.js actually plots, not what the kernel meant to send. Typed arrays and Plotly's
 * base64 `{dtype, bdata}` arrays are turned into plain arrays.
 */
export async function plotTraces(container: Locator): Promise<PlotTrace[]> {
  return container.evaluate((root: Element) => {
    const gd = (root.classList.contains('js-plotly-plot') ? root : root.querySelector('.js-plotly-plot')) as any;
    if (!gd || !Array.isArray(gd.data)) {
      return [];
    }
    const typed: Record<string, any> = { f8: Float64Array, f4: Float32Array, i4: Int32Array, u4: Uint32Array, i2: Int16Array, u2: Uint16Array, i1: Int8Array, u1: Uint8Array };
    const plain = (v: any): any => {
      if (v == null) {
        return [];
      }
      if (ArrayBuffer.isView(v)) {
        return Array.from(v as unknown as ArrayLike<number>);
      }
      if (typeof v === 'object' && typeof v.bdata === 'string' && typed[v.dtype]) {
        const bytes = Uint8Array.from(atob(v.bdata), c => c.charCodeAt(0));
        const flat = Array.from(new typed[v.dtype](bytes.buffer));
        const shape = typeof v.shape === 'string' ? v.shape.split(',').map(Number) : v.shape;
        if (shape && shape.length === 2) {
          const [rows, cols] = shape;
          return Array.from({ length: rows }, (_, i) => flat.slice(i * cols, (i + 1) * cols));
        }
        return flat;
      }
      if (Array.isArray(v)) {
        return v.map(item => (Array.isArray(item) || ArrayBuffer.isView(item) ? plain(item) : item));
      }
      return v;
    };
    return gd.data.map((t: any) => ({
      type: t.type ?? 'scatter',
      name: t.name ?? null,
      mode: t.mode ?? null,
      x: plain(t.x),
      y: plain(t.y),
      z: plain(t.z),
      customdata: plain(t.customdata)
    }));
  });
}

/** The JSON a cell printed after `marker` (cells print `marker + json.dumps(...)`). */
export async function printedJson<T>(page: IJupyterLabPageFixture, idx: number, marker: string): Promise<T> {
  let line = '';
  await expect
    .poll(async () => {
      line = (await outputText(page, idx)).split('\n').find(l => l.startsWith(marker)) ?? '';
      return line;
    })
    .not.toBe('');
  return JSON.parse(line.slice(marker.length)) as T;
}

/** `actual` equals `expected` to a relative tolerance, element by element. */
export function expectAllClose(actual: number[], expected: number[], rtol = 1e-6, what = 'values'): void {
  expect(actual.length, `${what}: length`).toBe(expected.length);
  actual.forEach((a, i) => {
    const e = expected[i];
    expect(Math.abs(a - e), `${what}[${i}]: ${a} vs ${e}`).toBeLessThanOrEqual(rtol * Math.max(1e-12, Math.abs(e)));
  });
}

/** The four looks the visual checks are taken in: light and dark, 1400 and 900 px windows. */
export const COMBOS: { theme: 'light' | 'dark'; width: number }[] = [
  { theme: 'light', width: 1400 },
  { theme: 'dark', width: 1400 },
  { theme: 'light', width: 900 },
  { theme: 'dark', width: 900 }
];

export async function setLook(page: IJupyterLabPageFixture, theme: 'light' | 'dark', width: number): Promise<void> {
  await page.setViewportSize({ width, height: 900 });
  if (theme === 'dark') {
    await page.theme.setDarkTheme();
  } else {
    await page.theme.setLightTheme();
  }
}

/**
 * Scroll the panel into view and nudge the window's width: Plotly's `responsive` listener resizes
 * the plots that are visible when the window changes; a panel off-screen (JupyterLab does not lay
 * out cells outside the viewport) keeps its width until a resize finds it visible.
 */
export async function showAndResize(page: IJupyterLabPageFixture, panel: Locator, width: number): Promise<void> {
  await panel.scrollIntoViewIfNeeded();
  await page.setViewportSize({ width: width - 20, height: 900 });
  await page.setViewportSize({ width, height: 900 });
  await page.waitForTimeout(300);
}

/**
 * The panel's plot is no wider than its output area, the output area does not scroll, and (after
 * `showAndResize`) the plot fills at least 80% of the width.
 */
export async function expectFits(panel: Locator, what: string, resized: boolean): Promise<void> {
  const sizes = await panel.evaluate((el: Element) => {
    const out = (el.closest('.jp-OutputArea-output') ?? el.parentElement) as HTMLElement;
    const plot = el.querySelector('.js-plotly-plot') as HTMLElement;
    const svg = el.querySelector('.main-svg') as SVGElement;
    return {
      out: out.clientWidth,
      scroll: out.scrollWidth,
      plot: plot.getBoundingClientRect().width,
      svg: svg.getBoundingClientRect().width
    };
  });
  expect(sizes.svg, `${what}: plot width ${sizes.svg} within output ${sizes.out}`).toBeLessThanOrEqual(sizes.out + 1);
  expect(sizes.scroll, `${what}: no horizontal scrollbar`).toBeLessThanOrEqual(sizes.out + 1);
  if (resized) {
    expect(sizes.svg, `${what}: the plot uses the width`).toBeGreaterThan(sizes.out * 0.8);
  }
}
