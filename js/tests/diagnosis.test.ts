/** The sidebar's diagnosis badges: counts per model and rules per layer, read from the stored
 * `diag_<rule>` / `diag_<rule>_reason` fields through the field route. */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { setupDom } from './mock';
setupDom();

import { DetailView } from '../lab/detail';
import { buildDiagnosis, diagRules, layerBadges, modelBadges } from '../lab/diagnosis';
import { RunsModel } from '../lab/model';
import { StoreListView } from '../lab/storelist';
import type { FieldPoint, FieldReply, ModelEntry, StoreEntry, StoreReply } from '../shared/wire';

const store: StoreEntry = { path: 's', name: '.diffract', segments: 1, updated: 1700000000, stamp: 'x' };
const LAYERS = ['l0', 'l1', 'l2'];

/** Per model, per rule: the flag of each layer (l0, l1, l2). */
const FLAGS: Record<string, Record<string, boolean[]>> = {
  a: { over_trained: [true, false, true], trap: [false, true, false] },
  b: { over_trained: [false, false, false], trap: [false, false, false] }
};

function reply(field: string, value: (model: string, rule: string, i: number) => FieldPoint['value']): FieldReply {
  const rule = field.replace(/^diag_/, '').replace(/_reason$/, '');
  return {
    ...store,
    field,
    models: Object.keys(FLAGS).map(m => ({
      model_id: m,
      value: null,
      points: LAYERS.map((name, i) => ({ name, uid: `${m}-${i}`, type: 'dense', index: i, value: value(m, rule, i) }))
    }))
  };
}

const flagReply = (rule: string) => reply(`diag_${rule}`, (m, r, i) => FLAGS[m][r][i]);
const reasonReply = (rule: string) => reply(`diag_${rule}_reason`, (m, r, i) => `${m}/${LAYERS[i]}: ${r} because ${i}`);

test('the rules are the diag_<rule> fields, not their reasons', () => {
  assert.deepEqual(diagRules(['pl_alpha', 'diag_trap_reason', 'diag_trap', 'diag_over_trained', 'model_diag_outliers']), ['over_trained', 'trap']);
  assert.deepEqual(diagRules(['pl_alpha']), []);
});

test('counts per model and rule, flagged layers in depth order with their reasons', () => {
  const d = buildDiagnosis([
    { rule: 'trap', flags: flagReply('trap'), reasons: reasonReply('trap') },
    { rule: 'over_trained', flags: flagReply('over_trained'), reasons: null }
  ]);
  assert.deepEqual(d.get('a')!.counts, { trap: 1, over_trained: 2 });
  assert.deepEqual(d.get('b')!.counts, { trap: 0, over_trained: 0 });
  const a = d.get('a')!.layers;
  assert.deepEqual(
    a.map(l => [l.name, l.hits.map(x => x.rule)]),
    [
      ['l0', ['over_trained']],
      ['l1', ['trap']],
      ['l2', ['over_trained']]
    ]
  );
  assert.equal(a[1].hits[0].reason, 'a/l1: trap because 1');
  assert.equal(a[0].hits[0].reason, 'diag_over_trained fires'); // no reason stored
  assert.equal(d.get('b')!.layers.length, 0);
});

test('badges: a count per firing rule in the table, rules with reasons per layer', () => {
  const d = buildDiagnosis([{ rule: 'over_trained', flags: flagReply('over_trained'), reasons: reasonReply('over_trained') }]);
  const m = modelBadges(d.get('a'))!;
  assert.equal(m.querySelector<HTMLElement>('[data-rule="over_trained"]')!.textContent, 'over trained 2');
  assert.match(m.querySelector<HTMLElement>('[data-rule="over_trained"]')!.title, /2 layers flagged \(l0, l2\)/);
  assert.equal(modelBadges(d.get('b'))!.textContent, 'ok');
  assert.equal(modelBadges(undefined), null);
  const layers = layerBadges(d.get('a'))!;
  const rows = [...layers.querySelectorAll<HTMLElement>('.diffract-diag-layer')];
  assert.deepEqual(
    rows.map(r => r.dataset.uid),
    ['a-0', 'a-2']
  );
  assert.equal(rows[1].querySelector<HTMLElement>('.diffract-badge')!.title, 'a/l2: over_trained because 2');
  assert.match(layers.textContent!, /2 layers flagged/);
  assert.match(layerBadges(d.get('b'))!.textContent!, /no rule fires/);
});

