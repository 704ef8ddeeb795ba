/** The progress view between kernel messages: elapsed and the ETA range tick on the browser's
 * clock; the bar is the share of the work done and never goes back; one counter of requested
 * values; kernel names only in the details; a cancelled run reads cancelled with what was kept
 * and a bar where the work stopped; the end shows no ETA, no Cancel. */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { MockModel, renderProps, setupDom } from './mock';
setupDom();

import type { ProgressState } from '../shared/wire';
import progress, { etaRange } from '../widgets/progress';

const sleep = (ms: number) => new Promise(r => setTimeout(r, ms));

function running(): ProgressState {
  return {
    fields: ['pl_alpha', 'stable_rank'],
    status: 'running',
    chunks_done: 0,
    chunks_total: 1,
    slices_done: 0,
    slices_total: 120,
    slices_stored: 0,
    kernel_calls: 37,
    values_done: 30,
    values_total: 240,
    fraction: 0.25,
    field: '',
    param: 'm1:layers.3.attn.q',
    detail: 'kernel weights_spectrum (1 of 4): 37/120 slices · step 37/148',
    elapsed: 3.5,
    eta: 10.5,
    eta_low: 8.0,
    eta_high: 14.0,
    failures: 0,
    failure_list: [],
    outcome: '',
    message: '',
    cancellable: true,
    cancel_requested: false
  };
}

/** Move the clock the view reads by `seconds`, then let its one-second timer run. */
async function advance(clock: { t: number }, seconds: number): Promise<void> {
  clock.t += seconds * 1000;
  await sleep(1100);
}

const width = (el: HTMLElement) => parseFloat((el.querySelector('[role=progressbar] > div') as HTMLElement).style.width);
const text = (el: HTMLElement, sel: string) => el.querySelector(sel)!.textContent;

test('the counter is requested values, the bar the work done, kernel names only in the details', () => {
  const model = new MockModel(running());
  const el = document.createElement('div');
  progress.render(renderProps(model, el));
  assert.equal(text(el, '.diffract-progress-title'), 'computing pl_alpha, stable_rank on 120 slices');
  assert.equal(text(el, '.diffract-counter'), '30 of 240 requested values');
  assert.equal(width(el), 25);
  assert.equal(text(el, '.diffract-pct'), '25%');
  // a step the requested fields share: no kernel name in the main line
  assert.equal(text(el, '.diffract-current'), 'shared step on m1:layers.3.attn.q');
  const main = Array.from(el.querySelectorAll('.diffract-progress > .d-stats')).map(e => e.textContent).join(' ');
  assert.doesNotMatch(main, /weights_spectrum/);
  assert.match(text(el, '.diffract-detail')!, /kernel weights_spectrum \(1 of 4\): 37\/120 slices/);
  model.update({ field: 'pl_alpha' });
  assert.equal(text(el, '.diffract-current'), 'pl_alpha on m1:layers.3.attn.q');
});

test('the ETA is a range counted down between messages, and none until it means something', async () => {
  const clock = { t: 1000 };
  const real = performance.now.bind(performance);
  performance.now = () => clock.t;
  try {
    const model = new MockModel<ProgressState>({ ...running(), eta_low: null, eta_high: null });
    const el = document.createElement('div');
    const cleanup = progress.render(renderProps(model, el));
    assert.equal(text(el, '.diffract-eta'), 'estimating…');
    model.update({ eta_low: 8.0, eta_high: 14.0, elapsed: 3.5 });
    assert.equal(text(el, '.diffract-eta'), 'about 8.0s–14.0s');
    assert.equal(text(el, '.diffract-elapsed'), '3.5s');
    await advance(clock, 2);
    assert.equal(text(el, '.diffract-elapsed'), '5.5s');
    assert.equal(text(el, '.diffract-eta'), 'about 6.0s–12.0s');
    // the bar does not move with the clock, only with work done, and never back
    assert.equal(width(el), 25);
    model.update({ fraction: 0.2 });
    assert.equal(width(el), 25);
    model.update({ fraction: 0.5, values_done: 120 });
    assert.equal(width(el), 50);
    // the end: no ETA, no "now", no Cancel, a full bar; the timer no longer moves elapsed
    model.update({ status: 'done', slices_done: 120, slices_stored: 120, values_done: 240, fraction: 1, chunks_done: 1, elapsed: 20.0, eta: null, eta_low: null, eta_high: null, outcome: 'done: 240 computed · 0 already stored (requested values)' });
    assert.equal(width(el), 100);
    assert.equal(text(el, '.diffract-counter'), '240 of 240 requested values');
    assert.ok((el.querySelector('.diffract-eta-item') as HTMLElement).hidden);
    assert.ok((el.querySelector('.diffract-now') as HTMLElement).hidden);
    assert.equal((el.querySelector('.diffract-cancel') as HTMLElement).style.display, 'none');
    await advance(clock, 3);
    assert.equal(text(el, '.diffract-elapsed'), '20.0s');
    cleanup();
  } finally {
    performance.now = real;
  }
});

test('a cancelled run reads cancelled with what was kept; its bar stops where the work stopped', () => {
  const model = new MockModel(running());
  const el = document.createElement('div');
  progress.render(renderProps(model, el));
  model.update({ status: 'cancelled', values_done: 113, fraction: 0.47, slices_done: 0, slices_stored: 0, outcome: 'cancelled: kept 113 computed value(s) · 127 not computed (run again to finish)' });
  const box = el.querySelector('.diffract-progress') as HTMLElement;
  assert.equal(box.dataset.status, 'cancelled');
  assert.ok(box.classList.contains('d-status-cancelled'));
  assert.equal(text(el, '.diffract-progress-status'), 'cancelled: finished values kept');
  assert.equal(width(el), 47);
  assert.equal(text(el, '.diffract-counter'), '113 of 240 requested values');
  assert.match(text(el, '.diffract-outcome')!, /^cancelled: kept 113/);
});

test('etaRange shows one number when both ends round alike', () => {
  assert.equal(etaRange(65, 65.2), 'about 1m 5s');
  assert.equal(etaRange(30, 90), 'about 30.0s–1m 30s');
});
