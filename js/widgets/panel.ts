/**
 * FieldPanel, in anywidget's module form (`export default { render }`): a Plotly figure of
 * stored fields that Python (`diffract.viz`) builds and this view only draws. State: PanelState
 * in wire.ts. Plotly (its cartesian bundle: scatter, bar, heatmap; static/plotly.js, built from
 * js/widgets/plotly.ts) comes from the kernel once per page, in answer to a custom message, and
 * is shared by every panel: no CDN, and each panel's module stays small (anywidget gives a
 * model 2 s to load its module). Runs wherever anywidget does (JupyterLab, Notebook 7, VS Code,
 * marimo).
 */
import type { AnyModel, AnyWidget, RenderProps } from '@anywidget/types';

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

interface PlotlyApi {
  react(el: HTMLElement, data: unknown[], layout?: unknown, config?: unknown): Promise<unknown>;
  purge(el: HTMLElement): void;
  Plots: { resize(el: HTMLElement): void };
}

const SHARED = '__diffract_plotly__';

/** Plotly, asked from the kernel the first time a panel of this page needs it (later panels
 * share the answer); asked again through another panel when no answer came within 20 s. */
export function plotly(model: AnyModel<PanelState>): Promise<PlotlyApi> {
  const g = globalThis as unknown as Record<string, Promise<PlotlyApi> | undefined>;
  const pending = g[SHARED];
  if (pending) {
    return pending;
  }
  const loaded = new Promise<PlotlyApi>((resolve, reject) => {
    const timer = setTimeout(() => {
      model.off('msg:custom', onMsg);
      g[SHARED] = undefined;
      reject(new Error('diffract: no answer from the kernel with Plotly (is it running?)'));
    }, 20000);
    const onMsg = (msg: { type?: string; source?: string }) => {
      if (msg?.type !== 'plotly-js' || typeof msg.source !== 'string') {
        return;
      }
      clearTimeout(timer);
      model.off('msg:custom', onMsg);
      const url = URL.createObjectURL(new Blob([msg.source], { type: 'text/javascript' }));
      import(/* webpackIgnore: true */ /* @vite-ignore */ url).then(m => resolve(m.default as PlotlyApi), reject);
    };
    model.on('msg:custom', onMsg);
    model.send({ type: 'plotly-js' });
  });
  g[SHARED] = loaded;
  return loaded;
}

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
  let Plotly: PlotlyApi | null = null;
  const draw = () => {
    void plotly(model)
      .then(p => {
        Plotly = p;
        const { data, layout, config } = figureOf(model);
        return p.react(plot, data, layout, config).then(() => {
          drawn = true;
          plot.dataset.traces = String(data.length);
        });
      })
      .catch((e: unknown) => {
        plot.textContent = String(e instanceof Error ? e.message : e);
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
  const observer = typeof ResizeObserver === 'undefined' ? null : new ResizeObserver(() => drawn && plot.isConnected && Plotly?.Plots.resize(plot));
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
    Plotly?.purge(plot);
  };
}

export default { render } satisfies AnyWidget<PanelState>;
