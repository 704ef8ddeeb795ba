/**
 * A tracked run across training in the sidebar: the model asks the figure route for the run's
 * `evolution` figure (right query, cached by store stamp, asked again when the stamp changes,
 * never for a model that is not a tracked checkpoint), says what stops it, and the views show
 * it only under a checkpoint's chart; a run row's "across training" button selects the newest
 * checkpoint.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { setupDom } from './mock';
setupDom();

import { DetailView } from '../lab/detail';
import { evolutionTitle, legendRows, renderEvolution, rowLabels, sidebarEvolution } from '../lab/evolutionview';
import { evolutionBlocker, stepList } from '../lab/messages';
import { figureSteps, RunsModel } from '../lab/model';
import { StoreListView } from '../lab/storelist';
import type { EvolutionState } from '../lab/types';
import type { ModelEntry } from '../shared/wire';
import { FakeServer, HttpError, modelEntry, record } from './fakeserver';

const STORE = 'runs/.diffract';

function checkpoint(run: string, step: number, fields = ['frob_norm', 'pl_alpha', 'esd']): ModelEntry {
  return { ...modelEntry(`${run}-s${String(step).padStart(9, '0')}`, fields), track: { run, step } };
}

/** A store with a plain model and run "train" at steps 0, 10 and 20. */
async function setup(models: ModelEntry[] = [modelEntry('plain'), checkpoint('train', 0), checkpoint('train', 10), checkpoint('train', 20)]) {
  const server = new FakeServer();
  server.addStore(STORE, models);
  const model = new RunsModel({ request: server.request, version: '0.1.0' });
  await model.refresh(true);
  await model.toggle(STORE);
  return { server, model };
}

const evolutionCalls = (server: FakeServer, match: Record<string, string> = {}) => server.count('figure', { kind: 'evolution', ...match });

test("a checkpoint's run across training: the route's evolution figure of the store, field and run", async () => {
  const { server, model } = await setup();
  const seen = record(model.evolutionChanged);
  await model.select(STORE, 'train-s000000010');
  const call = server.calls.find(c => c.endpoint === 'figure' && c.query.kind === 'evolution');
  assert.deepEqual(call?.query, { kind: 'evolution', store: STORE, field: 'pl_alpha', run: 'train' });
  assert.equal(seen.length, 1);
  const state = model.evolution!;
  assert.equal(state.selection, model.selection);
  assert.equal(state.run, 'train');
  assert.equal(state.step, 10);
  assert.deepEqual(state.steps, [0, 10, 20]);
  assert.deepEqual(state.missing, []);
  assert.equal(state.message, null);
  assert.deepEqual(figureSteps(state.figure), [0, 10, 20]);

  // another checkpoint of the run, same stamp: the same figure, not asked again
  await model.select(STORE, 'train-s000000000');
  assert.equal(evolutionCalls(server), 1);
  assert.equal(model.evolution!.step, 0);
  // another field: asked for that field
  await model.selectField('frob_norm');
  assert.equal(evolutionCalls(server, { field: 'frob_norm', run: 'train' }), 1);
  model.dispose();
});

test('a run in training: a new store stamp asks again, and the figure gains the new step', async () => {
  const { server, model } = await setup();
  await model.select(STORE, 'train-s000000010');
  assert.equal(evolutionCalls(server), 1);
  await model.refresh();
  assert.equal(evolutionCalls(server), 1, 'same stamp: from the cache');

  const models = [...server.summaries.get(STORE)!.models, checkpoint('train', 30)];
  server.touch(STORE, 's2', models);
  const seen = record(model.evolutionChanged);
  await model.refresh();
  assert.equal(evolutionCalls(server), 2, 'new stamp: asked again');
  assert.equal(seen.length, 1);
  assert.deepEqual(model.evolution!.steps, [0, 10, 20, 30]);
  assert.deepEqual(figureSteps(model.evolution!.figure), [0, 10, 20, 30]);
  assert.equal(model.selection!.model, 'train-s000000010', 'the selected checkpoint stays');
  model.dispose();
});

test('no across-training view for a model that is not a tracked checkpoint; it clears when one is left', async () => {
  const { server, model } = await setup();
  const seen = record(model.evolutionChanged);
  await model.select(STORE, 'plain');
  assert.equal(evolutionCalls(server), 0);
  assert.equal(model.evolution, null);
  assert.equal(seen.length, 0);
  await model.select(STORE, 'train-s000000020');
  assert.equal(model.evolution!.run, 'train');
  await model.select(STORE, 'plain');
  assert.equal(model.evolution, null);
  assert.deepEqual(
    seen.map(s => s?.run ?? null),
    ['train', null]
  );
  assert.equal(evolutionCalls(server), 1);
  model.dispose();
});

