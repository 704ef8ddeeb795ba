/** The rows of a store's model table: sorted by a column, a tracked run's checkpoints grouped
 * under one row with its step range (plain functions: tested in Node). */
import type { ModelEntry } from '../shared/wire';

export type SortKey = 'model' | 'slices' | 'fields' | 'changed';

export interface SortState {
  readonly key: SortKey;
  readonly desc: boolean;
}

export const SORT_KEYS: readonly SortKey[] = ['model', 'slices', 'fields', 'changed'];

/** A tracked run: its checkpoints in step order. */
export interface RunRow {
  readonly kind: 'run';
  readonly run: string;
  readonly first: number;
  readonly last: number;
  readonly checkpoints: ModelEntry[];
  readonly open: boolean;
}

export interface ModelRow {
  readonly kind: 'model';
  readonly entry: ModelEntry;
  /** the run it belongs to (a checkpoint row under its run), else null */
  readonly run: string | null;
}

export type TableRow = RunRow | ModelRow;

const COLLATOR = new Intl.Collator(undefined, { numeric: true, sensitivity: 'base' });

/** Strings with their numbers compared as numbers: `ckpt-9` < `ckpt-10` < `ckpt-100`. */
export function naturalCompare(a: string, b: string): number {
  return COLLATOR.compare(a, b) || (a < b ? -1 : a > b ? 1 : 0);
}

/** When a model's fields last changed (the time the table shows); `added` on older servers. */
export function changedOf(m: ModelEntry): number {
  return m.changed ?? m.added ?? 0;
}

function compareModels(a: ModelEntry, b: ModelEntry, key: SortKey): number {
  switch (key) {
    case 'slices':
      return a.slices - b.slices;
    case 'fields':
      return a.fields.length - b.fields.length;
    case 'changed':
      return changedOf(a) - changedOf(b);
    default:
      return naturalCompare(a.model_id, b.model_id);
  }
}

/** Tracked checkpoints in step order (ids, numbers as numbers, between equal steps). */
export function byStep(a: ModelEntry, b: ModelEntry): number {
  return (a.track?.step ?? 0) - (b.track?.step ?? 0) || naturalCompare(a.model_id, b.model_id);
}

/** The checkpoints of tracked run `run` among `models`, in step order. */
export function runCheckpoints(models: readonly ModelEntry[], run: string): ModelEntry[] {
  return models.filter(m => m.track?.run === run).sort(byStep);
}

/** A run's stand-in for sorting: its name, total slices, most fields, newest change. */
function runKey(run: RunRow): ModelEntry {
  const cps = run.checkpoints;
  return {
    model_id: run.run,
    slices: cps.reduce((n, m) => n + m.slices, 0),
    fields: cps.reduce<string[]>((f, m) => (m.fields.length > f.length ? m.fields : f), []),
    framework: null,
    added: null,
    changed: Math.max(...cps.map(changedOf)),
    track: null
  };
}

/**
 * The table's rows: tracked checkpoints grouped by run (the run row, then, when it is open,
 * its checkpoints by step), runs and plain models sorted by `sort` (null: the server's order,
 * which is step order). A run whose checkpoints are all filtered out is not listed.
 */
export function tableRows(models: readonly ModelEntry[], sort: SortState | null, openRuns: ReadonlySet<string>): TableRow[] {
  const runs = new Map<string, ModelEntry[]>();
  const top: (ModelEntry | RunRow)[] = [];
  for (const m of models) {
    if (!m.track) {
      top.push(m);
      continue;
    }
    let cps = runs.get(m.track.run);
    if (!cps) {
      cps = [];
      runs.set(m.track.run, cps);
      top.push({ kind: 'run', run: m.track.run, first: 0, last: 0, checkpoints: cps, open: openRuns.has(m.track.run) });
    }
    cps.push(m);
  }
  const items = top.map(item => {
    if ('kind' in item) {
      item.checkpoints.sort(byStep);
      return { ...item, first: item.checkpoints[0].track!.step, last: item.checkpoints[item.checkpoints.length - 1].track!.step };
    }
    return item;
  });
  if (sort) {
    const entry = (x: ModelEntry | RunRow): ModelEntry => ('kind' in x ? runKey(x) : x);
    const sign = sort.desc ? -1 : 1;
    items.sort((a, b) => sign * compareModels(entry(a), entry(b), sort.key) || naturalCompare(entry(a).model_id, entry(b).model_id));
  }
  const rows: TableRow[] = [];
  for (const item of items) {
    if ('kind' in item) {
      rows.push(item);
      if (item.open) {
        rows.push(...item.checkpoints.map((entry): ModelRow => ({ kind: 'model', entry, run: item.run })));
      }
    } else {
      rows.push({ kind: 'model', entry: item, run: null });
    }
  }
  return rows;
}

/** The next sort after a click on `key`'s header: ascending, then descending, then off. */
export function nextSort(current: SortState | null, key: SortKey): SortState | null {
  if (!current || current.key !== key) {
    return { key, desc: key === 'changed' }; // newest first is what a time column is sorted for
  }
  if (current.desc === (key === 'changed')) {
    return { key, desc: !current.desc };
  }
  return null;
}
