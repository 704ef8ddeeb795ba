/**
 * The sidebar model (js/lab/model.ts) against a fake server: polling, the store and field
 * caches, the signals it emits, failed requests; and the list/detail views rendered from it.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { setupDom } from './mock';
setupDom();

import { LruCache } from '../lab/cache';
import { DetailView } from '../lab/detail';
import { FIELD_CACHE_SIZE, pickField, POLL_MS, RunsModel } from '../lab/model';
import { StoreListView } from '../lab/storelist';
import { FakeServer, HttpError, modelEntry, record } from './fakeserver';

function setup(options: { active?: () => boolean } = {}) {
  const server = new FakeServer();
  server.addStore('runs/.diffract', [modelEntry('m1'), modelEntry('m2', ['stable_rank'])]);
  const model = new RunsModel({ request: server.request, version: '0.1.0', isActive: options.active });
  return { server, model };
}

test('start checks the version and reads the stores; polling re-reads them while active, never after stop', async t => {
  t.mock.timers.enable({ apis: ['setInterval'] });
  let active = true;
  const { server, model } = setup({ active: () => active });
  const changed = record(model.changed);
  const versions = record(model.versionChanged);
  server.version = '0.2.0';
  model.start();
  await model.refresh();
  await model.checkVersion();
  assert.deepEqual(
    model.stores.map(s => s.path),
    ['runs/.diffract']
  );
  assert.equal(changed.length, 1);
  assert.match(versions[0].mismatch!, /pip install "diffract-lab==0\.2\.0"/);
  assert.equal(server.count('stores'), 1);

  t.mock.timers.tick(POLL_MS - 1);
  assert.equal(server.count('stores'), 1, 'no poll before the interval');
  t.mock.timers.tick(1);
  assert.equal(server.count('stores'), 2);
  await model.refresh(); // the poll in flight
  active = false; // the panel is hidden
  t.mock.timers.tick(POLL_MS * 3);
  assert.equal(server.count('stores'), 2, 'a hidden panel does not poll');
  active = true;
  t.mock.timers.tick(POLL_MS);
  assert.equal(server.count('stores'), 3);
  await model.refresh();
  model.stop();
  assert.equal(model.polling, false);
  t.mock.timers.tick(POLL_MS * 5);
  assert.equal(server.count('stores'), 3, 'stopped: no more polls');
  model.dispose();
});

test('a poll that finds nothing new emits nothing; a new stamp re-reads only the expanded store', async () => {
  const { server, model } = setup();
  server.addStore('other/.diffract', [modelEntry('x')]);
  await model.refresh(true);
  await model.toggle('runs/.diffract');
  assert.equal(model.isExpanded('runs/.diffract'), true);
  assert.equal(model.detail('runs/.diffract')!.models.length, 2);
  assert.equal(model.detail('other/.diffract'), undefined, 'collapsed stores are not read');
  const changed = record(model.changed);

  await model.refresh();
  assert.equal(changed.length, 0, 'same stamps: no change signal');
  assert.equal(server.count('store'), 1, 'same stamp: the summary comes from the cache');

  server.touch('runs/.diffract', 's2', [modelEntry('m1'), modelEntry('m2'), modelEntry('m3')]);
  server.touch('other/.diffract', 's2');
  await model.refresh();
  assert.equal(changed.length, 1);
  assert.equal(server.count('store', { path: 'runs/.diffract' }), 2);
  assert.equal(server.count('store', { path: 'other/.diffract' }), 0);
  assert.deepEqual(
    model.detail('runs/.diffract')!.models.map(m => m.model_id),
    ['m1', 'm2', 'm3']
  );

  await model.toggle('runs/.diffract');
  assert.equal(model.isExpanded('runs/.diffract'), false);
  assert.equal(changed.length, 2);
});

test('one refresh at a time: a second call shares it, a forced one runs after it', async () => {
  const { server, model } = setup();
  let open!: () => void;
  server.gates.set(
    'stores',
    new Promise<void>(r => {
      open = r;
    })
  );
  const a = model.refresh();
  const b = model.refresh();
  const c = model.refresh(true);
  assert.equal(a, b);
  assert.equal(server.count('stores'), 1);
  server.gates.delete('stores');
  open();
  await Promise.all([a, b, c]);
  assert.equal(server.count('stores'), 2, 'the forced refresh ran once more, after the first');
});

test('selecting a model picks a field, loads it once and serves it from the cache until the store changes', async () => {
  const { server, model } = setup();
  await model.refresh(true);
  await model.toggle('runs/.diffract');
  const selections = record(model.selectionChanged);
  const fields = record(model.fieldChanged);

  await model.select('runs/.diffract', 'm1');
  assert.deepEqual(model.selection, { store: 'runs/.diffract', model: 'm1', field: 'pl_alpha' });
  assert.equal(selections.length, 1);
  assert.equal(fields.length, 1);
  const first = fields[0]!;
  assert.equal(first.error, null);
  assert.deepEqual(
    first.points.map(p => p.value),
    [2, 3, 4],
    'numeric points only, in layer order'
  );
  assert.equal(server.count('field', { field: 'pl_alpha', model: 'm1' }), 1);
  // the chart is the figure route's layers figure of that store, field and model
  assert.equal(server.count('figure', { kind: 'layers', store: 'runs/.diffract', field: 'pl_alpha', model: 'm1' }), 1);
  assert.deepEqual(first.figure?.data, [{ type: 'scatter', name: 'layers:pl_alpha:m1' }]);

  await model.selectField('frob_norm');
  await model.selectField('pl_alpha');
  assert.equal(server.count('field', { field: 'pl_alpha' }), 1, 'pl_alpha came from the cache');
  assert.equal(server.count('figure', { field: 'pl_alpha' }), 1, 'its figure too');
  assert.equal(server.count('field', { field: 'frob_norm' }), 1);
  assert.equal(fields.length, 3);
  assert.equal(fields[2]!.selection.field, 'pl_alpha');

  // a field the other model lacks: selecting m2 falls back to its own first choice
  await model.select('runs/.diffract', 'm2');
  assert.equal(model.selection!.field, 'stable_rank');

  await model.select('runs/.diffract', 'm1');
  server.touch('runs/.diffract', 's22');
  await model.refresh();
  assert.equal(server.count('field', { field: 'pl_alpha', model: 'm1' }), 2, 'new stamp: read again');
  assert.deepEqual(
    model.field!.points.map(p => p.value),
    [3, 4, 5]
  );
});

test('a slow field answer never overwrites a newer selection', async () => {
  const { server, model } = setup();
  await model.refresh(true);
  await model.toggle('runs/.diffract');
  let open!: () => void;
  server.gates.set(
    'field',
    new Promise<void>(r => {
      open = r;
    })
  );
  const fields = record(model.fieldChanged);
  const slow = model.select('runs/.diffract', 'm1');
  server.gates.delete('field');
  await model.select('runs/.diffract', 'm2');
  open();
  await slow;
  assert.equal(fields.length, 1);
  assert.equal(fields[0]!.selection.model, 'm2');
  assert.equal(model.field!.selection.model, 'm2');
});

test('failed requests: the error says what to do, earlier data stays, the next success clears it', async () => {
  const { server, model } = setup();
  await model.refresh(true);
  const errors = record(model.errorChanged);

  server.failing.set('stores', new HttpError('not found', 404));
  await model.refresh(true);
  assert.equal(errors.length, 1);
  assert.match(model.error!, /HTTP 404.*jupyter server extension enable diffract/);
  assert.equal(model.stores.length, 1, 'the last good list is kept');
  await model.refresh();
  assert.equal(errors.length, 1, 'the same failure again: no new signal');

  server.failing.set('stores', new HttpError('Forbidden', 403));
  await model.refresh();
  assert.match(model.error!, /HTTP 403/);
  server.failing.set('stores', new TypeError('Failed to fetch'));
  await model.refresh();
  assert.equal(model.error, 'Cannot list stores: Failed to fetch');
  assert.equal(errors.length, 3);

  server.failing.delete('stores');
  await model.refresh();
  assert.equal(model.error, null);
  assert.equal(errors[errors.length - 1], null);

  server.failing.set('version', new HttpError('gone', 404));
  await model.checkVersion();
  assert.match(model.error!, /HTTP 404/);
  assert.equal(model.version, null);
  server.failing.delete('version');

  await model.toggle('runs/.diffract');
  server.failing.set('field', new HttpError('field "pl_alpha" is not stored', 400));
  await model.select('runs/.diffract', 'm1');
  assert.equal(model.field!.error, 'Cannot read pl_alpha: field "pl_alpha" is not stored');
  assert.deepEqual(model.field!.points, []);
  server.failing.delete('field');
  await model.selectField('frob_norm');
  assert.equal(model.field!.error, null, 'a failed read is not cached');
});

test('the selection is dropped when its model or store disappears', async () => {
  const { server, model } = setup();
  await model.refresh(true);
  await model.toggle('runs/.diffract');
  await model.select('runs/.diffract', 'm2');
  const selections = record(model.selectionChanged);
  const fields = record(model.fieldChanged);
  server.touch('runs/.diffract', 's2', [modelEntry('m1')]);
  await model.refresh();
  assert.equal(model.selection, null);
  assert.deepEqual(selections, [null]);
  assert.deepEqual(fields, [null]);
  assert.equal(model.field, null);
});

test('dispose stops polling and disconnects the views', async t => {
  t.mock.timers.enable({ apis: ['setInterval'] });
  const { server, model } = setup();
  const changed = record(model.changed);
  model.start();
  await model.refresh();
  const seen = changed.length;
  model.dispose();
  assert.equal(model.isDisposed, true);
  t.mock.timers.tick(POLL_MS * 3);
  assert.equal(server.count('stores'), 1);
  await model.toggle('runs/.diffract');
  assert.equal(changed.length, seen, 'no signal reaches a disconnected view');
});

test('pickField prefers the spectral fields, never the raw ESD; the cache drops the least recently used', () => {
  assert.equal(pickField(['esd', 'frob_norm', 'pl_alpha']), 'pl_alpha');
  assert.equal(pickField(['esd', 'mean']), 'mean');
  assert.equal(pickField(['esd']), 'esd');
  assert.equal(pickField([]), '');
  const cache = new LruCache<number>(2);
  cache.set('a', 1);
  cache.set('b', 2);
  assert.equal(cache.get('a'), 1); // a is now the newest
  cache.set('c', 3);
  assert.equal(cache.get('b'), undefined);
  assert.equal(cache.get('a'), 1);
  assert.equal(cache.size, 2);
  assert.ok(FIELD_CACHE_SIZE >= 16);
});

test('the views render from the model: store rows, the selected model, chips and the field message', async () => {
  const { server, model } = setup();
  server.summaries.get('runs/.diffract')!.models.push(modelEntry('m3', []));
  const list = new StoreListView(model);
  const opened: string[] = [];
  const detail = new DetailView(model, t => void opened.push(`${t.store}:${t.model}:${t.field}`));
  document.body.append(list.node, detail.node);
  model.changed.connect(() => list.render());
  model.selectionChanged.connect(() => {
    list.render();
    detail.render();
  });
  await model.refresh(true);
  assert.equal(list.node.querySelectorAll('.diffract-store').length, 1);
  (list.node.querySelector('.diffract-store-row') as HTMLElement).click();
  await new Promise(r => setTimeout(r, 0)); // the click's toggle reads the summary
  const rows = list.node.querySelectorAll<HTMLElement>('.diffract-model');
  assert.deepEqual(
    [...rows].map(r => r.dataset.model),
    ['m1', 'm2', 'm3']
  );
  list.query = 'stable';
  list.render();
  assert.deepEqual(
    [...list.node.querySelectorAll<HTMLElement>('.diffract-model')].map(r => r.dataset.model),
    ['m2']
  );
  list.query = 'nothing-like-this';
  list.render();
  assert.match(list.node.textContent!, /Nothing matches "nothing-like-this"/);
  list.query = '';
  list.render();

  server.failing.set('field', new HttpError('boom', 500));
  await model.select('runs/.diffract', 'm1');
  assert.ok(list.node.querySelector('.diffract-model[data-model="m1"]')!.classList.contains('diffract-selected'));
  assert.deepEqual(
    [...detail.node.querySelectorAll<HTMLElement>('.diffract-field')].map(c => c.dataset.field),
    ['frob_norm', 'pl_alpha']
  );
  // esd (an array per slice) waits behind the toggle
  const toggle = detail.node.querySelector('.diffract-toggle-arrays') as HTMLElement;
  assert.match(toggle.textContent!, /arrays and intermediates \(1\)/);
  toggle.click();
  assert.ok(detail.node.querySelector('.diffract-field-group[data-group="array"] .diffract-field[data-field="esd"]'));
  detail.query = 'alpha';
  detail.render();
  assert.deepEqual([...detail.node.querySelectorAll<HTMLElement>('.diffract-field')].map(c => c.dataset.field), ['pl_alpha']);
  detail.query = 'm1'; // a model's name, no field's: every chip stays
  detail.render();
  assert.equal(detail.node.querySelectorAll('.diffract-field').length, 3);
  detail.query = '';
  detail.showArrays = false;
  detail.render();
  assert.ok(detail.node.querySelector('.diffract-field[data-field="pl_alpha"]')!.classList.contains('diffract-on'));
  await detail.plot();
  assert.equal(detail.node.querySelector('.diffract-chart')!.textContent, 'Cannot read pl_alpha: boom');
  (detail.node.querySelector('.diffract-open') as HTMLElement).click();
  assert.deepEqual(opened, ['runs/.diffract:m1:pl_alpha']);

  await model.select('runs/.diffract', 'm3');
  assert.match(detail.node.textContent!, /No fields computed for this model yet/);
  assert.equal(detail.node.querySelector('.diffract-chart'), null);
});