test('what stops it is said, with what to do, and nothing is asked: one step, the field at one step, no number per layer', async () => {
  const one = await setup([checkpoint('solo', 5)]);
  await one.model.select(STORE, 'solo-s000000005');
  assert.match(one.model.evolution!.message!, /needs two steps: run solo has one checkpoint so far \(step 5\)\. It fills in by itself/);
  assert.equal(evolutionCalls(one.server), 0);

  // stable_rank computed on one checkpoint only
  const partial = await setup([checkpoint('train', 0), checkpoint('train', 10, ['pl_alpha', 'stable_rank']), checkpoint('train', 20)]);
  await partial.model.select(STORE, 'train-s000000010');
  await partial.model.selectField('stable_rank');
  assert.equal(
    partial.model.evolution!.message,
    'stable_rank is stored at 1 of the 3 steps of run train (step 10): the across-training view needs two. ' +
      'session.compute.apply("stable_rank") computes it for the other checkpoints (only what is missing).'
  );
  assert.deepEqual(partial.model.evolution!.missing, [0, 20]);
  assert.equal(evolutionCalls(partial.server, { field: 'stable_rank' }), 0);

  // an array field has no number per layer
  await partial.model.selectField('pl_alpha');
  assert.equal(partial.model.evolution!.message, null);
  await partial.model.select(STORE, 'train-s000000000');
  await partial.model.selectField('esd');
  assert.match(partial.model.evolution!.message!, /^esd has no number per layer to follow across training: pick a per-layer field/);
  assert.equal(evolutionCalls(partial.server, { field: 'esd' }), 0);
  one.model.dispose();
  partial.model.dispose();
});

test('a field missing at some steps: drawn without them, the missing steps named; a failure says so and is asked again', async () => {
  const { server, model } = await setup([
    checkpoint('train', 0),
    checkpoint('train', 10, ['frob_norm', 'pl_alpha', 'stable_rank']),
    checkpoint('train', 20, ['frob_norm', 'stable_rank'])
  ]);
  await model.select(STORE, 'train-s000000010');
  await model.selectField('stable_rank');
  assert.equal(model.evolution!.message, null);
  assert.deepEqual(figureSteps(model.evolution!.figure), [10, 20]);
  assert.deepEqual(model.evolution!.missing, [0]);

  server.failing.set('figure', new HttpError('cannot read the store: runs/.diffract: damaged segment', 422));
  await model.selectField('frob_norm');
  assert.equal(model.evolution!.failed, true);
  assert.equal(model.evolution!.message, 'Cannot draw frob_norm across training: cannot read the store: runs/.diffract: damaged segment');
  server.failing.delete('figure');
  await model.selectField('stable_rank');
  await model.selectField('frob_norm');
  assert.equal(model.evolution!.failed, false, 'a failure is not cached');
  assert.deepEqual(figureSteps(model.evolution!.figure), [0, 10, 20]);
  assert.equal(evolutionCalls(server, { field: 'frob_norm' }), 2);
  model.dispose();
});

test("selectRun selects the run's newest checkpoint by step (not by id)", async () => {
  // ids whose string order is not the step order
  const models = [checkpoint('r', 100), checkpoint('r', 9), { ...modelEntry('r-late'), track: { run: 'r', step: 10 } }];
  const { model } = await setup(models);
  await model.selectRun(STORE, 'r');
  assert.equal(model.selection!.model, 'r-s000000100');
  assert.equal(model.evolution!.step, 100);
  await model.selectRun(STORE, 'no-such-run');
  assert.equal(model.selection!.model, 'r-s000000100', 'an unknown run changes nothing');
  model.dispose();
});

