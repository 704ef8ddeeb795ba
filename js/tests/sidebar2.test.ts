/**
 * The sidebar's model table (sorting, a tracked run's checkpoints grouped by step), the
 * "changed" column, and a clicked point's spectrum (the requests, the route's figure, the view).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { setupDom } from './mock';
setupDom();

import { DetailView } from '../lab/detail';
import { pickedPoint, sidebarLayout } from '../lab/chart';
import { RunsModel } from '../lab/model';
import { changedOf, naturalCompare, nextSort, tableRows } from '../lab/modeltable';
import type { ModelRow, RunRow } from '../lab/modeltable';
import { StoreListView } from '../lab/storelist';
import { fmtShortTime } from '../shared/format';
import type { EsdReply, FieldPoint, FigureReply, ModelEntry, StoreEntry, StoreReply } from '../shared/wire';

function entry(id: string, extra: Partial<ModelEntry> = {}): ModelEntry {
  return { model_id: id, slices: 8, fields: ['frob_norm'], framework: 'numpy', added: 1700000000, changed: 1700000000, track: null, ...extra };
}

function checkpoint(run: string, step: number, extra: Partial<ModelEntry> = {}): ModelEntry {
  return entry(`${run}-${String(step).padStart(6, '0')}`, { track: { run, step }, ...extra });
}

const ids = (rows: ReturnType<typeof tableRows>): string[] => rows.map(r => (r.kind === 'run' ? `run:${r.run}` : (r as ModelRow).entry.model_id));

test('natural order: numbers in ids compare as numbers', () => {
  assert.deepEqual(['ckpt-100', 'ckpt-9', 'ckpt-10'].sort(naturalCompare), ['ckpt-9', 'ckpt-10', 'ckpt-100']);
  assert.ok(naturalCompare('a', 'b') < 0 && naturalCompare('b', 'a') > 0);
});

test('a tracked run is one row with its step range; open, its checkpoints follow by step (9 < 10 < 100)', () => {
  // the server's order mixed up on purpose: the table orders the checkpoints itself
  const models = [checkpoint('r', 100), entry('plain'), checkpoint('r', 9), checkpoint('r', 10)];
  const closed = tableRows(models, null, new Set());
  assert.deepEqual(ids(closed), ['run:r', 'plain']);
  const run = closed[0] as RunRow;
  assert.equal(run.first, 9);
  assert.equal(run.last, 100);
  assert.equal(run.checkpoints.length, 3);
  const open = tableRows(models, null, new Set(['r']));
  assert.deepEqual(ids(open), ['run:r', 'r-000009', 'r-000010', 'r-000100', 'plain']);
  assert.deepEqual(
    open.filter((r): r is ModelRow => r.kind === 'model').map(r => r.run),
    ['r', 'r', 'r', null]
  );
});

test('sorting: each column ascending then descending then off; runs sort by their newest change', () => {
  const models = [
    entry('b-10', { slices: 3, fields: ['a', 'b'], changed: 30 }),
    entry('b-9', { slices: 5, fields: ['a'], changed: 10 }),
    checkpoint('a', 1, { slices: 1, changed: 20 }),
    checkpoint('a', 2, { slices: 1, changed: 40 })
  ];
  const none = new Set<string>();
  assert.deepEqual(ids(tableRows(models, { key: 'model', desc: false }, none)), ['run:a', 'b-9', 'b-10']);
  assert.deepEqual(ids(tableRows(models, { key: 'model', desc: true }, none)), ['b-10', 'b-9', 'run:a']);
  assert.deepEqual(ids(tableRows(models, { key: 'slices', desc: false }, none)), ['run:a', 'b-10', 'b-9']);
  assert.deepEqual(ids(tableRows(models, { key: 'fields', desc: true }, none)), ['b-10', 'run:a', 'b-9']);
  assert.deepEqual(ids(tableRows(models, { key: 'changed', desc: true }, none)), ['run:a', 'b-10', 'b-9']);
  // checkpoints stay in step order whatever the sort
  assert.deepEqual(ids(tableRows(models, { key: 'changed', desc: false }, new Set(['a']))), ['b-9', 'b-10', 'run:a', 'a-000001', 'a-000002']);
  let s = nextSort(null, 'model');
  assert.deepEqual(s, { key: 'model', desc: false });
  s = nextSort(s, 'model');
  assert.deepEqual(s, { key: 'model', desc: true });
  assert.equal(nextSort(s, 'model'), null);
  assert.deepEqual(nextSort(null, 'changed'), { key: 'changed', desc: true }); // newest first
  assert.deepEqual(nextSort({ key: 'changed', desc: true }, 'changed'), { key: 'changed', desc: false });
  assert.equal(nextSort({ key: 'changed', desc: false }, 'changed'), null);
  assert.equal(changedOf(entry('x', { changed: null, added: 5 })), 5);
});

test('a time cell: the time of day for today, else the date', () => {
  const now = new Date(2026, 11, 1, 15, 0, 0);
  const today = new Date(2026, 11, 1, 13, 25, 55).getTime() / 1000;
  assert.equal(fmtShortTime(today, now), new Date(today * 1000).toLocaleTimeString());
  assert.equal(fmtShortTime(today - 86400, now), new Date((today - 86400) * 1000).toLocaleDateString());
  assert.equal(fmtShortTime(null, now), '–');
});

test('a clicked point of the route\'s layers figure is found by the uid its customdata carries', () => {
  const points: FieldPoint[] = [0, 1, 2].map(i => ({ name: `layers.${i}.weight`, uid: `u${i}`, type: 'dense', index: i, value: i }));
  // the figure route's layers points: [model, name, type, value, uid]
  assert.equal(pickedPoint(points, ['m', 'layers.1.weight', 'dense', '1', 'u1'])?.uid, 'u1');
  assert.equal(pickedPoint(points, ['m', 'layers.2.weight', 'dense', '2', 'gone'])?.uid, 'u2'); // by name then
  assert.equal(pickedPoint(points, 'layers.0.weight')?.uid, 'u0');
  assert.equal(pickedPoint(points, ['m', 'x', 'dense', '1', 'nope']), undefined);
  assert.equal(pickedPoint(points, undefined), undefined);
});

test('the sidebar renders the route\'s layout as it is, at its own size and colours', () => {
  const layout = { title: { text: 'ESD of m:w (α=2.5)' }, xaxis: { type: 'log', tickvals: [1, 10] }, yaxis2: { domain: [0, 0.3] }, shapes: [1] };
  const out = sidebarLayout(layout, 220) as any;
  assert.equal(out.height, 220);
  assert.equal(out.title.text, 'ESD of m:w (α=2.5)');
  assert.deepEqual([out.xaxis.type, out.xaxis.tickvals], ['log', [1, 10]]); // the figure's own axes
  assert.deepEqual(out.yaxis2.domain, [0, 0.3]);
  assert.deepEqual(out.shapes, [1]);
  assert.equal(out.showlegend, false);
});

/** A server with one store holding a tracked run and a plain model, and one slice's spectrum. */
function fakeServer(models: ModelEntry[]) {
  const store: StoreEntry = { path: 's', name: '.diffract', segments: 1, updated: 1700000000, stamp: 'x' };
  const summary: StoreReply = { ...store, models, fields: ['frob_norm'], levels: {}, manifests: [] };
  const calls: string[] = [];
  const request = async <T>(endpoint: string, query: Record<string, string> = {}): Promise<T> => {
    calls.push(`${endpoint}${query.uid ? ':' + query.uid : ''}`);
    await Promise.resolve();
    if (endpoint === 'version') {
      return { version: '0.1.0', api: 1, package: 'diffract-lab' } as T;
    }
    if (endpoint === 'stores') {
      return { root: '', stores: [store] } as T;
    }
    if (endpoint === 'store') {
      return structuredClone(summary) as T;
    }
    if (endpoint === 'esd') {
      if (query.uid === 'missing') {
        throw new Error('no slice');
      }
      const reply: EsdReply = { ...store, uid: query.uid, name: 'layers.1.weight', model_id: 'plain', field: 'esd', values: [0.1, 1, 2], xmin: 1, alpha: 2.5 };
      return reply as T;
    }
    if (endpoint === 'figure') {
      const reply: FigureReply = { kind: query.kind, path: query.store, figure: { data: [{ type: 'scatter', meta: query.kind, y: [1] }], layout: { title: { text: query.uid } } } };
      return reply as T;
    }
    return { ...store, field: query.field, models: [] } as T;
  };
  return { request, calls };
}

