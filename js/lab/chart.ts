/** The sidebar chart: one field across the layers of the selected model, as the server's
 * figure route draws it (`diffract.viz`, in Python); Plotly, loaded lazily, only renders it. */
import type { FieldPoint, FigureSpec } from '../shared/wire';
import { h } from './dom';
import { roundValue } from './fieldgroups';
import type { FieldState } from './model';

export function themeColors(): { fg: string; grid: string; accent: string } {
  const css = getComputedStyle(document.body);
  return {
    fg: css.getPropertyValue('--jp-ui-font-color1').trim() || '#333',
    grid: css.getPropertyValue('--jp-border-color2').trim() || '#ddd',
    accent: css.getPropertyValue('--jp-brand-color1').trim() || '#1976d2'
  };
}

export async function plotly() {
  return (await import('plotly.js-basic-dist-min')).default;
}

/** Fit a drawn chart to its container's new width (the sidebar was resized). */
export async function resizeChart(node: HTMLElement): Promise<void> {
  if (node.classList.contains('js-plotly-plot') && node.isConnected) {
    (await plotly()).Plots.resize(node);
  }
}

/** Draw `state` into `node` (a message instead when there is nothing per layer to plot). */
export async function renderChart(node: HTMLElement, state: FieldState, onPick?: (p: FieldPoint) => void): Promise<void> {
  const { selection: sel, points } = state;
  if (state.error || !points.length) {
    if (node.classList.contains('js-plotly-plot')) {
      (await plotly()).purge(node);
    }
    delete node.dataset.points;
    node.dataset.field = sel.field;
    if (state.error) {
      node.textContent = state.error;
    } else {
      const text =
        state.value != null
          ? `${sel.field} (model level) = ${roundValue(state.value)}`
          : `${sel.field} has no per-layer numbers to plot (an array or model-level field).`;
      const msg = h('div', 'diffract-empty', text);
      if (state.value != null) {
        msg.title = String(state.value);
      }
      node.replaceChildren(msg);
    }
    return;
  }
  if (!state.figure) {
    node.replaceChildren(h('div', 'diffract-empty', `${sel.field}: the server drew no figure for it.`));
    return;
  }
  if (!node.classList.contains('js-plotly-plot')) {
    node.replaceChildren(); // a message shown before; Plotly keeps its own children once it plots
  }
  await drawFigure(node, state.figure, 220);
  node.dataset.points = String(points.length);
  node.dataset.field = sel.field;
  const gd = node as HTMLElement & { on?: (event: string, fn: (e: ClickEvent) => void) => void; removeAllListeners?: (event: string) => void };
  gd.removeAllListeners?.('plotly_click');
  gd.on?.('plotly_click', e => {
    const point = pickedPoint(points, e.points?.[0]?.customdata);
    if (point) {
      void copyName(node, point.name);
      onPick?.(point);
    }
  });
}

/**
 * Render a figure of the server's figure route (built in Python by `diffract.viz`) into
 * `node`: only the sidebar's size, theme colours and a compact title are set here.
 */
export async function drawFigure(node: HTMLElement, figure: FigureSpec, height: number): Promise<void> {
  const Plotly = await plotly();
  await Plotly.react(node, figure.data, sidebarLayout(figure.layout, height), { displayModeBar: false, responsive: true });
}

/** The route's layout fitted to the sidebar: its height, small margins, the theme's colours. */
export function sidebarLayout(layout: Record<string, any>, height: number): Record<string, unknown> {
  const { fg, grid, accent } = themeColors();
  const axis = (a: Record<string, unknown> | undefined) => ({ ...(a ?? {}), automargin: true, gridcolor: grid, zerolinecolor: grid });
  const axes = Object.fromEntries(Object.keys(layout).filter(k => /^[xy]axis\d*$/.test(k)).map(k => [k, axis(layout[k])]));
  return {
    ...layout,
    ...axes,
    height,
    margin: { l: 44, r: 8, t: 24, b: 32 },
    title: { text: layout.title?.text ?? '', font: { size: 12, color: fg } },
    font: { color: fg, size: 10 },
    colorway: [accent, '#ff7f0e', '#2ca02c', '#d62728'],
    showlegend: false,
    paper_bgcolor: 'rgba(0,0,0,0)',
    plot_bgcolor: 'rgba(0,0,0,0)'
  };
}

/**
 * The point a click names: the route's `layers` points carry `[model, name, type, value, uid]`
 * in their customdata (a bare name is accepted too).
 */
export function pickedPoint(points: readonly FieldPoint[], custom: unknown): FieldPoint | undefined {
  if (Array.isArray(custom)) {
    const uid = String(custom[custom.length - 1] ?? '');
    return points.find(p => p.uid === uid) ?? points.find(p => p.name === String(custom[1] ?? ''));
  }
  const name = String(custom ?? '');
  return name ? points.find(p => p.name === name) : undefined;
}

interface ClickEvent {
  points?: { customdata?: unknown }[];
}

/** Copy a clicked point's layer name; a note under the chart says so (or how to copy it). */
async function copyName(node: HTMLElement, name: string): Promise<void> {
  if (!name) {
    return;
  }
  node.dataset.copied = name;
  let note = node.parentElement?.querySelector<HTMLElement>('.diffract-copied');
  if (!note) {
    note = h('div', 'diffract-copied diffract-muted');
    node.after(note);
  }
  try {
    await navigator.clipboard.writeText(name);
    note.textContent = `copied ${name}`;
  } catch {
    note.textContent = `${name} (the browser refused the clipboard: select and copy it)`;
  }
}
