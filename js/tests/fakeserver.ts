/** The diffract server extension in memory, for the sidebar model's tests: stores, their
 * summaries, field series and figures, every call recorded. */
import type { ISignal } from '@lumino/signaling';

import type { RunsModel } from '../lab/model';
import type { FieldReply, FigureSpec, ModelEntry, StoreEntry, StoreReply } from '../shared/wire';

export class HttpError extends Error {
  constructor(
    message: string,
    readonly status: number
  ) {
    super(message);
  }
}

export interface Call {
  endpoint: string;
  query: Record<string, string>;
}

/** The diffract server extension, in memory: stores, their summaries and field series. */
export class FakeServer {
  version = '0.1.0';
  calls: Call[] = [];
  stores: StoreEntry[] = [];
  summaries = new Map<string, StoreReply>();
  /** endpoint -> the error its next calls throw */
  failing = new Map<string, Error>();
  /** endpoint -> a promise its calls wait for before answering */
  gates = new Map<string, Promise<void>>();

  addStore(path: string, models: ModelEntry[], stamp = 's1'): void {
    const entry: StoreEntry = { path, name: '.diffract', segments: 1, updated: 1700000000, stamp };
    this.stores = [...this.stores.filter(s => s.path !== path), entry];
    this.summaries.set(path, { ...entry, models, fields: [], levels: {}, manifests: [] });
  }

  /** The store's files changed: a new stamp (and optionally new models). */
  touch(path: string, stamp: string, models?: ModelEntry[]): void {
    const old = this.summaries.get(path)!;
    this.addStore(path, models ?? old.models, stamp);
  }

  count(endpoint: string, match: Record<string, string> = {}): number {
    return this.calls.filter(c => c.endpoint === endpoint && Object.entries(match).every(([k, v]) => c.query[k] === v)).length;
  }

  request = async <T>(endpoint: string, query: Record<string, string> = {}): Promise<T> => {
    this.calls.push({ endpoint, query });
    const gate = this.gates.get(endpoint);
    if (gate) {
      await gate;
    }
    await Promise.resolve();
    const failure = this.failing.get(endpoint);
    if (failure) {
      throw failure;
    }
    return structuredClone(this.answer(endpoint, query)) as T;
  };

  private answer(endpoint: string, query: Record<string, string>): unknown {
    if (endpoint === 'version') {
      return { version: this.version, api: 1, package: 'diffract-lab' };
    }
    if (endpoint === 'stores') {
      return { root: '', stores: this.stores };
    }
    if (endpoint === 'figure' && query.kind === 'evolution') {
      return { kind: query.kind, path: query.store, figure: this.evolution(query.store, query.run, query.field) };
    }
    if (endpoint === 'figure') {
      // the route's figure, drawn in Python; here one trace naming what was asked
      return { kind: query.kind, path: query.store, figure: { data: [{ type: 'scatter', name: `${query.kind}:${query.field}:${query.model}` }], layout: {} } };
    }
    const summary = this.summaries.get(query.path);
    if (!summary) {
      throw new HttpError(`no store at ${query.path}`, 404);
    }
    if (endpoint === 'store') {
      return summary;
    }
    const reply: FieldReply = {
      ...summary,
      field: query.field,
      models: summary.models.map(m => ({
        model_id: m.model_id,
        // stamp-dependent values, so a re-read after a change is visible in the data
        points: [0, 1, 2].map(i => ({ name: `layers.${i}.weight`, uid: `u${i}`, type: 'dense', index: i, value: i + summary.stamp.length })),
        value: null
      }))
    };
    reply.models[0]?.points.push({ name: 'layers.3.weight', uid: 'u3', type: 'dense', index: 3, value: 'n/a' });
    return reply;
  }

  /**
   * The `evolution` figure as diffract.viz draws it: a heatmap whose columns (`x`: the column
   * index, labelled with the step by the x axis' ticktext) are the run's checkpoints holding
   * the field, in step order; rows are 3 layers; then one line per layer on x2/y2.
   */
  private evolution(store: string, run: string, field: string): FigureSpec {
    const cps = (this.summaries.get(store)?.models ?? [])
      .filter(m => m.track?.run === run && m.fields.includes(field))
      .sort((a, b) => a.track!.step - b.track!.step);
    const layers = ['layers.0.weight', 'layers.1.weight', 'layers.2.weight'];
    const steps = cps.map(m => m.track!.step);
    if (!cps.length) {
      return { data: [], layout: {} };
    }
    return {
      data: [
        {
          type: 'heatmap',
          x: steps.map((_, i) => i),
          y: layers,
          z: layers.map((_, l) => steps.map(s => s / 100 + l)),
          customdata: layers.map(n => cps.map(m => [n, m.model_id, '1', m.track!.step])),
          colorbar: { title: { text: field }, len: 0.55 }
        },
        ...layers.map(n => ({ type: 'scatter', name: n, x: steps, y: steps.map(s => s / 100), xaxis: 'x2', yaxis: 'y2' }))
      ],
      layout: {
        title: { text: `${field} across training<br><sub>run ${run}</sub>` },
        xaxis: { tickvals: steps.map((_, i) => i), ticktext: steps.map(String), title: { text: 'step' } },
        // as diffract.viz labels the rows: short names (short_names) for the whole ones
        yaxis: { type: 'category', domain: [0.45, 1], title: { text: 'layer' }, tickmode: 'array', tickvals: layers, ticktext: ['layers.0', 'layers.1', 'layers.2'] },
        xaxis2: { anchor: 'y2' },
        yaxis2: { anchor: 'x2', domain: [0, 0.33] }
      }
    };
  }
}

export function modelEntry(id: string, fields = ['frob_norm', 'pl_alpha', 'esd']): ModelEntry {
  return { model_id: id, slices: 8, fields, framework: 'numpy', added: 1700000000, changed: 1700000100, track: null };
}

/** Record every emission of a signal. */
export function record<T>(signal: ISignal<RunsModel, T>): T[] {
  const seen: T[] = [];
  signal.connect((_, value) => {
    seen.push(value);
  });
  return seen;
}