test('the detail view shows the across-training box only under a checkpoint, with its message or chart data', async () => {
  const { model } = await setup([modelEntry('plain'), checkpoint('solo', 5)]);
  const detail = new DetailView(model, () => undefined);
  document.body.append(detail.node);
  model.selectionChanged.connect(() => detail.render());
  model.evolutionChanged.connect(() => void detail.plotEvolution());

  await model.select(STORE, 'plain');
  assert.ok(detail.node.querySelector('.diffract-chart'));
  assert.equal(detail.node.querySelector('.diffract-evolution-box'), null);

  await model.select(STORE, 'solo-s000000005');
  const box = detail.node.querySelector<HTMLElement>('.diffract-evolution-box');
  assert.ok(box);
  assert.equal(box.dataset.run, 'solo');
  // under the layer chart
  assert.equal(detail.node.querySelector('.diffract-chart')!.nextElementSibling, box);
  await new Promise(r => setTimeout(r, 0));
  const chart = box.querySelector<HTMLElement>('.diffract-evolution')!;
  assert.match(chart.textContent!, /needs two steps/);
  assert.equal(chart.dataset.field, 'pl_alpha');
  assert.equal(chart.dataset.steps, undefined);

  await model.select(STORE, 'plain');
  assert.equal(detail.node.querySelector('.diffract-evolution-box'), null);
  detail.node.remove();
  model.dispose();
});

test('a failed request shows as an error in the box, not as an empty state', async () => {
  const { server, model } = await setup();
  server.failing.set('figure', new HttpError('boom', 500));
  const detail = new DetailView(model, () => undefined);
  document.body.append(detail.node);
  model.selectionChanged.connect(() => detail.render());
  await model.select(STORE, 'train-s000000010');
  await detail.plotEvolution();
  const msg = detail.node.querySelector<HTMLElement>('.diffract-evolution .diffract-empty')!;
  assert.equal(msg.textContent, 'Cannot draw pl_alpha across training: boom');
  assert.ok(msg.classList.contains('diffract-evolution-error'));
  detail.node.remove();
  model.dispose();
});

test('a run row: its click shows and hides the checkpoints (even holding the selection); its button selects the newest', async () => {
  const { model } = await setup();
  const shown: string[] = [];
  const list = new StoreListView(model, (store, run) => {
    shown.push(`${store}:${run}`);
    void model.selectRun(store, run);
  });
  document.body.append(list.node);
  model.changed.connect(() => list.render());
  model.selectionChanged.connect(() => list.render());
  list.render();
  const runRow = () => list.node.querySelector<HTMLElement>('tr.diffract-run[data-run="train"]')!;
  const checkpoints = () => list.node.querySelectorAll('tr.diffract-checkpoint').length;
  assert.equal(checkpoints(), 0);
  const button = runRow().querySelector<HTMLElement>('button.diffract-run-evolution')!;
  assert.equal(button.textContent, 'across training');
  assert.match(button.title, /newest checkpoint \(step 20\)/);
  button.click();
  await new Promise(r => setTimeout(r, 0));
  assert.deepEqual(shown, [`${STORE}:train`]);
  assert.equal(model.selection!.model, 'train-s000000020');
  assert.equal(checkpoints(), 3, 'the run opens on its checkpoints');
  assert.ok(list.node.querySelector('tr.diffract-selected[data-model="train-s000000020"]'));

  runRow().click(); // closes, although it holds the selected checkpoint
  assert.equal(checkpoints(), 0);
  assert.equal(model.selection!.model, 'train-s000000020', 'closing the run keeps the selection');
  runRow().click();
  assert.equal(checkpoints(), 3);
  list.node.remove();
  model.dispose();

  // one checkpoint: "1 checkpoint"; the default button selects it
  const solo = await setup([checkpoint('solo', 5)]);
  const soloList = new StoreListView(solo.model);
  soloList.render();
  const row = soloList.node.querySelector<HTMLElement>('tr.diffract-run')!;
  assert.match(row.textContent!, /solostep 5 \(1 checkpoint\) across training/);
  assert.match(row.title, /tracked run solo: 1 checkpoint, step 5/);
  row.querySelector<HTMLElement>('button.diffract-run-evolution')!.click();
  await new Promise(r => setTimeout(r, 0));
  assert.equal(solo.model.selection!.model, 'solo-s000000005');
  solo.model.dispose();
});