test('the sidebar reads diag_* fields with the summary and shows the badges in the table and under the chart', async () => {
  const models: ModelEntry[] = Object.keys(FLAGS).map(id => ({
    model_id: id,
    slices: 3,
    fields: ['pl_alpha', 'diag_trap', 'diag_trap_reason'],
    framework: 'numpy',
    added: 1700000000,
    changed: 1700000000,
    track: null
  }));
  const summary: StoreReply = { ...store, models, fields: ['diag_trap', 'diag_trap_reason', 'pl_alpha'], levels: {}, manifests: [] };
  const calls: string[] = [];
  const request = async <T>(endpoint: string, query: Record<string, string> = {}): Promise<T> => {
    calls.push(`${endpoint}:${query.field ?? ''}`);
    await Promise.resolve();
    if (endpoint === 'stores') {
      return { root: '', stores: [store] } as T;
    }
    if (endpoint === 'store') {
      return structuredClone(summary) as T;
    }
    if (endpoint === 'field' && query.field === 'diag_trap') {
      return flagReply('trap') as T;
    }
    if (endpoint === 'field' && query.field === 'diag_trap_reason') {
      return reasonReply('trap') as T;
    }
    if (endpoint === 'figure') {
      return { kind: query.kind, path: 's', figure: null } as T;
    }
    return { ...store, field: query.field, models: [] } as T;
  };
  const model = new RunsModel({ request, version: '0.1.0' });
  const list = new StoreListView(model);
  document.body.replaceChildren(list.node);
  await model.refresh(true);
  await model.toggle('s');
  list.render();
  assert.ok(calls.includes('field:diag_trap') && calls.includes('field:diag_trap_reason'));
  const rowA = list.node.querySelector<HTMLElement>('.diffract-model[data-model="a"]')!;
  assert.equal(rowA.querySelector<HTMLElement>('.diffract-badge[data-rule="trap"]')!.textContent, 'trap 1');
  const rowB = list.node.querySelector<HTMLElement>('.diffract-model[data-model="b"]')!;
  assert.equal(rowB.querySelector('.diffract-badge[data-rule]'), null);
  await model.select('s', 'a');
  const detail = new DetailView(model, () => undefined);
  detail.render();
  const layer = detail.node.querySelector<HTMLElement>('.diffract-diag-layer[data-uid="a-1"] .diffract-badge')!;
  assert.equal(layer.dataset.rule, 'trap');
  assert.equal(layer.title, 'a/l1: trap because 1');
  model.dispose();
});

test('a failed read of the diag_* fields leaves the store readable, without badges', async () => {
  const summary: StoreReply = {
    ...store,
    models: [{ model_id: 'a', slices: 3, fields: ['diag_trap'], framework: 'numpy', added: 1, changed: 1, track: null }],
    fields: ['diag_trap'],
    levels: {},
    manifests: []
  };
  const request = async <T>(endpoint: string): Promise<T> => {
    await Promise.resolve();
    if (endpoint === 'stores') {
      return { root: '', stores: [store] } as T;
    }
    if (endpoint === 'store') {
      return structuredClone(summary) as T;
    }
    throw new Error('field route down');
  };
  const model = new RunsModel({ request, version: '0.1.0' });
  await model.refresh(true);
  await model.toggle('s');
  assert.equal(model.detail('s')?.models.length, 1);
  assert.equal(model.diagnosis('s', 'a'), undefined);
  assert.equal(model.error, null);
  model.dispose();
});
