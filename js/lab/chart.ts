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

/** Plotly's cartesian bundle (scatter, bar, heatmap: the across-training chart is a heatmap),
 * loaded on first use; the widgets' FieldPanel uses the same bundle. */
export async function plotly() {
  return (await import('plotly.js-cartesian-dist-min')).default;
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
  clearMessages(node);
  await drawFigure(node, state.figure, 220, { layerTicks: true });
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
export async function drawFigure(node: HTMLElement, figure: FigureSpec, height: number, opts: SidebarOptions = {}): Promise<void> {
  const Plotly = await plotly();
  const width = opts.width ?? (node.clientWidth || undefined);
  const layout = sidebarLayout(figure.layout, height, { ...opts, width });
  await Plotly.react(node, figure.data, layout, { displayModeBar: false, responsive: true });
}

/**
 * Remove a message an earlier draw left in `node` ("esd has no per-layer numbers ..."): once
 * Plotly has plotted into a node it keeps its own children, so a message shown in between
 * would otherwise stay above (and over) the next figure.
 */
export function clearMessages(node: HTMLElement): void {
  if (!node.classList.contains('js-plotly-plot')) {
    node.replaceChildren();
    return;
  }
  for (const child of Array.from(node.children)) {
    if (child.classList.contains('diffract-empty')) {
      child.remove();
    }
  }
}

export interface SidebarOptions {
  /** the node's width in px (title wrapping, how many layer ticks fit) */
  width?: number;
  /** thin the route's "index name" x ticks to the width (the `layers` figure) */
  layerTicks?: boolean;
  /** show the traces' legend (horizontal, under the plot) taking this many rows */
  legendRows?: number;
}

/** The route's layout fitted to the sidebar: its height, small margins, the theme's colours. */
export function sidebarLayout(layout: Record<string, any>, height: number, opts: SidebarOptions = {}): Record<string, unknown> {
  const { fg, grid, accent } = themeColors();
  const axis = (a: Record<string, unknown> | undefined) => ({ ...(a ?? {}), automargin: true, gridcolor: grid, zerolinecolor: grid });
  const axes: Record<string, any> = Object.fromEntries(Object.keys(layout).filter(k => /^[xy]axis\d*$/.test(k)).map(k => [k, axis(layout[k])]));
  const width = opts.width ?? 300;
  if (opts.layerTicks) {
    const ticks = layerTicks(layout.xaxis, Math.max(2, Math.floor(width / 70)));
    if (ticks) {
      axes.xaxis = { ...(axes.xaxis ?? axis(undefined)), tickmode: 'array', ...ticks, tickfont: { size: 9 } };
    }
  }
  // a long title ("ESD of model:encoder.layer.0.attention.self.query.weight") wraps instead of
  // being clipped at the sidebar's edge; the top margin grows with its lines
  const title = wrapTitle(String(layout.title?.text ?? ''), titleChars(width));
  const lines = title ? title.split('<br>').length : 0;
  const legendRows = opts.legendRows ?? 0;
  const legend = legendRows
    ? { legend: { orientation: 'h', x: 0, xanchor: 'left', yref: 'container', y: 0, yanchor: 'bottom', font: { size: 9, color: fg }, bgcolor: 'rgba(0,0,0,0)' } }
    : {};
  return {
    ...layout,
    ...axes,
    height: height + Math.max(0, lines - 1) * 14 + legendRows * 18,
    margin: { l: 44, r: 8, t: 10 + 14 * Math.max(1, lines), b: 32 + legendRows * 18 },
    title: { text: title, font: { size: 11, color: fg }, x: 0.02, xanchor: 'left' },
    font: { color: fg, size: 10 },
    // the theme's accent first, then Plotly's own colours (one per line up to 10)
    colorway: [accent, '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'],
    showlegend: legendRows > 0,
    ...legend,
    paper_bgcolor: 'rgba(0,0,0,0)',
    plot_bgcolor: 'rgba(0,0,0,0)'
  };
}

/** How many characters of a chart title fit on one line of a figure `width` px wide. */
export function titleChars(width: number): number {
  return Math.max(20, Math.floor((width - 16) / 6.5));
}

/**
 * Break `text` into lines of at most `max` characters (at spaces, dots, colons or slashes;
 * inside a longer word where it must), joined by Plotly's `<br>`; a `<br>` already in it
 * stays a line break.
 */
export function wrapTitle(text: string, max: number): string {
  return text
    .split('<br>')
    .map(line => wrapLine(line, max))
    .filter(line => line)
    .join('<br>');
}

function wrapLine(text: string, max: number): string {
  const lines: string[] = [];
  let line = '';
  for (const part of text.split(/(?<=[\s.:/_])/)) {
    let rest = part;
    while (rest.length) {
      if (line.length + rest.length <= max) {
        line += rest;
        rest = '';
      } else if (line.trim()) {
        lines.push(line.trimEnd());
        line = '';
      } else {
        line = rest.slice(0, max);
        rest = rest.slice(max);
        if (rest) {
          lines.push(line);
          line = '';
        }
      }
    }
  }
  if (line.trim()) {
    lines.push(line.trimEnd());
  }
  return lines.join('<br>');
}

/**
 * The x ticks of a `layers` figure thinned to at most `max` (every k-th, evenly spaced): the
 * route's own ticks, each "depth index  short name", named in Python (`diffract.viz`'s
 * `layer_ticks`), so the sidebar, panels and report name layers alike.
 */
export function layerTicks(axis: Record<string, any> | undefined, max: number): { tickvals: number[]; ticktext: string[] } | null {
  const vals = axis?.tickvals;
  const text = axis?.ticktext;
  if (!Array.isArray(vals) || !Array.isArray(text) || !vals.length || vals.length !== text.length) {
    return null;
  }
  const k = Math.max(1, Math.ceil(vals.length / Math.max(1, max)));
  const keep = vals.map((_, i) => i).filter(i => i % k === 0);
  return { tickvals: keep.map(i => Number(vals[i])), ticktext: keep.map(i => String(text[i])) };
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
