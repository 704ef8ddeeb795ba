/** The spectrum (ESD) of one slice in the sidebar: a histogram of its eigenvalues on log
 * bins, with the power-law fit's xmin marked (Plotly, loaded lazily). */
import { plotText } from '../shared/format';
import { plotly, themeColors } from './chart';
import { h } from './dom';
import { roundValue } from './fieldgroups';
import type { EsdState } from './types';

export interface Histogram {
  /** bin centres (geometric means of the edges) */
  readonly centers: number[];
  readonly counts: number[];
  readonly edges: number[];
}

/**
 * The positive finite eigenvalues of `values` counted in `bins` log-spaced bins from the
 * smallest to the largest (the last bin holds the maximum); one bin when all are equal.
 */
export function logHistogram(values: readonly number[], bins = 30): Histogram {
  const pos = values.filter(v => Number.isFinite(v) && v > 0);
  if (!pos.length) {
    return { centers: [], counts: [], edges: [] };
  }
  const lo = Math.log10(Math.min(...pos));
  const hi = Math.log10(Math.max(...pos));
  const n = hi > lo ? Math.max(1, Math.floor(bins)) : 1;
  const width = hi > lo ? (hi - lo) / n : 1;
  const edges = Array.from({ length: n + 1 }, (_, i) => 10 ** (lo + i * width));
  const counts = new Array<number>(n).fill(0);
  for (const v of pos) {
    counts[Math.min(n - 1, Math.floor((Math.log10(v) - lo) / width))]++;
  }
  const centers = counts.map((_, i) => Math.sqrt(edges[i] * edges[i + 1]));
  return { centers, counts, edges };
}

/** Draw `state` into `node`: the histogram, or a message saying why there is none. */
export async function renderEsd(node: HTMLElement, state: EsdState): Promise<void> {
  node.dataset.uid = state.uid;
  node.dataset.name = state.name;
  if (state.error || !state.values || !state.values.length) {
    if (node.classList.contains('js-plotly-plot')) {
      (await plotly()).purge(node);
    }
    delete node.dataset.eigenvalues;
    const text = state.error ?? `No spectrum stored for ${state.name}: session.compute.apply("esd") computes it (biases and vectors have none).`;
    node.replaceChildren(h('div', 'diffract-empty', text));
    return;
  }
  const Plotly = await plotly();
  const hist = logHistogram(state.values);
  const { fg, grid, accent } = themeColors();
  if (!node.classList.contains('js-plotly-plot')) {
    node.replaceChildren();
  }
  const shapes =
    state.xmin != null && state.xmin > 0
      ? [{ type: 'line', xref: 'x', yref: 'paper', x0: state.xmin, x1: state.xmin, y0: 0, y1: 1, line: { color: fg, dash: 'dash', width: 1 } }]
      : [];
  const title = `ESD of ${plotText(state.name)}` + (state.alpha != null ? ` · α ${roundValue(state.alpha)}` : '');
  await Plotly.react(
    node,
    [
      {
        type: 'bar',
        x: hist.centers,
        y: hist.counts,
        width: hist.centers.map((_, i) => hist.edges[i + 1] - hist.edges[i]),
        hovertext: hist.counts.map((c, i) => `${roundValue(hist.edges[i])} – ${roundValue(hist.edges[i + 1])}: ${c}`),
        hovertemplate: '%{hovertext}<extra></extra>',
        marker: { color: accent }
      }
    ],
    {
      height: 200,
      margin: { l: 40, r: 8, t: 24, b: 36 },
      title: { text: title, font: { size: 12, color: fg } },
      paper_bgcolor: 'rgba(0,0,0,0)',
      plot_bgcolor: 'rgba(0,0,0,0)',
      font: { color: fg, size: 10 },
      bargap: 0,
      shapes,
      annotations: shapes.length
        ? [{ x: Math.log10(state.xmin!), xref: 'x', yref: 'paper', y: 1, text: 'xmin', showarrow: false, xanchor: 'left', font: { size: 10, color: fg } }]
        : [],
      // eigenvalues as 1e-3, 0.01 ... (no SI prefixes: 10n, 1μ read as units)
      xaxis: { type: 'log', title: { text: 'eigenvalue' }, exponentformat: 'e', gridcolor: grid, zerolinecolor: grid },
      yaxis: { title: { text: 'count' }, gridcolor: grid, zerolinecolor: grid }
    },
    { displayModeBar: false, responsive: true }
  );
  node.dataset.eigenvalues = String(state.values.length);
  node.dataset.xmin = state.xmin != null ? String(state.xmin) : '';
}
