/**
 * JupyterLab 4 plugin: the "Weight runs" sidebar. Lists the diffract stores under the server
 * root (through the diffract server extension), their models and fields, plots a field across
 * layers, and inserts a cell that opens a store into the active notebook.
 */
import { ILabShell, ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { IThemeManager } from '@jupyterlab/apputils';
import { PathExt } from '@jupyterlab/coreutils';
import { INotebookTracker, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import pkg from '../../package.json';
import { fmtTime, plotText } from '../shared/format';
import type { FieldReply, ModelEntry, StoreEntry, StoreReply, StoresReply, VersionReply } from '../shared/wire';
import { ApiError, openStoreCode, requestAPI } from './api';

export const VERSION: string = pkg.version;
const PANEL_ID = 'diffract-runs';
const POLL_MS = 3000;

const ICON_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
<g class="jp-icon3" fill="#616161"><rect x="3" y="13" width="3" height="8"/><rect x="8" y="8" width="3" height="13"/>
<rect x="13" y="4" width="3" height="17"/><rect x="18" y="10" width="3" height="11"/></g></svg>`;
const runsIcon = new LabIcon({ name: 'diffract-lab:runs', svgstr: ICON_SVG });

function h<K extends keyof HTMLElementTagNameMap>(tag: K, cls = '', text = ''): HTMLElementTagNameMap[K] {
  const n = document.createElement(tag);
  if (cls) {
    n.className = cls;
  }
  if (text) {
    n.textContent = text;
  }
  return n;
}

interface Selection {
  store: string;
  model: string;
  field: string;
}

export class RunsPanel extends Widget {
  private stores: StoreEntry[] = [];
  private details = new Map<string, StoreReply>();
  private expanded = new Set<string>();
  private selection: Selection | null = null;
  private timer: number | undefined;
  private versionNote = h('div', 'diffract-banner diffract-version');
  private errorNote = h('div', 'diffract-banner diffract-error');
  private list = h('div', 'diffract-stores');
  private detail = h('div', 'diffract-detail');
  private chart = h('div', 'diffract-chart');
  private search: HTMLInputElement;
  private busy = false;

  constructor(
    private app: JupyterFrontEnd,
    private notebooks: INotebookTracker | null
  ) {
    super();
    this.id = PANEL_ID;
    this.addClass('diffract-runs');
    this.title.icon = runsIcon;
    this.title.caption = 'Weight runs (diffract stores)';
    const head = h('div', 'diffract-head');
    head.append(h('span', 'diffract-title', 'Weight runs'));
    const reload = h('button', 'jp-Button diffract-reload', '↻');
    reload.title = 'Refresh';
    reload.addEventListener('click', () => void this.refresh(true));
    head.append(reload);
    this.search = h('input', 'jp-mod-styled diffract-search');
    this.search.placeholder = 'Filter stores, models, fields…';
    this.search.addEventListener('input', () => this.renderList());
    this.node.append(head, this.versionNote, this.errorNote, this.search, this.list, this.detail);
    this.versionNote.hidden = true;
    this.errorNote.hidden = true;
  }

  protected onAfterAttach(): void {
    void this.handshake();
    void this.refresh(true);
    this.timer = window.setInterval(() => {
      if (this.isVisible) {
        void this.refresh(false);
      }
    }, POLL_MS);
  }

  protected onBeforeDetach(): void {
    window.clearInterval(this.timer);
  }

  protected onAfterShow(): void {
    void this.refresh(false);
  }

  async handshake(): Promise<void> {
    try {
      const v = await requestAPI<VersionReply>('version');
      if (v.version !== VERSION) {
        this.versionNote.hidden = false;
        this.versionNote.textContent =
          `Version mismatch: this page runs the diffract-lab front end ${VERSION}, the server has diffract-lab ${v.version}. ` +
          'Install one version in the environment that runs JupyterLab (pip install "diffract-lab==' +
          v.version +
          '"), restart JupyterLab, then reload this page.';
      } else {
        this.versionNote.hidden = true;
      }
      this.node.dataset.serverVersion = v.version;
    } catch (e) {
      this.showError(e);
    }
  }

  private showError(e: unknown): void {
    const err = e as ApiError;
    this.errorNote.hidden = false;
    if (err.status === 404) {
      this.errorNote.textContent =
        'The diffract server extension is not answering (HTTP 404). Enable it with ' +
        '"jupyter server extension enable diffract" and restart JupyterLab.';
    } else if (err.status === 403) {
      this.errorNote.textContent = 'The server refused the request (HTTP 403): log in to JupyterLab again.';
    } else {
      this.errorNote.textContent = `Cannot list stores: ${err.message ?? String(e)}`;
    }
  }

  /** Re-read the store list; re-read expanded stores whose files changed. */
  async refresh(force: boolean): Promise<void> {
    if (this.busy) {
      return;
    }
    this.busy = true;
    try {
      const reply = await requestAPI<StoresReply>('stores');
      this.errorNote.hidden = true;
      const old = new Map(this.stores.map(s => [s.path, s.stamp]));
      const changed = force || reply.stores.length !== this.stores.length || reply.stores.some(s => old.get(s.path) !== s.stamp);
      this.stores = reply.stores;
      const loads: Promise<void>[] = [];
      for (const s of this.stores) {
        const known = this.details.get(s.path);
        if (this.expanded.has(s.path) && (force || !known || known.stamp !== s.stamp)) {
          loads.push(this.loadStore(s.path));
        }
      }
      await Promise.all(loads);
      if (changed || loads.length) {
        this.renderList();
        if (this.selection && loads.length) {
          await this.renderDetail();
        }
      }
    } catch (e) {
      this.showError(e);
    } finally {
      this.busy = false;
    }
  }

  private async loadStore(path: string): Promise<void> {
    const d = await requestAPI<StoreReply>('store', { path });
    this.details.set(path, d);
  }

  private matches(text: string): boolean {
    const q = this.search.value.trim().toLowerCase();
    return !q || text.toLowerCase().includes(q);
  }

  renderList(): void {
    this.list.replaceChildren();
    if (!this.stores.length) {
      const empty = h('div', 'diffract-empty');
      empty.innerHTML =
        '<p><b>No diffract stores under this folder yet.</b></p>' +
        '<p>Create one from a notebook:</p>' +
        '<pre>from diffract import Session\nsession = Session()   # ./.diffract\nsession.models.add(model, "my-model")\nsession.compute.apply("pl_alpha")</pre>' +
        '<p>or from a terminal: <code>diffract analyze</code>. Stores appear here by themselves.</p>';
      this.list.append(empty);
      return;
    }
    let shown = 0;
    for (const s of this.stores) {
      const d = this.details.get(s.path);
      const models = d ? d.models.filter(m => this.matches(`${s.path} ${m.model_id} ${m.fields.join(' ')}`)) : [];
      if (!this.matches(s.path || s.name) && !models.length) {
        continue;
      }
      shown++;
      const item = h('div', 'diffract-store');
      item.dataset.path = s.path;
      const row = h('div', 'diffract-store-row');
      const open = this.expanded.has(s.path);
      row.append(h('span', 'diffract-caret', open ? '▾' : '▸'), h('span', 'diffract-store-name', s.path || '(server root)'));
      row.append(h('span', 'diffract-muted', ` · ${d ? d.models.length + ' models' : s.segments + ' segments'} · ${fmtTime(s.updated)}`));
      row.title = `updated ${fmtTime(s.updated)}`;
      row.addEventListener('click', () => void this.toggle(s.path));
      item.append(row);
      if (open && d) {
        if (!d.models.length) {
          item.append(h('div', 'diffract-empty diffract-indent', 'No models in this store yet: session.models.add(model, "id")'));
        }
        const table = h('table', 'diffract-models');
        const head = h('tr');
        for (const c of ['model', 'slices', 'fields', 'added']) {
          head.append(h('th', '', c));
        }
        table.append(head);
        for (const m of models.length || this.matches(s.path) ? (models.length ? models : d.models) : []) {
          table.append(this.modelRow(s.path, m));
        }
        item.append(table);
        if (d.manifests && d.manifests.length) {
          const box = h('div', 'diffract-manifests diffract-indent');
          box.append(h('div', 'diffract-muted', 'Sampling manifests'));
          for (const man of d.manifests) {
            const line = h(
              'div',
              'diffract-manifest',
              `${man.label || man.identity.slice(0, 12)} · ${man.mode} · ${man.n_selected}/${man.n_eligible} selected` +
                (man.teacher_id ? ` · teacher ${man.teacher_id}` : '')
            );
            line.dataset.identity = man.identity;
            line.title = man.models.length ? `materialized: ${man.models.join(', ')}` : 'no materialized models';
            box.append(line);
          }
          item.append(box);
        }
      }
      this.list.append(item);
    }
    if (!shown) {
      this.list.append(h('div', 'diffract-empty', `Nothing matches "${this.search.value}".`));
    }
  }

  private modelRow(store: string, m: ModelEntry): HTMLTableRowElement {
    const tr = h('tr', 'diffract-model');
    tr.dataset.model = m.model_id;
    if (this.selection && this.selection.store === store && this.selection.model === m.model_id) {
      tr.classList.add('diffract-selected');
    }
    tr.append(h('td', 'diffract-model-id', m.model_id), h('td', '', String(m.slices)), h('td', '', String(m.fields.length)), h('td', 'diffract-muted', fmtTime(m.added)));
    tr.title = m.fields.join(', ') || 'no fields computed yet';
    tr.addEventListener('click', () => void this.select(store, m));
    return tr;
  }

  private async toggle(path: string): Promise<void> {
    if (this.expanded.has(path)) {
      this.expanded.delete(path);
    } else {
      this.expanded.add(path);
      try {
        await this.loadStore(path);
      } catch (e) {
        this.showError(e);
      }
    }
    this.renderList();
  }

  private async select(store: string, m: ModelEntry): Promise<void> {
    const numeric = m.fields;
    const prev = this.selection;
    const field = prev && prev.store === store && numeric.includes(prev.field) ? prev.field : pickField(numeric);
    this.selection = { store, model: m.model_id, field };
    this.renderList();
    await this.renderDetail();
  }

  async renderDetail(): Promise<void> {
    const sel = this.selection;
    this.detail.replaceChildren();
    if (!sel) {
      return;
    }
    const d = this.details.get(sel.store);
    const m = d?.models.find(x => x.model_id === sel.model);
    if (!d || !m) {
      return;
    }
    const title = h('div', 'diffract-detail-title');
    title.append(h('b', '', m.model_id), h('span', 'diffract-muted', ` · ${m.slices} slices · ${m.framework ?? ''}`));
    const openBtn = h('button', 'jp-Button jp-mod-styled jp-mod-accept diffract-open', 'Open in notebook');
    openBtn.addEventListener('click', () => void this.openInNotebook(sel.store, sel.model));
    this.detail.append(title, openBtn);
    if (!m.fields.length) {
      this.detail.append(h('div', 'diffract-empty', 'No fields computed for this model yet: session.compute.apply("pl_alpha")'));
      return;
    }
    const chips = h('div', 'diffract-fields');
    for (const f of m.fields) {
      const c = h('button', 'diffract-field' + (f === sel.field ? ' diffract-on' : ''), f);
      c.dataset.field = f;
      c.addEventListener('click', () => {
        sel.field = f;
        void this.renderDetail();
      });
      chips.append(c);
    }
    this.detail.append(chips, this.chart);
    await this.plot(sel);
  }

  async plot(sel: Selection): Promise<void> {
    let reply: FieldReply;
    try {
      reply = await requestAPI<FieldReply>('field', { path: sel.store, field: sel.field, model: sel.model });
    } catch (e) {
      this.chart.textContent = `Cannot read ${sel.field}: ${(e as Error).message}`;
      return;
    }
    const entry = reply.models.find(x => x.model_id === sel.model);
    const pts = (entry?.points ?? []).filter(p => typeof p.value === 'number');
    if (!pts.length) {
      this.chart.replaceChildren(
        h('div', 'diffract-empty', entry?.value != null ? `${sel.field} (model level) = ${entry.value}` : `${sel.field} has no per-layer numbers to plot (an array or model-level field).`)
      );
      return;
    }
    const Plotly = (await import('plotly.js-basic-dist-min')).default;
    const css = getComputedStyle(document.body);
    const fg = css.getPropertyValue('--jp-ui-font-color1').trim() || '#333';
    const grid = css.getPropertyValue('--jp-border-color2').trim() || '#ddd';
    const accent = css.getPropertyValue('--jp-brand-color1').trim() || '#1976d2';
    this.chart.dataset.points = String(pts.length);
    this.chart.dataset.field = sel.field;
    await Plotly.react(
      this.chart,
      [
        {
          type: 'scatter',
          mode: 'lines+markers',
          x: pts.map((_, i) => i),
          y: pts.map(p => p.value),
          text: pts.map(
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
  }

  /** Insert a cell that opens the store (and scopes to the model) into the active notebook. */
  async openInNotebook(store: string, model?: string): Promise<NotebookPanel | null> {
    let panel = this.notebooks?.currentWidget ?? null;
    if (!panel) {
      panel = (await this.app.commands.execute('notebook:create-new', { kernelName: 'python3' })) as NotebookPanel;
      await panel.context.ready;
    }
    const nbDir = PathExt.dirname(panel.context.path);
    const code = openStoreCode(store, nbDir, model);
    const notebook = panel.content;
    const active = notebook.activeCell;
    if (!(active && active.model.type === 'code' && active.model.sharedModel.getSource().trim() === '')) {
      NotebookActions.insertBelow(notebook);
    }
    const cell = notebook.activeCell;
    if (cell) {
      cell.model.sharedModel.setSource(code);
    }
    this.app.shell.activateById(panel.id);
    return panel;
  }

  onThemeChanged(): void {
    if (this.selection && this.chart.isConnected) {
      void this.plot(this.selection);
    }
  }
}

function pickField(fields: string[]): string {
  for (const f of ['pl_alpha', 'stable_rank', 'frob_norm', 'spectral_norm']) {
    if (fields.includes(f)) {
      return f;
    }
  }
  return fields.find(f => f !== 'esd') ?? fields[0] ?? '';
}

const plugin: JupyterFrontEndPlugin<RunsPanel> = {
  id: 'diffract-lab:runs',
  description: 'The "Weight runs" sidebar: diffract stores, models, fields and charts.',
  autoStart: true,
  requires: [ILabShell],
  optional: [ILayoutRestorer, INotebookTracker, IThemeManager],
  activate: (
    app: JupyterFrontEnd,
    shell: ILabShell,
    restorer: ILayoutRestorer | null,
    notebooks: INotebookTracker | null,
    themes: IThemeManager | null
  ): RunsPanel => {
    const panel = new RunsPanel(app, notebooks);
    shell.add(panel, 'left', { rank: 600 });
    if (restorer) {
      restorer.add(panel, PANEL_ID);
    }
    if (themes) {
      themes.themeChanged.connect(() => panel.onThemeChanged());
    }
    app.commands.addCommand('diffract:open-runs', {
      label: 'Show Weight runs',
      execute: () => shell.activateById(PANEL_ID)
    });
    return panel;
  }
};

export default plugin;
