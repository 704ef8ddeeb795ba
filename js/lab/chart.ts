/** The sidebar chart: one field across the layers of the selected model (Plotly, loaded lazily). */
import { plotText } from '../shared/format';
import type { FieldPoint } from '../shared/wire';
import { h } from './dom';
import { roundValue, shortLayerName } from './fieldgroups';
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
  const Plotly = await plotly();
  const { fg, grid, accent } = themeColors();
  // at most ~12 layer names on the axis (every one in the hover)
  const step = Math.max(1, Math.ceil(points.length / 12));
  const ticks = points.map((_, i) => i).filter(i => i % step === 0);
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
        customdata: points.map(p => p.name),
        text: points.map(
          p =>
            `${plotText(sel.model)}<br>${plotText(p.name)}<br>type: ${plotText(p.type)}<br>${plotText(sel.field)}: ${roundValue(p.value)}` +
            (typeof p.value === 'number' && roundValue(p.value) !== String(p.value) ? ` (${p.value})` : '') +
            '<br><i>click: its spectrum, and copy the name</i>'
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
      xaxis: {
        title: { text: 'layer' },
        tickmode: 'array',
        tickvals: ticks,
        ticktext: ticks.map(i => plotText(shortLayerName(points[i].name))),
        tickangle: -40,
        automargin: true,
        gridcolor: grid,
        zerolinecolor: grid
      },
      yaxis: { gridcolor: grid, zerolinecolor: grid }
    },
    { displayModeBar: false, responsive: true }
  );
  node.dataset.points = String(points.length);
  node.dataset.field = sel.field;
  const gd = node as HTMLElement & { on?: (event: string, fn: (e: ClickEvent) => void) => void; removeAllListeners?: (event: string) => void };
  gd.removeAllListeners?.('plotly_click');
  gd.on?.('plotly_click', e => {
    const name = String(e.points?.[0]?.customdata ?? '');
    void copyName(node, name);
    const point = points.find(p => p.name === name);
    if (point && onPick) {
      onPick(point);
    }
  });
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
