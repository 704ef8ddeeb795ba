/** A tracked run across training in the sidebar, under the selected checkpoint's chart: the
 * server's `evolution` figure (a layer x step heatmap and one line per layer, built in Python by
 * `diffract.viz`), fitted to the sidebar: a one-line title, step and layer ticks that fit its
 * width, the selected checkpoint's column outlined. Plotly, loaded lazily, only renders it. */
import type { FigureSpec } from '../shared/wire';
import { clearMessages, drawFigure, plotly, themeColors, titleChars } from './chart';
import { h } from './dom';
import { missingStepsNote } from './messages';
import { figureSteps } from './model';
import type { EvolutionState } from './types';

/** The chart's height in px (heatmap above, one line per layer below). */
export const EVOLUTION_HEIGHT = 360;
/** Up to this many layers the lines have a legend (more would not tell them apart). */
export const LEGEND_LAYERS = 8;

/**
 * "pl_alpha across training · run train · 3 checkpoints (steps 0–20)": what is drawn, on lines
 * of at most `max` characters broken between its parts (never "3" / "checkpoints").
 */
export function evolutionTitle(field: string, run: string, steps: readonly number[], max = Infinity): string {
  const n = steps.length;
  const span = n === 1 ? `step ${steps[0]}` : `steps ${steps[0]}–${steps[n - 1]}`;
  const lines: string[] = [];
  for (const part of [`${field} across training`, `run ${run}`, `${n} checkpoint${n === 1 ? '' : 's'} (${span})`]) {
    const last = lines.length - 1;
    if (last >= 0 && lines[last].length + 3 + part.length <= max) {
      lines[last] += ` · ${part}`;
    } else {
      lines.push(part);
    }
  }
  return lines.join('<br>');
}

/** At most `max` of `n` evenly spaced indices, the first included. */
function every(n: number, max: number): number[] {
  const step = Math.max(1, Math.ceil(n / Math.max(1, max)));
  return Array.from({ length: Math.ceil(n / step) }, (_, i) => i * step);
}

/**
 * The route's figure made to fit a sidebar `width` px wide: the title, step ticks that do not
 * overlap, short layer names (the whole name stays in the hover), a slim colorbar, and the
 * selected step outlined on both plots. The data's values are not touched.
 */
export function sidebarEvolution(figure: FigureSpec, state: EvolutionState, drawn: readonly number[], width: number): FigureSpec {
  const { fg } = themeColors();
  // a fixed size: Plotly's own resize (autosize) would drop the height and squeeze the plots
  // to nothing; the sidebar draws it again at its new width instead (DetailView.resize)
  const layout: Record<string, any> = { ...figure.layout, width };
  layout.title = { text: evolutionTitle(state.selection.field, state.run, drawn, titleChars(width)) };
  const data = figure.data.map(t => ({ ...t }));
  const heat = data.find(t => t.type === 'heatmap') as Record<string, any> | undefined;
  // the step labels: as many as fit (a label is about 6 px a character plus a gap)
  const longest = Math.max(1, ...drawn.map(s => String(s).length));
  const shown = every(drawn.length, Math.floor((width - 60) / (longest * 6 + 12)));
  layout.xaxis = { ...(layout.xaxis ?? {}), tickvals: shown, ticktext: shown.map(i => String(drawn[i])), tickangle: 0, title: { text: '' } };
  if (heat && Array.isArray(heat.y)) {
    const names = (heat.y as unknown[]).map(String);
    const short = rowLabels(names, layout.yaxis);
    // the lines, one per layer: named as the rows are (the whole name is in the hover)
    for (const t of data) {
      const i = t.type === 'heatmap' ? -1 : names.indexOf(String(t.name));
      if (i >= 0) {
        t.name = short[i];
        t.showlegend = names.length <= LEGEND_LAYERS;
      }
    }
    const rows = every(names.length, Math.floor((EVOLUTION_HEIGHT * 0.5) / 12));
    layout.yaxis = { ...(layout.yaxis ?? {}), title: { text: '' }, tickmode: 'array', tickvals: rows.map(i => names[i]), ticktext: rows.map(i => short[i]), tickfont: { size: 9 } };
    heat.colorbar = { ...(heat.colorbar ?? {}), thickness: 10, title: { text: '' }, tickfont: { size: 9 } };
  }
  const col = drawn.indexOf(state.step);
  layout.shapes = [
    ...(Array.isArray(layout.shapes) ? layout.shapes : []),
    ...(col >= 0
      ? [
          { type: 'rect', xref: 'x', yref: 'y domain', x0: col - 0.5, x1: col + 0.5, y0: 0, y1: 1, line: { color: fg, width: 2 } },
          { type: 'line', xref: 'x2', yref: 'y2 domain', x0: state.step, x1: state.step, y0: 0, y1: 1, line: { color: fg, width: 1, dash: 'dot' } }
        ]
      : [])
  ];
  return { data, layout };
}

