/** The widget modules against a mock model: rendering, user input -> model, model -> DOM. */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { MockModel, renderProps, setupDom } from './mock';
setupDom();

import { freshSuffix, openStoreCode, relativePath } from '../lab/cellcode';
import { fieldGroup, groupFields, roundValue, shortLayerName } from '../lab/fieldgroups';
import { plotText } from '../shared/format';
import filter from '../widgets/filter';
import progress from '../widgets/progress';
import type { FilterBuilderState, ProgressState } from '../shared/wire';

const sleep = (ms: number) => new Promise(r => setTimeout(r, ms));

function filterState(): FilterBuilderState {
  return {
    available_models: ['m1', 'm2'],
    available_types: ['dense', 'bias'],
    model_ids: [],
    names: '',
    param_types: [],
    uids: '',
    error: '',
    count: 16,
    total: 16,
    preview: [{ model_id: 'm1', name: 'layers.0.weight', type: 'dense', shape: '48×24', uid: 'u1' }],
    preview_limit: 50,
    filter_json: '[]',
    sort_by: '',
    sort_desc: false,
    page: 0,
    hints: [],
    code: 'session.filter()'
  };
}

test('filter builder renders the choices, the count and the preview', () => {
  const model = new MockModel(filterState());
  const el = document.createElement('div');
  filter.render(renderProps(model, el));
  assert.equal(el.querySelector('.diffract-count')!.textContent, '16 of 16 slices');
  assert.equal(el.querySelectorAll('.diffract-model-chip').length, 2);
  assert.equal(el.querySelectorAll('.diffract-type-chip').length, 2);
  assert.equal(el.querySelectorAll('.diffract-preview tbody tr').length, 1);
});

test('filter builder sends choices and shows the kernel answer', async () => {
  const model = new MockModel(filterState());
  const el = document.createElement('div');
  const cleanup = filter.render(renderProps(model, el));
  (el.querySelector('.diffract-model-chip[data-value="m2"]') as HTMLElement).click();
  assert.deepEqual(model.state.model_ids, ['m2']);
  const names = el.querySelector('.diffract-names') as HTMLInputElement;
  names.value = 're:layers\\..*';
  names.dispatchEvent(new window.Event('input'));
  await sleep(250); // debounced
  assert.equal(model.state.names, 're:layers\\..*');
  assert.ok(model.saved.some(s => 'names' in s));
  const custom = el.querySelector('.diffract-custom-type') as HTMLInputElement;
  custom.value = 'Attention';
  (el.querySelector('.diffract-add-type') as HTMLElement).click();
  assert.deepEqual(model.state.param_types, ['attention']);
  assert.ok(model.state.available_types.includes('attention'));
  model.update({ error: "invalid regular expression '(('", count: 0 });
  assert.match(el.querySelector('.diffract-error')!.textContent!, /invalid regular expression/);
  assert.equal(el.querySelector('.diffract-count')!.textContent, 'invalid filter');
  assert.ok(names.classList.contains('d-invalid'));
  (el.querySelector('button[title^="Re-read"]') as HTMLElement).click();
  assert.deepEqual(model.sent, [{ type: 'refresh' }]);
  const before = model.listenerCount();
  cleanup();
  assert.equal(model.listenerCount(), before - 16); // one per synced key it watches
});

function progressState(): ProgressState {
  return {
    fields: ['pl_alpha'],
    status: 'running',
    chunks_done: 2,
    chunks_total: 8,
    slices_done: 20,
    slices_total: 80,
    slices_stored: 18,
    kernel_calls: 41,
    values_done: 20,
    values_total: 80,
    fraction: 0.25,
    field: 'pl_alpha',
    param: 'layers.2.weight',
    detail: 'kernel powerlaw (2 of 2): 20/80 slices · step 41/160 · chunk 3/8',
    elapsed: 3.5,
    eta: 10.5,
    eta_low: 8,
    eta_high: 14,
    failures: 1,
    failure_list: [],
    outcome: '',
    message: '',
    cancellable: true,
    cancel_requested: false
  };
}

test('progress shows chunks, field, time and failures; Cancel asks the kernel', () => {
  const model = new MockModel(progressState());
  const el = document.createElement('div');
  progress.render(renderProps(model, el));
  const box = el.querySelector('.diffract-progress') as HTMLElement;
  assert.equal(box.dataset.status, 'running');
  assert.equal(el.querySelector('.diffract-chunks')!.textContent, '2/8');
  assert.equal(el.querySelector('.diffract-current')!.textContent, 'pl_alpha on layers.2.weight');
  assert.equal(el.querySelector('.diffract-eta')!.textContent, 'about 8.0s–14.0s');
  assert.equal(el.querySelector('.diffract-failures')!.textContent, '1');
  assert.equal((el.querySelector('[role=progressbar] > div') as HTMLElement).style.width, '25%');
  const cancel = el.querySelector('.diffract-cancel') as HTMLButtonElement;
  cancel.click();
  assert.equal(model.state.cancel_requested, true);
  assert.ok(cancel.disabled);
  assert.equal(el.querySelector('.diffract-slices')!.textContent, '20/80 (18 stored)');
  assert.equal(el.querySelector('.diffract-kernel-calls')!.textContent, '41');
  model.update({
    status: 'cancelled',
    slices_done: 18,
    outcome: 'cancelled: kept 36 computed value(s) · 124 not computed (run again to finish) · 1 failed',
    failure_list: [{ model_id: 'm1', slice: 'layers.3.weight', uid: 'u3', field: 'pl_alpha', kernel: 'powerlaw', error: 'LinAlgError: SVD did not converge' }],
    message: 'cancelled: finished values kept'
  });
  assert.equal(box.dataset.status, 'cancelled');
  assert.equal(el.querySelector('.diffract-eta')!.textContent, '–');
  // after the end: no Cancel, no "now", no ETA; the counts of the report; the failures listed
  assert.equal(cancel.style.display, 'none');
  assert.ok((el.querySelector('.diffract-now') as HTMLElement).hidden);
  assert.ok((el.querySelector('.diffract-eta-item') as HTMLElement).hidden);
  assert.equal(el.querySelector('.diffract-slices')!.textContent, '18/80');
  assert.match(el.querySelector('.diffract-outcome')!.textContent!, /124 not computed/);
  assert.equal(el.querySelector('.diffract-progress-title')!.textContent, 'pl_alpha on 80 slices');
  const row = el.querySelector('.diffract-failure-list .diffract-failure')!;
  assert.deepEqual(Array.from(row.querySelectorAll('td')).map(td => td.textContent), ['m1:layers.3.weight', 'powerlaw (pl_alpha)', 'LinAlgError: SVD did not converge']);
  assert.match(el.querySelector('.diffract-failure-list summary')!.textContent!, /^1 failure$/);
});

