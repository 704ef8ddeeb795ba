/**
 * The sidebar's model: what the "Weight runs" panel shows, read from the diffract server
 * extension. It polls the store list, caches store summaries (by stamp), field series (by
 * store stamp, model and field) and a tracked run's across-training figure (by store stamp,
 * run and field), and tells the views what changed through Lumino signals.
 * No DOM here: the views (storelist.ts, detail.ts, chart.ts) render from it.
 */
import type { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

import type { EsdReply, FieldReply, FigureReply, FigureSpec, ModelEntry, StoreEntry, StoreReply, StoresReply, VersionReply } from '../shared/wire';
import type { RequestFn } from './api';
import { LruCache } from './cache';
import { buildDiagnosis, diagRules } from './diagnosis';
import type { Diagnosis } from './diagnosis';
import { fieldGroup } from './fieldgroups';
import { errorMessage, evolutionBlocker, messageOf, mismatchMessage } from './messages';
import { runCheckpoints } from './modeltable';
import type { EsdState, EvolutionState, FieldState, RunsModelOptions, Selection, VersionState } from './types';

export type { EsdState, EvolutionState, FieldState, RunsModelOptions, Selection, VersionState } from './types';

/** How often the store list is re-read while the panel is visible. */
export const POLL_MS = 3000;
/** Field series kept in memory (least recently used dropped first). */
export const FIELD_CACHE_SIZE = 64;
/** Across-training figures kept in memory (by store stamp, run and field). */
export const EVOLUTION_CACHE_SIZE = 16;
/** Fields a freshly selected model shows first, in this order of preference. */
const PREFERRED_FIELDS = ['pl_alpha', 'stable_rank', 'frob_norm', 'spectral_norm'];

/** The field a model shows when it is selected. */
export function pickField(fields: readonly string[]): string {
  for (const f of PREFERRED_FIELDS) {
    if (fields.includes(f)) {
      return f;
    }
  }
  return fields.find(f => f !== 'esd') ?? fields[0] ?? '';
}

export class RunsModel implements IDisposable {
  private readonly _request: RequestFn;
  private readonly _isActive: () => boolean;
  private readonly _pollMs: number;
  private readonly _client: string;
  private _stores: StoreEntry[] = [];
  private readonly _details = new Map<string, StoreReply>();
  /** Per store, each model's diagnosis (read with the summary when it holds `diag_*` fields). */
  private readonly _diag = new Map<string, Map<string, Diagnosis>>();
  private readonly _expanded = new Set<string>();
  private readonly _fieldCache = new LruCache<{ reply: FieldReply; figure: FigureSpec | null }>(FIELD_CACHE_SIZE);
  /** the request itself, so that checkpoints of one run clicked in turn share one answer */
  private readonly _evolutionCache = new LruCache<Promise<FigureSpec | null>>(EVOLUTION_CACHE_SIZE);
  private _selection: Selection | null = null;
  private _field: FieldState | null = null;
  private _esd: EsdState | null = null;
  private _evolution: EvolutionState | null = null;
  private _error: string | null = null;
  private _version: VersionState | null = null;
  private _timer: ReturnType<typeof setInterval> | undefined;
  private _inflight: Promise<void> | null = null;
  private _queued: Promise<void> | null = null;
  private _disposed = false;
  private readonly _changed = new Signal<this, void>(this);
  private readonly _selectionChanged = new Signal<this, Selection | null>(this);
  private readonly _fieldChanged = new Signal<this, FieldState | null>(this);
  private readonly _errorChanged = new Signal<this, string | null>(this);
  private readonly _versionChanged = new Signal<this, VersionState>(this);
  private readonly _esdChanged = new Signal<this, EsdState | null>(this);
  private readonly _evolutionChanged = new Signal<this, EvolutionState | null>(this);

  constructor(options: RunsModelOptions) {
    this._request = options.request;
    this._client = options.version;
    this._isActive = options.isActive ?? (() => true);
    this._pollMs = options.pollMs ?? POLL_MS;
  }

  /** The store list, an expanded store's summary, or which stores are expanded changed. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }
  get selectionChanged(): ISignal<this, Selection | null> {
    return this._selectionChanged;
  }
  /** The selected field's data arrived (from the server or the cache), or was cleared. */
  get fieldChanged(): ISignal<this, FieldState | null> {
    return this._fieldChanged;
  }
  /** A request failed (the message says what to do), or the next one succeeded (null). */
  get errorChanged(): ISignal<this, string | null> {
    return this._errorChanged;
  }
  get versionChanged(): ISignal<this, VersionState> {
    return this._versionChanged;
  }
  /** A slice's spectrum arrived (or failed), or was closed (null). */
  get esdChanged(): ISignal<this, EsdState | null> {
    return this._esdChanged;
  }
  get esd(): EsdState | null {
    return this._esd;
  }
  /** The selected checkpoint's run across training arrived (or why not), or was cleared (null:
   * the selected model is not a tracked checkpoint). */
  get evolutionChanged(): ISignal<this, EvolutionState | null> {
    return this._evolutionChanged;
  }
  get evolution(): EvolutionState | null {
    return this._evolution;
  }

  get stores(): readonly StoreEntry[] {
    return this._stores;
  }
  get selection(): Selection | null {
    return this._selection;
  }
  get field(): FieldState | null {
    return this._field;
  }
  get error(): string | null {
    return this._error;
  }
  get version(): VersionState | null {
    return this._version;
  }
  get polling(): boolean {
    return this._timer !== undefined;
  }
  get isDisposed(): boolean {
    return this._disposed;
  }

  /** The summary of a store, once it was expanded (and loaded). */
  detail(path: string): StoreReply | undefined {
    return this._details.get(path);
  }
  isExpanded(path: string): boolean {
    return this._expanded.has(path);
  }
  /** A model's diagnosis badges' data (undefined: its store holds no `diag_*` fields). */
  diagnosis(store: string, model: string): Diagnosis | undefined {
    return this._diag.get(store)?.get(model);
  }
  /** The selected model's entry in its store's summary. */
  selectedModel(): ModelEntry | undefined {
    const sel = this._selection;
    return sel ? this._details.get(sel.store)?.models.find(m => m.model_id === sel.model) : undefined;
  }

  /** Check the server's version, read the stores, then poll every `pollMs` while active. */
  start(): void {
    if (this._timer !== undefined || this._disposed) {
      return;
    }
    void this.checkVersion();
    void this.refresh(true);
    this._timer = setInterval(() => {
      if (this._isActive()) {
        void this.refresh(false);
      }
    }, this._pollMs);
  }

  stop(): void {
    clearInterval(this._timer);
    this._timer = undefined;
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this.stop();
    Signal.clearData(this);
  }

  async checkVersion(): Promise<void> {
    try {
      const reply = await this._request<VersionReply>('version');
      this._version = { client: this._client, server: reply.version, mismatch: mismatchMessage(this._client, reply.version) };
      this._versionChanged.emit(this._version);
    } catch (e) {
      this.setError(e);
    }
  }

  /**
   * Re-read the store list and re-read the expanded stores whose stamp changed (all of them when
   * `force`). One refresh runs at a time: a second call shares it, a forced one runs after it.
   */
  refresh(force = false): Promise<void> {
    if (this._inflight) {
      if (!force) {
        return this._inflight;
      }
      this._queued ??= this._inflight.then(() => {
        this._queued = null;
        return this.refresh(true);
      });
      return this._queued;
    }
    const run = this._refresh(force).finally(() => {
      this._inflight = null;
    });
    this._inflight = run;
    return run;
  }

  /** Expand a store (reading its summary) or collapse it. */
  async toggle(path: string): Promise<void> {
    if (this._expanded.delete(path)) {
      this._changed.emit();
      return;
    }
    this._expanded.add(path);
    try {
      await this._loadStore(path);
      this.setError(null);
    } catch (e) {
      this.setError(e);
    }
    this._changed.emit();
  }

  /** Select a model of an expanded store; keeps the field shown if the model has it. */
  async select(store: string, modelId: string): Promise<void> {
    const entry = this._details.get(store)?.models.find(m => m.model_id === modelId);
    if (!entry) {
      return;
    }
    const prev = this._selection;
    const field = prev && prev.store === store && entry.fields.includes(prev.field) ? prev.field : pickField(entry.fields);
    this._setSelection({ store, model: modelId, field });
    await this._loadSelected();
  }

  /** Select the newest checkpoint of a tracked run: its chart, and the run across training. */
  async selectRun(store: string, run: string): Promise<void> {
    const checkpoints = runCheckpoints(this._details.get(store)?.models ?? [], run);
    if (checkpoints.length) {
      await this.select(store, checkpoints[checkpoints.length - 1].model_id);
    }
  }

  async selectField(field: string): Promise<void> {
    const sel = this._selection;
    if (!sel || sel.field === field) {
      return;
    }
    this._setSelection({ ...sel, field });
    await this._loadSelected();
  }

  /** Open the spectrum of the selected model's slice `uid` (a point clicked on the chart). */
  async openEsd(uid: string, name: string): Promise<void> {
    const sel = this._selection;
    if (!sel) {
      return;
    }
    const base = { store: sel.store, model: sel.model, uid, name };
    let state: EsdState;
    try {
      const reply = await this._request<EsdReply>('esd', { path: sel.store, uid });
      const figure = reply.values?.length ? await this._figure({ kind: 'esd', store: sel.store, uid }) : null;
      state = { ...base, name: reply.name, values: reply.values, xmin: reply.xmin, alpha: reply.alpha, figure, error: null };
    } catch (e) {
      state = { ...base, values: null, xmin: null, alpha: null, figure: null, error: `Cannot read the spectrum of ${name}: ${messageOf(e)}` };
    }
    if (this._disposed || this._selection?.store !== sel.store || this._selection.model !== sel.model) {
      return; // another model was selected meanwhile
    }
    this._esd = state;
    this._esdChanged.emit(state);
  }

  /** A figure of the figure route (drawn in Python: the sidebar only renders it). */
  private async _figure(query: Record<string, string>): Promise<FigureSpec | null> {
    const reply = await this._request<FigureReply>('figure', query);
    return reply?.figure ?? null;
  }

  closeEsd(): void {
    if (this._esd) {
      this._esd = null;
      this._esdChanged.emit(null);
    }
  }

  private setError(e: unknown): void {
    const message = e === null ? null : errorMessage(e);
    if (message !== this._error) {
      this._error = message;
      this._errorChanged.emit(message);
    }
  }

  private _setSelection(sel: Selection | null): void {
    if (this._esd && (!sel || sel.store !== this._esd.store || sel.model !== this._esd.model)) {
      this.closeEsd(); // a spectrum belongs to its model
    }
    this._selection = sel;
    this._selectionChanged.emit(sel);
  }

  private async _refresh(force: boolean): Promise<void> {
    let reply: StoresReply;
    try {
      reply = await this._request<StoresReply>('stores');
    } catch (e) {
      this.setError(e);
      return;
    }
    if (this._disposed) {
      return;
    }
    const old = new Map(this._stores.map(s => [s.path, s.stamp]));
    const listChanged = reply.stores.length !== this._stores.length || reply.stores.some(s => old.get(s.path) !== s.stamp);
    this._stores = reply.stores;
    const present = new Set(reply.stores.map(s => s.path));
    for (const path of [...this._details.keys()]) {
      if (!present.has(path)) {
        this._details.delete(path);
        this._diag.delete(path);
      }
    }
    const stale = reply.stores.filter(s => this._expanded.has(s.path) && (force || this._details.get(s.path)?.stamp !== s.stamp));
    const loads = await Promise.allSettled(stale.map(s => this._loadStore(s.path)));
    const failed = loads.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    this.setError(failed ? failed.reason : null);
    if (force || listChanged || stale.length) {
      this._changed.emit();
    }
    const sel = this._selection;
    if (sel && (!present.has(sel.store) || stale.some(s => s.path === sel.store))) {
      if (!this.selectedModel()) {
        this._setSelection(null);
      }
      await this._loadSelected();
    }
  }

  private async _loadStore(path: string): Promise<void> {
    const reply = await this._request<StoreReply>('store', { path });
    // the badges are extra: a failed read of them leaves the table without badges, not the store unread
    const diag = await this._loadDiagnosis(path, reply).catch(() => null);
    this._details.set(path, reply);
    if (diag) {
      this._diag.set(path, diag);
    } else {
      this._diag.delete(path);
    }
  }

  /** Each rule's flags and reasons, all models at once (the field route): two reads per rule. */
  private async _loadDiagnosis(path: string, reply: StoreReply): Promise<Map<string, Diagnosis> | null> {
    const rules = diagRules(reply.fields ?? []);
    if (!rules.length) {
      return null;
    }
    const has = new Set(reply.fields);
    const read = (field: string) => this._request<FieldReply>('field', { path, field });
    const replies = await Promise.all(
      rules.map(async rule => ({
        rule,
        flags: await read(`diag_${rule}`),
        reasons: has.has(`diag_${rule}_reason`) ? await read(`diag_${rule}_reason`) : null
      }))
    );
    return buildDiagnosis(replies);
  }

  /** The selected field's chart and, for a tracked checkpoint, its run across training. */
  private async _loadSelected(): Promise<void> {
    await Promise.all([this._loadField(), this._loadEvolution()]);
  }

  /**
   * The selected checkpoint's run across training (the route's `evolution` figure of the
   * selected field), or what stops it (one step so far, the field at fewer than two steps, no
   * number per layer), published unless the selection moved on; cleared for a model that is
   * not a tracked checkpoint. A new store stamp asks again: a run in training gains columns.
   */
  private async _loadEvolution(): Promise<void> {
    const sel = this._selection;
    const entry = this.selectedModel();
    const detail = sel ? this._details.get(sel.store) : undefined;
    if (!sel || !sel.field || !entry?.track || !detail) {
      if (this._evolution) {
        this._evolution = null;
        this._evolutionChanged.emit(null);
      }
      return;
    }
    const { run, step } = entry.track;
    const checkpoints = runCheckpoints(detail.models, run);
    const steps = checkpoints.map(m => m.track!.step);
    const holding = checkpoints.filter(m => m.fields.includes(sel.field)).map(m => m.track!.step);
    const base = { selection: sel, run, step, steps };
    const blocker = evolutionBlocker(sel.field, run, steps, holding, fieldGroup(sel.field) === 'layer');
    let state: EvolutionState;
    if (blocker) {
      state = { ...base, missing: steps.filter(s => !holding.includes(s)), figure: null, message: blocker, failed: false };
    } else {
      const key = [sel.store, detail.stamp, run, sel.field].join('\n');
      let pending = this._evolutionCache.get(key);
      if (!pending) {
        pending = this._figure({ kind: 'evolution', store: sel.store, field: sel.field, run });
        this._evolutionCache.set(key, pending);
      }
      try {
        const figure = await pending;
        const drawn = new Set(figureSteps(figure));
        if (figure && drawn.size) {
          state = { ...base, missing: steps.filter(s => !drawn.has(s)), figure, message: null, failed: false };
        } else {
          const message = `${sel.field} has no number at any step of run ${run} to draw (its stored values are not numbers).`;
          state = { ...base, missing: steps, figure: null, message, failed: false };
        }
      } catch (e) {
        this._evolutionCache.delete(key); // a failure is asked again next time
        state = { ...base, missing: [], figure: null, message: `Cannot draw ${sel.field} across training: ${messageOf(e)}`, failed: true };
      }
    }
    if (this._selection !== sel || this._disposed) {
      return; // a newer selection (or field) won while this one was loading
    }
    this._evolution = state;
    this._evolutionChanged.emit(state);
  }

  /** Fetch (or take from the cache) the selected field and publish it, unless the selection moved on. */
  private async _loadField(): Promise<void> {
    const sel = this._selection;
    if (!sel || !sel.field) {
      if (this._field) {
        this._field = null;
        this._fieldChanged.emit(null);
      }
      return;
    }
    const key = [sel.store, this._details.get(sel.store)?.stamp ?? '', sel.model, sel.field].join('\n');
    let state: FieldState;
    try {
      let cached = this._fieldCache.get(key);
      if (!cached) {
        const reply = await this._request<FieldReply>('field', { path: sel.store, field: sel.field, model: sel.model });
        const entry = reply.models.find(m => m.model_id === sel.model);
        const hasPoints = (entry?.points ?? []).some(p => typeof p.value === 'number');
        const figure = hasPoints ? await this._figure({ kind: 'layers', store: sel.store, field: sel.field, model: sel.model }) : null;
        cached = { reply, figure };
        this._fieldCache.set(key, cached);
      }
      const entry = cached.reply.models.find(m => m.model_id === sel.model);
      const points = (entry?.points ?? []).filter(p => typeof p.value === 'number');
      state = { selection: sel, points, value: entry?.value ?? null, figure: cached.figure, error: null };
    } catch (e) {
      state = { selection: sel, points: [], value: null, figure: null, error: `Cannot read ${sel.field}: ${messageOf(e)}` };
    }
    if (this._selection !== sel || this._disposed) {
      return; // a newer selection (or field) won while this one was loading
    }
    this._field = state;
    this._fieldChanged.emit(state);
  }
}

/**
 * The steps an `evolution` figure has a column for: its heatmap's columns (`x` is the column
 * index) read through the x axis' labels (the steps), as `diffract.viz` draws it.
 */
export function figureSteps(figure: FigureSpec | null): number[] {
  const heat = figure?.data.find(t => t.type === 'heatmap');
  const ticks = (figure?.layout.xaxis as { ticktext?: unknown[] } | undefined)?.ticktext;
  if (!heat || !Array.isArray(heat.x) || !Array.isArray(ticks)) {
    return [];
  }
  return (heat.x as number[]).map(i => Number(ticks[i])).filter(Number.isFinite);
}