test('the list groups a run, opens it on click, sorts on a header click and shows when fields changed', async () => {
  const { request } = fakeServer([checkpoint('train', 10), checkpoint('train', 9), checkpoint('train', 100), entry('plain', { changed: 1700003600 })]);
  const model = new RunsModel({ request, version: '0.1.0' });
  const list = new StoreListView(model);
  document.body.replaceChildren(list.node);
  model.changed.connect(() => list.render());
  await model.refresh(true);
  await model.toggle('s');
  const runRow = list.node.querySelector<HTMLElement>('.diffract-run[data-run="train"]')!;
  assert.match(runRow.textContent!, /steps 9–100 \(3 checkpoints\)/);
  assert.equal(list.node.querySelectorAll('.diffract-checkpoint').length, 0);
  runRow.click();
  const cps = [...list.node.querySelectorAll<HTMLElement>('.diffract-checkpoint')];
  assert.deepEqual(
    cps.map(r => r.dataset.model),
    ['train-000009', 'train-000010', 'train-000100']
  );
  assert.deepEqual(
    cps.map(r => r.querySelector('.diffract-model-id')!.textContent),
    ['step 9', 'step 10', 'step 100']
  );
  const plain = list.node.querySelector<HTMLElement>('.diffract-model[data-model="plain"] .diffract-time')!;
  assert.equal(plain.textContent, new Date(1700003600 * 1000).toLocaleDateString()); // not today: the date
  assert.match(plain.title, new RegExp(new Date(1700003600 * 1000).toLocaleString().replace(/[.*+?^${}()|[\]\\]/g, '\\$&')));
  assert.match(plain.title, /fields last changed .* \(at the latest\); added /);
  const header = () => list.node.querySelector<HTMLElement>('th[data-sort="changed"]')!;
  header().click();
  assert.equal(header().getAttribute('aria-sort'), 'descending');
  assert.equal(list.node.querySelector<HTMLElement>('tr.diffract-run, tr.diffract-model')!.dataset.model, 'plain'); // newest first
  list.node.querySelector<HTMLElement>('.diffract-run')!.click(); // closes it again
  assert.equal(list.node.querySelectorAll('.diffract-checkpoint').length, 0);
  model.dispose();
});

