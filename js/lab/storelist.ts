/** The store list of the sidebar: stores, their models (a table) and sampling manifests. */
import { fmtShortTime, fmtTime } from '../shared/format';
import type { ModelEntry, StoreEntry, StoreReply } from '../shared/wire';
import { modelBadges } from './diagnosis';
import { h } from './dom';
import type { RunsModel } from './model';
import { changedOf, nextSort, SORT_KEYS, tableRows } from './modeltable';
import type { RunRow, SortKey, SortState } from './modeltable';

const HEADERS: Record<SortKey, { label: string; title: string }> = {
  model: { label: 'model', title: 'model id (numbers in ids sort as numbers)' },
  slices: { label: 'slices', title: 'weight slices stored' },
  fields: { label: 'fields', title: 'fields computed' },
  changed: { label: 'changed', title: 'when its fields last changed' }
};

const EMPTY_HTML =
  '<p><b>No diffract stores under this folder yet.</b></p>' +
  '<p>Create one from a notebook:</p>' +
  '<pre>from diffract import Session\nsession = Session()   # ./.diffract\nsession.models.add(model, "my-model")\nsession.compute.apply("pl_alpha")</pre>' +
  '<p>or from a terminal: <code>diffract analyze</code>. Stores appear here by themselves.</p>';

/** `el` holding `name` with a `<wbr>` after each `/ . _ -` and `:`, so that a long model id or
 * path wraps at its parts rather than mid-word (a `<wbr>` is not copied with the text). */
export function breakable<E extends HTMLElement>(el: E, name: string): E {
  const parts = name.split(/(?<=[/._:-])/);
  parts.forEach((p, i) => {
    el.append(p);
    if (i < parts.length - 1) {
      el.append(document.createElement('wbr'));
    }
  });
  return el;
}