test('progress: nothing to compute when every value is stored', () => {
  const model = new MockModel<ProgressState>({ ...progressState(), status: 'done', chunks_total: 0, chunks_done: 0, slices_done: 0, slices_total: 0, slices_stored: 0, values_done: 0, values_total: 0, fraction: 0, failures: 0, eta: null, eta_low: null, eta_high: null, outcome: '' });
  const el = document.createElement('div');
  progress.render(renderProps(model, el));
  assert.equal(el.querySelector('.diffract-outcome')!.textContent, 'nothing to compute: every requested value is stored');
  assert.equal((el.querySelector('[role=progressbar] > div') as HTMLElement).style.width, '100%');
});

test('a blocking apply shows no usable Cancel', () => {
  const model = new MockModel({ ...progressState(), cancellable: false });
  const el = document.createElement('div');
  progress.render(renderProps(model, el));
  assert.ok((el.querySelector('.diffract-cancel') as HTMLButtonElement).disabled);
});

test('sidebar helpers: relative paths and the inserted cell', () => {
  assert.equal(relativePath('', 'runs/.diffract'), 'runs/.diffract');
  assert.equal(relativePath('notebooks', 'notebooks/.diffract'), '.diffract');
  assert.equal(relativePath('a/b', 'c/.diffract'), '../../c/.diffract');
  const code = openStoreCode({ store: 'runs/.diffract', model: 'm1', field: 'pl_alpha' }, 'notebooks');
  assert.match(code, /^runs_session = Session\(path="\.\.\/runs\/\.diffract", readonly=True\)$/m);
  assert.match(code, /^runs_scope = runs_session\.filter\(model_ids=\["m1"\]\)$/m);
  assert.match(code, /^FieldPanel\(runs_scope, "pl_alpha"\)$/m);
  assert.doesNotMatch(code, /(^|[^_])session =/m);
  // a user's `session` (or anything else) is never a reason to rename; an earlier inserted cell is
  assert.equal(freshSuffix(['session = Session()', 'scope = 1']), '');
  assert.equal(freshSuffix(['runs_session = Session(path=".diffract")']), '_2');
  assert.equal(freshSuffix(['runs_session = 1', 'x = runs_scope_2']), '_3');
  assert.equal(freshSuffix(['my_runs_session = 1', 'runs_session_x = 2']), '');
  const again = openStoreCode({ store: '.diffract' }, '', ['runs_session = Session(path=".diffract", readonly=True)']);
  assert.match(again, /^runs_session_2 = Session\(path="\.diffract", readonly=True\)$/m);
  assert.match(again, /print\(runs_session_2\.models\.ids\(\)/);
  assert.doesNotMatch(again, /FieldPanel/);
});

test('plot text escapes the HTML subset Plotly reads', () => {
  assert.equal(plotText('<a href="http://x">m</a> & <b>'), '&lt;a href="http://x"&gt;m&lt;/a&gt; &amp; &lt;b&gt;');
  assert.equal(plotText('layers.0.weight'), 'layers.0.weight');
  assert.equal(plotText(3), '3');
});

test('sidebar field groups, rounding and layer labels', () => {
  assert.equal(fieldGroup('pl_alpha'), 'layer');
  assert.equal(fieldGroup('model_pl_alpha'), 'model');
  for (const f of ['esd', 'spectrum_path', 'weights_svals', 'esd_deltas']) {
    assert.equal(fieldGroup(f), 'array', f);
  }
  assert.deepEqual(groupFields(['esd', 'model_stable_rank', 'stable_rank', 'pl_alpha'], 'RANK'), [
    { group: 'layer', fields: ['stable_rank'] },
    { group: 'model', fields: ['model_stable_rank'] }
  ]);
  assert.equal(roundValue(3.141592653589793), '3.142');
  assert.equal(roundValue(123456.789), '1.235e+5');
  assert.equal(roundValue(0.000012345), '1.234e-5');
  assert.equal(roundValue(2), '2');
  assert.equal(roundValue(null), 'null');
  assert.equal(shortLayerName('layers.0.weight'), 'layers.0');
  assert.equal(shortLayerName('model.encoder.layers.11.attn.q_proj.weight'), '11.attn.q_proj');
});