test('clicking a point asks for its spectrum; another model closes it; a failure says what', async () => {
  const { request, calls } = fakeServer([entry('plain'), entry('other')]);
  const model = new RunsModel({ request, version: '0.1.0' });
  await model.refresh(true);
  await model.toggle('s');
  await model.select('s', 'plain');
  const seen: (string | null)[] = [];
  model.esdChanged.connect((_, e) => void seen.push(e ? e.name : null));
  await model.openEsd('u1', 'layers.1.weight');
  assert.ok(calls.includes('esd:u1'));
  assert.deepEqual(model.esd?.values, [0.1, 1, 2]);
  // the chart is the figure route's esd figure of that slice, as Python built it
  assert.ok(calls.includes('figure:u1'));
  assert.deepEqual(model.esd?.figure, { data: [{ type: 'scatter', meta: 'esd', y: [1] }], layout: { title: { text: 'u1' } } });
  assert.equal(model.esd?.xmin, 1);
  const detail = new DetailView(model, () => undefined);
  document.body.replaceChildren(detail.node);
  detail.render();
  const box = detail.node.querySelector<HTMLElement>('.diffract-esd-box')!;
  assert.ok(box);
  await model.select('s', 'other');
  assert.equal(model.esd, null);
  assert.deepEqual(seen, ['layers.1.weight', null]);
  await model.openEsd('missing', 'layers.9.weight');
  const failed = model.esd as { values: unknown; figure: unknown; error: string | null } | null;
  assert.equal(failed?.values, null);
  assert.equal(failed?.figure, null);
  assert.match(failed!.error!, /Cannot read the spectrum of layers.9.weight: no slice/);
  await detail.plotEsd(); // a message: no Plotly needed
  assert.match(detail.node.querySelector('.diffract-esd')!.textContent!, /Cannot read the spectrum/);
  model.dispose();
});