/** "1 model", "3 models" */
export function plural(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? '' : 's'}`;
}

/**
 * A store row's second line: its models once opened (the store list knows only its write
 * batches, which say nothing to a user: they go in the tooltip) and when it last changed.
 */
export function storeMeta(s: StoreEntry, d: StoreReply | undefined | null): string {
  return `${d ? plural(d.models.length, 'model') : 'click to list its models'} · ${fmtTime(s.updated)}`;
}

/** A store row's tooltip: when it changed and how many write batches (segments) it holds. */
export function storeTitle(s: StoreEntry): string {
  const n = s.segments;
  return `updated ${fmtTime(s.updated)}; ${n} write batch${n === 1 ? '' : 'es'} on disk (segments: one per write)`;
}

/** A model id or run name on one line, cut with an ellipsis; the whole id in its tooltip. */
export function idLabel(text: string): HTMLSpanElement {
  const span = h('span', 'diffract-ellipsis diffract-id-text', text);
  span.title = text;
  return span;
}

export class StoreListView {
  readonly node = h('div', 'diffract-stores');
  /** The search box's text: stores, models and fields containing it (case-insensitive). */
  query = '';
  /** The model tables' sort (null: the server's order, tracked checkpoints by step). */
  sort: SortState | null = null;
  /** Tracked runs shown open, as `store\nrun`. */
  private readonly openRuns = new Set<string>();
  /** Tracked runs closed by a click although they hold the selected model. */
  private readonly closedRuns = new Set<string>();

  /**
   * @param onShowRun a run row's "across training" button: show that run across its steps
   *   (default: select its newest checkpoint, whose chart comes with the run's).
   */
  constructor(
    private readonly model: RunsModel,
    private readonly onShowRun: (store: string, run: string) => void = (store, run) => void model.selectRun(store, run)
  ) {}

  /** Open or close a tracked run's checkpoints in a store's table (`open`: as it is shown). */
  toggleRun(store: string, run: string, open = this.openRuns.has(`${store}\n${run}`)): void {
    const key = `${store}\n${run}`;
    if (open) {
      this.openRuns.delete(key);
      this.closedRuns.add(key); // closed even while it holds the selected model
    } else {
      this.openRuns.add(key);
      this.closedRuns.delete(key);
    }
    this.render();
  }

  render(): void {
    this.node.replaceChildren();
    const stores = this.model.stores;
    if (!stores.length) {
      const empty = h('div', 'diffract-empty');
      empty.innerHTML = EMPTY_HTML;
      this.node.append(empty);
      return;
    }
    let shown = 0;
    for (const s of stores) {
      const item = this.storeItem(s);
      if (item) {
        this.node.append(item);
        shown++;
      }
    }
    if (!shown) {
      this.node.append(h('div', 'diffract-empty', `Nothing matches "${this.query}".`));
    }
  }

  private matches(text: string): boolean {
    const q = this.query.trim().toLowerCase();
    return !q || text.toLowerCase().includes(q);
  }

  /** One store (null when the search hides it). */
  private storeItem(s: StoreEntry): HTMLElement | null {
    const d = this.model.detail(s.path);
    const models = d ? d.models.filter(m => this.matches(`${s.path} ${m.model_id} ${m.track?.run ?? ''} ${m.fields.join(' ')}`)) : [];
    if (!this.matches(s.path || s.name) && !models.length) {
      return null;
    }
    const item = h('div', 'diffract-store');
    item.dataset.path = s.path;
    const row = h('div', 'diffract-store-row');
    const open = this.model.isExpanded(s.path);
    row.append(h('span', 'diffract-caret', open ? '▾' : '▸'), breakable(h('span', 'diffract-store-name diffract-wrap'), s.path || '(server root)'));
    row.append(h('span', 'diffract-store-meta diffract-muted', storeMeta(s, d)));
    row.title = storeTitle(s);
    row.addEventListener('click', () => void this.model.toggle(s.path));
    item.append(row);
    if (open && d) {
      this.appendStoreDetail(item, s, d, models);
    }
    return item;
  }

  private appendStoreDetail(item: HTMLElement, s: StoreEntry, d: StoreReply, matching: ModelEntry[]): void {
    if (!d.models.length) {
      item.append(h('div', 'diffract-empty diffract-indent', 'No models in this store yet: session.models.add(model, "id")'));
    }
    // models matching the search; all of them when only the store's path matches
    const rows = matching.length ? matching : this.matches(s.path) ? d.models : [];
    item.append(this.modelTable(s.path, rows));
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

  private modelTable(store: string, models: ModelEntry[]): HTMLTableElement {
    const table = h('table', 'diffract-models');
    const head = h('tr');
    for (const key of SORT_KEYS) {
      const on = this.sort?.key === key;
      const th = h('th', 'diffract-sortable' + (on ? ' diffract-sorted' : ''), HEADERS[key].label + (on ? (this.sort!.desc ? ' ▾' : ' ▴') : ''));
      th.dataset.sort = key;
      th.title = `${HEADERS[key].title}; click to sort`;
      th.setAttribute('aria-sort', on ? (this.sort!.desc ? 'descending' : 'ascending') : 'none');
      th.addEventListener('click', () => {
        this.sort = nextSort(this.sort, key);
        this.render();
      });
      head.append(th);
    }
    table.append(head);
    const sel = this.model.selection;
    const open = new Set<string>();
    for (const m of models) {
      // a run is open while searching, and when asked or when it holds the selected model,
      // unless a click closed it
      const run = m.track?.run;
      if (!run) {
        continue;
      }
      const key = `${store}\n${run}`;
      const asked = this.openRuns.has(key) || (sel?.store === store && sel.model === m.model_id);
      if (this.query.trim() || (asked && !this.closedRuns.has(key))) {
        open.add(run);
      }
    }
    for (const row of tableRows(models, this.sort, open)) {
      table.append(row.kind === 'run' ? this.runRow(store, row) : this.modelRow(store, row.entry, row.run !== null));
    }
    return table;
  }

  private runRow(store: string, run: RunRow): HTMLTableRowElement {
    const tr = h('tr', 'diffract-run');
    tr.dataset.run = run.run;
    const name = h('td', 'diffract-model-id');
    name.append(h('span', 'diffract-caret', run.open ? '▾' : '▸'), idLabel(run.run));
    const steps = run.first === run.last ? `step ${run.first}` : `steps ${run.first}–${run.last}`;
    // under the name, each part whole: "steps 9–100" and "(3 checkpoints)" wrap between, never inside
    const meta = h('span', 'diffract-run-meta diffract-muted');
    meta.append(h('span', 'diffract-steps', steps), ' ', h('span', 'diffract-steps', `(${plural(run.checkpoints.length, 'checkpoint')})`), ' ');
    // its own button: the row's click keeps its one meaning (show or hide the checkpoints)
    const show = h('button', 'diffract-run-evolution', 'across training');
    show.title = `Select the newest checkpoint (step ${run.last}) and show the chosen field across the run's steps under its chart`;
    show.addEventListener('click', e => {
      e.stopPropagation();
      this.openRuns.add(`${store}\n${run.run}`);
      this.closedRuns.delete(`${store}\n${run.run}`);
      this.onShowRun(store, run.run);
    });
    meta.append(show);
    name.append(meta);
    const newest = Math.max(...run.checkpoints.map(changedOf));
    tr.append(
      name,
      h('td', 'diffract-num', String(run.checkpoints.reduce((n, m) => n + m.slices, 0))),
      h('td', 'diffract-num', String(Math.max(...run.checkpoints.map(m => m.fields.length)))),
      h('td', 'diffract-muted diffract-time', fmtShortTime(newest))
    );
    tr.title = `tracked run ${run.run}: ${plural(run.checkpoints.length, 'checkpoint')}, ${steps}; click to ${run.open ? 'hide' : 'show'} them`;
    tr.addEventListener('click', () => this.toggleRun(store, run.run, run.open));
    return tr;
  }

  private modelRow(store: string, m: ModelEntry, inRun = false): HTMLTableRowElement {
    const tr = h('tr', 'diffract-model' + (inRun ? ' diffract-checkpoint' : ''));
    tr.dataset.model = m.model_id;
    const sel = this.model.selection;
    if (sel && sel.store === store && sel.model === m.model_id) {
      tr.classList.add('diffract-selected');
    }
    const id = h('td', 'diffract-model-id');
    const label = idLabel(inRun && m.track ? `step ${m.track.step}` : m.model_id);
    label.title = m.model_id;
    id.append(label);
    const badges = modelBadges(this.model.diagnosis(store, m.model_id));
    if (badges) {
      id.append(badges);
    }
    const changed = h('td', 'diffract-muted diffract-time', fmtShortTime(changedOf(m)));
    changed.title = `fields last changed ${fmtTime(changedOf(m))} (at the latest); added ${fmtTime(m.added)}`;
    tr.append(id, h('td', 'diffract-num', String(m.slices)), h('td', 'diffract-num', String(m.fields.length)), changed);
    tr.title = (inRun ? `${m.model_id}: ` : '') + (m.fields.join(', ') || 'no fields computed yet');
    tr.addEventListener('click', () => void this.model.select(store, m.model_id));
    return tr;
  }
}
