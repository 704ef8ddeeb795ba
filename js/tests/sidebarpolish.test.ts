/**
 * Issue 29 point 5, the sidebar: layer ticks with depth index and a short name, wrapped titles,
 * "1 model", no "segments" on the row, ids on one line with a tooltip, a stale message removed
 * before a figure, the spectrum scrolled into view.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { setupDom } from './mock';
setupDom();

import { clearMessages, layerTicks, sidebarLayout, wrapTitle } from '../lab/chart';
import { DetailView } from '../lab/detail';
import { idLabel, plural, storeMeta, storeTitle } from '../lab/storelist';
import type { StoreEntry } from '../shared/wire';

test("layer ticks: the route's \"index name\" ticks, evenly thinned to the width", () => {
  // as diffract.viz's layer_ticks names 12 layers (tests/viz/test_viz_layer_ticks.py)
  const xaxis = { title: { text: 'layer' }, tickvals: [...Array(12).keys()], ticktext: [...Array(12).keys()].map(i => `${i} blocks.${i}`) };
  const all = layerTicks(xaxis, 20)!;
  assert.deepEqual(all.tickvals, xaxis.tickvals);
  assert.equal(all.ticktext[3], '3 blocks.3');
  const few = layerTicks(xaxis, 4)!;
  assert.deepEqual(few.tickvals, [0, 3, 6, 9]);
  assert.deepEqual(few.ticktext, ['0 blocks.0', '3 blocks.3', '6 blocks.6', '9 blocks.9']);
  assert.equal(layerTicks({ title: { text: 'layer' } }, 4), null);
  const layout = sidebarLayout({ xaxis }, 220, { layerTicks: true, width: 300 }) as any;
  assert.equal(layout.xaxis.tickmode, 'array');
  assert.equal(layout.xaxis.ticktext.length, layout.xaxis.tickvals.length);
  assert.ok(layout.xaxis.tickvals.length <= 4);
  assert.equal(layout.xaxis.title.text, 'layer');
});

test('a long title wraps (no line over the width), the top margin grows with it', () => {
  const text = 'ESD of bert-base-uncased:encoder.layer.11.attention.output.dense.weight';
  const wrapped = wrapTitle(text, 30);
  const lines = wrapped.split('<br>');
  assert.ok(lines.length >= 3, wrapped);
  assert.ok(lines.every(l => l.length <= 30), wrapped);
  assert.equal(lines.join(''), text.replace(/\s/g, ' '));
  const narrow = sidebarLayout({ title: { text } }, 220, { width: 250 }) as any;
  const wide = sidebarLayout({ title: { text: 'short' } }, 220, { width: 250 }) as any;
  assert.ok(narrow.margin.t > wide.margin.t);
  assert.ok(narrow.height > wide.height);
  assert.equal(wrapTitle('', 20), '');
  // a line break already in the title stays one; each line is wrapped on its own
  assert.equal(wrapTitle('short title<br>second line', 30), 'short title<br>second line');
  assert.equal(wrapTitle('one<br>two three four', 10), 'one<br>two three<br>four');
});

test('store row: "1 model", "2 models", write batches only in the tooltip', () => {
  assert.equal(plural(1, 'model'), '1 model');
  assert.equal(plural(0, 'model'), '0 models');
  const s = { path: 'p', name: 'p', segments: 1, updated: 1700000000 } as unknown as StoreEntry;
  const one = storeMeta(s, { models: [{}] } as any);
  assert.match(one, /^1 model · /);
  assert.doesNotMatch(storeMeta(s, null), /segment/);
  assert.match(storeTitle(s), /1 write batch on disk/);
  assert.match(storeTitle({ ...s, segments: 3 }), /3 write batches/);
});

test('ids: one line with an ellipsis class and the whole id as tooltip', () => {
  const id = 'a-very-long-model-identifier-that-would-wrap-over-three-lines-000123';
  const span = idLabel(id);
  assert.equal(span.textContent, id);
  assert.equal(span.title, id);
  assert.ok(span.classList.contains('diffract-ellipsis'));
  assert.equal(span.querySelectorAll('wbr').length, 0);
});

test('a message left by an earlier draw goes before a figure is drawn', () => {
  const node = document.createElement('div');
  node.classList.add('js-plotly-plot');
  const plot = document.createElement('div');
  plot.className = 'plot-container';
  const msg = document.createElement('div');
  msg.className = 'diffract-empty';
  msg.textContent = 'esd has no per-layer numbers to plot';
  node.append(msg, plot);
  clearMessages(node);
  assert.equal(node.querySelector('.diffract-empty'), null);
  assert.ok(node.querySelector('.plot-container'), "Plotly's own children stay");
  const fresh = document.createElement('div');
  fresh.append(msg);
  clearMessages(fresh);
  assert.equal(fresh.children.length, 0);
});

test('an opened spectrum is scrolled into view', async () => {
  const seen: unknown[] = [];
  (HTMLElement.prototype as any).scrollIntoView = function (this: HTMLElement, arg: unknown) {
    seen.push([this.className, arg]);
  };
  const model = { esd: { store: 's', model: 'm', uid: 'u', name: 'layers.0.weight', values: null, xmin: null, alpha: null, figure: null, error: 'no' }, closeEsd() {} };
  const view = new DetailView(model as any, () => undefined);
  document.body.replaceChildren(view.node);
  // render() needs a selection: attach the box the way render does
  view.node.append((view as any).esdBox);
  await view.plotEsd();
  assert.deepEqual(seen, [['diffract-esd-box', { block: 'nearest' }]]);
  delete (HTMLElement.prototype as any).scrollIntoView;
});
