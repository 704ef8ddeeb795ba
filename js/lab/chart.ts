/** The sidebar chart: one field across the layers of the selected model (Plotly, loaded lazily). */
import { plotText } from '../shared/format';
import { h } from './dom';
import type { FieldState } from './model';

function themeColors(): { fg: string; grid: string; accent: string } {
  const css = getComputedStyle(document.body);
  return {
    fg: css.getPropertyValue('--jp-ui-font-color1').trim() || '#333',
    grid: css.getPropertyValue('--jp-border-color2').trim() || '#ddd',
    accent: css.getPropertyValue('--jp-brand-color1').trim() || '#1976d2'
  };
}

async function plotly() {
  return (await import('plotly.js-basic-dist-min')).default;
}

/** Draw `state` into `node` (a message instead when there is nothing per layer to plot). */
export async function renderChart(node: HTMLElement, state: FieldState): Promise<void> {
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
          ? `${sel.field} (model level) = ${state.value}`
          : `${sel.field} has no per-layer numbers to plot (an array or model-level field).`;
      node.replaceChildren(h('div', 'diffract-empty', text));
    }
    return;
  }
  const Plotly = await plotly();
  const { fg, grid, accent } = themeColors();
  if (!node.classList.contains('js-plotly-plot')) {
    node.replaceChildren(); // a message shown before; Plotly keeps its own children once it plots
  }
  await Plotly.react(
    node,
    [
      {
        type: 'scatter',
        mode: 'lines+markers',
        x: points.map((_, i) => i),
        y: points.map(p => p.value),
        text: points.map(
          p => `${plotText(sel.model)}<br>${plotText(p.name)}<br>type: ${plotText(p.type)}<br>${plotText(sel.field)}: ${p.value}`
        ),
        hovertemplate: '%{text}<extra></extra>',
        line: { color: accent },
        marker: { size: 5, color: accent }
      }
    ],
    {
      height: 220,
      margin: { l: 44, r: 8, t: 24, b: 32 },
      title: { text: `${plotText(sel.field)} across layers`, font: { size: 12, color: fg } },
      paper_bgcolor: 'rgba(0,0,0,0)',
      plot_bgcolor: 'rgba(0,0,0,0)',
      font: { color: fg, size: 10 },
      xaxis: { title: { text: 'layer' }, gridcolor: grid, zerolinecolor: grid },
      yaxis: { gridcolor: grid, zerolinecolor: grid }
    },
    { displayModeBar: false, responsive: true }
  );
  node.dataset.points = String(points.length);
  node.dataset.field = sel.field;
}