test('the figure fitted to the sidebar: the title says what is drawn, ticks fit, short layer names, the selected column outlined', async () => {
  const { model } = await setup();
  await model.select(STORE, 'train-s000000010');
  const state = model.evolution!;
  const fig = sidebarEvolution(state.figure!, state, [0, 10, 20], 600);
  assert.equal((fig.layout.title as { text: string }).text, 'pl_alpha across training · run train · 3 checkpoints (steps 0–20)');
  assert.equal(evolutionTitle('pl_alpha', 'r', [7]), 'pl_alpha across training · run r · 1 checkpoint (step 7)');
  // a narrow chart: broken between the parts, never inside "3 checkpoints"
  assert.equal(evolutionTitle('pl_alpha', 'train', [0, 10, 20], 40), 'pl_alpha across training · run train<br>3 checkpoints (steps 0–20)');
  assert.equal(evolutionTitle('pl_alpha', 'train', [0, 10, 20], 20), 'pl_alpha across training<br>run train<br>3 checkpoints (steps 0–20)');
  const x = fig.layout.xaxis as { tickvals: number[]; ticktext: string[] };
  assert.deepEqual(x.tickvals, [0, 1, 2]);
  assert.deepEqual(x.ticktext, ['0', '10', '20']);
  const y = fig.layout.yaxis as { tickvals: string[]; ticktext: string[] };
  assert.deepEqual(y.tickvals, ['layers.0.weight', 'layers.1.weight', 'layers.2.weight']);
  assert.deepEqual(y.ticktext, ['layers.0', 'layers.1', 'layers.2']);
  const shapes = fig.layout.shapes as Record<string, unknown>[];
  assert.deepEqual(
    shapes.map(s => [s.xref, s.x0, s.x1]),
    [
      ['x', 0.5, 1.5],
      ['x2', 10, 10]
    ]
  );
  assert.deepEqual(state.figure!.layout.shapes, undefined, "the model's figure is not changed");
  // the lines are named as the rows are, with a legend (a few layers: one row on a wide chart)
  const lines = fig.data.filter(t => t.type === 'scatter');
  assert.deepEqual(
    lines.map(t => [t.name, t.showlegend]),
    [
      ['layers.0', true],
      ['layers.1', true],
      ['layers.2', true]
    ]
  );
  assert.equal(legendRows(fig, 600), 1);
  assert.ok(legendRows(fig, 200) >= 2);
  assert.equal(state.figure!.data[1].name, 'layers.0.weight', "the model's traces keep their names");
  // more layers than a legend tells apart: none
  const names = Array.from({ length: 12 }, (_, i) => `blocks.${i}.mlp.weight`);
  const big = {
    data: [{ type: 'heatmap', x: [0, 1], y: names, z: names.map(() => [1, 2]) }, ...names.map(n => ({ type: 'scatter', name: n, x: [0, 10], y: [1, 2] }))],
    layout: { xaxis: { tickvals: [0, 1], ticktext: ['0', '10'] }, yaxis: { tickvals: names, ticktext: names.map((_, i) => `blocks.${i}`) } }
  };
  const bigFig = sidebarEvolution(big, state, [0, 10], 300);
  assert.equal(legendRows(bigFig, 300), 0);
  const rowTicks = bigFig.layout.yaxis as { ticktext: string[] };
  assert.equal(rowTicks.ticktext[0], 'blocks.0', "the route's short layer names on the rows");
  // a figure without short names keeps the whole ones
  assert.deepEqual(rowLabels(['a.weight', 'b.weight'], undefined), ['a.weight', 'b.weight']);
  assert.deepEqual(rowLabels(['a.weight', 'b.weight'], { tickvals: ['b.weight'], ticktext: ['b'] }), ['a.weight', 'b']);

  // 200 steps on a narrow sidebar: labels every few columns, none overlapping
  const many = Array.from({ length: 200 }, (_, i) => i * 1000);
  const wide = sidebarEvolution(state.figure!, state, many, 300).layout.xaxis as { tickvals: number[]; ticktext: string[] };
  assert.ok(wide.tickvals.length <= 6 && wide.tickvals.length >= 3, String(wide.tickvals.length));
  assert.equal(wide.ticktext[1], String(many[wide.tickvals[1]]));
  model.dispose();
});

test('renderEvolution without a figure: the message, no notes; step lists', async () => {
  const node = document.createElement('div');
  const note = document.createElement('div');
  const state: EvolutionState = {
    selection: { store: STORE, model: 'm', field: 'pl_alpha' },
    run: 'train',
    step: 5,
    steps: [0, 5],
    missing: [],
    figure: null,
    message: 'The across-training view needs two steps',
    failed: false
  };
  await renderEvolution(node, note, state);
  assert.equal(node.textContent, 'The across-training view needs two steps');
  assert.equal(note.textContent, '');
  assert.equal(stepList([1, 2, 3]), 'steps 1, 2 and 3');
  assert.equal(stepList([1, 2, 3, 4, 5, 6, 7], 3), 'steps 1, 2, … (7 in all)');
  assert.equal(evolutionBlocker('pl_alpha', 'r', [1, 2], [1, 2], true), null);
});