/** The rows' short names as the route labels them (`diffract.viz`'s `short_names`: the
 * y ticks' text for their values), a whole name where it has none. */
export function rowLabels(names: readonly string[], axis: Record<string, any> | undefined): string[] {
  const vals = Array.isArray(axis?.tickvals) ? (axis.tickvals as unknown[]).map(String) : [];
  const text = Array.isArray(axis?.ticktext) ? (axis.ticktext as unknown[]).map(String) : [];
  return names.map(n => {
    const i = vals.indexOf(n);
    return i >= 0 && i < text.length ? text[i] : n;
  });
}

/** How many rows the lines' legend takes in a figure `width` px wide (0: no legend). */
export function legendRows(figure: FigureSpec, width: number): number {
  const names = figure.data.filter(t => t.showlegend === true).map(t => String(t.name ?? ''));
  if (!names.length) {
    return 0;
  }
  // an entry: its line symbol (about 40 px) and its name (about 5.5 px a character at 9 px)
  let rows = 1;
  let used = 0;
  for (const n of names) {
    const w = 40 + 5.5 * n.length;
    if (used && used + w > width - 16) {
      rows++;
      used = 0;
    }
    used += w;
  }
  return rows;
}

interface ClickEvent {
  points?: { customdata?: unknown }[];
}

/**
 * Draw `state` into `node` (a message instead when there is nothing to draw) and its notes into
 * `note`; a click on a column or a point calls `onPick` with that checkpoint's model id (the
 * route's customdata is `[layer, model_id, value, step]`).
 */
export async function renderEvolution(node: HTMLElement, note: HTMLElement, state: EvolutionState, onPick?: (modelId: string) => void): Promise<void> {
  node.dataset.run = state.run;
  node.dataset.field = state.selection.field;
  const drawn = state.figure ? figureSteps(state.figure) : [];
  if (!state.figure || !drawn.length) {
    if (node.classList.contains('js-plotly-plot')) {
      (await plotly()).purge(node);
    }
    delete node.dataset.steps;
    const msg = h('div', 'diffract-empty' + (state.failed ? ' diffract-evolution-error' : ''), state.message ?? '');
    node.replaceChildren(msg);
    note.replaceChildren();
    return;
  }
  clearMessages(node);
  const width = node.clientWidth || 300;
  const figure = sidebarEvolution(state.figure, state, drawn, width);
  await drawFigure(node, figure, EVOLUTION_HEIGHT, { legendRows: legendRows(figure, width) });
  node.dataset.steps = drawn.join(',');
  const lines: string[] = [];
  if (drawn.includes(state.step)) {
    lines.push(`Outlined: step ${state.step}, the checkpoint selected above. Click a column to open another step.`);
  }
  const missing = missingStepsNote(state.selection.field, state.missing);
  if (missing) {
    lines.push(missing);
  }
  note.replaceChildren(...lines.map(l => h('div', '', l)));
  const gd = node as HTMLElement & { on?: (event: string, fn: (e: ClickEvent) => void) => void; removeAllListeners?: (event: string) => void };
  gd.removeAllListeners?.('plotly_click');
  gd.on?.('plotly_click', e => {
    const custom = e.points?.[0]?.customdata;
    const model = Array.isArray(custom) ? String(custom[1] ?? '') : '';
    if (model) {
      onPick?.(model);
    }
  });
}
