/**
 * FieldPanel, in anywidget's module form (`export default { render }`): a Plotly figure of
 * stored fields that Python (`diffract.viz`) builds and this view only draws. State: PanelState
 * in wire.ts. Plotly (its cartesian bundle: scatter, bar, heatmap) is bundled into this one
 * module, so the panel needs no CDN and runs wherever anywidget does (JupyterLab, Notebook 7,
 * VS Code, marimo).
 */
import type { AnyModel, AnyWidget, RenderProps } from '@anywidget/types';
import Plotly from 'plotly.js-cartesian-dist-min';

import { el } from '../shared/format';
import { injectStyle } from '../shared/theme';
import type { PanelState } from '../shared/wire';

const PANEL_CSS = `
.diffract-panel { max-width: none; padding: 4px 6px; }
.diffract-panel .d-panel-bar { display: flex; flex-wrap: wrap; align-items: center; gap: 8px; font-size: 12px; }
.diffract-panel .diffract-panel-status { flex: 1 1 auto; min-width: 0; }
.diffract-panel .diffract-panel-format button.d-on { background: var(--jp-brand-color1, #1976d2);
  border-color: var(--jp-brand-color1, #1976d2); color: var(--jp-ui-inverse-font-color1, #fff); }
.diffract-panel a.diffract-panel-csv-link { color: var(--jp-content-link-color, #1976d2); margin: 0 4px; }
.diffract-panel .diffract-panel-plot { width: 100%; min-width: 0; }
`;

/** The figure to draw: the spec Python built, with the page's font colour where the spec sets none. */
export function figureOf(model: AnyModel<PanelState>): { data: unknown[]; layout: Record<string, unknown>; config: Record<string, unknown> } {
  let spec: { data?: unknown[]; layout?: Record<string, unknown> } = {};
  try {
    spec = JSON.parse(model.get('figure_json') || '{}');
  } catch {
    spec = {};
  }
  const layout: Record<string, unknown> = { ...(spec.layout ?? {}), height: model.get('height'), autosize: true };
  delete layout.width;
  const config = {
    responsive: true,
    displaylogo: false,
    toImageButtonOptions: { format: model.get('image_format'), filename: model.get('download_name') }
  };
  return { data: spec.data ?? [], layout, config };
}

function render({ model, el: root }: RenderProps<PanelState>): () => void {
  injectStyle(root);
  const style = document.createElement('style');
  style.textContent = PANEL_CSS;
  root.appendChild(style);
  const box = el('div', { class: 'diffract-w diffract-panel' });
  const status = el('span', { class: 'diffract-panel-status' });
  const fmt = el('span', { class: 'diffract-panel-format', title: "what the camera button of the plot's toolbar downloads" }, 'image ');
  const buttons: HTMLButtonElement[] = [];
  for (const f of ['png', 'svg']) {
    const b = el('button', { type: 'button', 'data-format': f }, f.toUpperCase()) as HTMLButtonElement;
    b.addEventListener('click', () => {
      model.set('image_format', f);
      model.save_changes();
    });
    buttons.push(b);
    fmt.append(b);
  }
  const csv = el('a', { class: 'diffract-panel-csv-link' }, '⤓ CSV') as HTMLAnchorElement;
  const plot = el('div', { class: 'diffract-panel-plot' });
  box.append(el('div', { class: 'd-panel-bar' }, status, fmt, csv), plot);
  root.appendChild(box);
  let drawn = false;
  const draw = () => {
    const { data, layout, config } = figureOf(model);
    void Plotly.react(plot, data, layout, config).then(() => {
      drawn = true;
      plot.dataset.traces = String(data.length);
    });
  };
  const bar = () => {
    status.innerHTML = model.get('status_html');
    for (const b of buttons) {
      b.classList.toggle('d-on', b.dataset.format === model.get('image_format'));
    }
    csv.href = model.get('csv_href');
    csv.download = `${model.get('download_name')}.csv`;
    csv.title = `the plotted values as CSV (${model.get('value_count')} values)`;
  };
  bar();
  draw();
  const observer = typeof ResizeObserver === 'undefined' ? null : new ResizeObserver(() => drawn && plot.isConnected && Plotly.Plots.resize(plot));
  observer?.observe(box);
  const onFigure = () => draw();
  model.on('change:figure_json', onFigure);
  model.on('change:image_format', onFigure);
  model.on('change:height', onFigure);
  for (const k of ['status_html', 'csv_href', 'image_format', 'value_count', 'download_name'] as const) {
    model.on(`change:${k}`, bar);
  }
  return () => {
    observer?.disconnect();
    model.off('change:figure_json', onFigure);
    model.off('change:image_format', onFigure);
    model.off('change:height', onFigure);
    for (const k of ['status_html', 'csv_href', 'image_format', 'value_count', 'download_name'] as const) {
      model.off(`change:${k}`, bar);
    }
    Plotly.purge(plot);
  };
}

export default { render } satisfies AnyWidget<PanelState>;
