/** The progress view between kernel messages: elapsed and ETA tick on the browser's clock, the
 * bar follows the share of the run's time spent and never goes back, the "now" line carries
 * the kernel and its slices, and the end shows no ETA, no Cancel and a full bar. */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { MockModel, renderProps, setupDom } from './mock';
setupDom();

import type { ProgressState } from '../shared/wire';
import progress from '../widgets/progress';

const sleep = (ms: number) => new Promise(r => setTimeout(r, ms));

function running(): ProgressState {
  return {
    fields: ['pl_alpha'],
    status: 'running',
    chunks_done: 0,
    chunks_total: 1,
    slices_done: 0,
    slices_total: 120,
    slices_stored: 0,
    kernel_calls: 37,
    field: 'weights_spectrum',
    param: 'm1:layers.3.attn.q · 37/120 slices · kernel 1/4',
    elapsed: 3.5,
    eta: 10.5,
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

test('elapsed and ETA tick without kernel messages; the bar follows the time spent', async () => {
  const clock = { t: 1000 };
  const real = performance.now.bind(performance);
  performance.now = () => clock.t;
  try {
    const model = new MockModel(running());
    const el = document.createElement('div');
    const cleanup = progress.render(renderProps(model, el));
    assert.equal(el.querySelector('.diffract-elapsed')!.textContent, '3.5s');
    assert.equal(width(el), 25); // 3.5 s of 3.5 + 10.5
    assert.equal(el.querySelector('.diffract-current')!.textContent, 'weights_spectrum @ m1:layers.3.attn.q · 37/120 slices · kernel 1/4');
    await advance(clock, 2);
    // no message came: the browser's clock moved the elapsed time, the ETA and the bar
    assert.equal(el.querySelector('.diffract-elapsed')!.textContent, '5.5s');
    assert.equal(el.querySelector('.diffract-eta')!.textContent, '8.5s');
    assert.ok(Math.abs(width(el) - (100 * 5.5) / 14) < 0.1, String(width(el)));
    // a longer ETA from the kernel: the numbers say so, the bar does not go back
    const before = width(el);
    model.update({ elapsed: 6.0, eta: 30.0, kernel_calls: 40 });
    assert.equal(el.querySelector('.diffract-eta')!.textContent, '30.0s');
    assert.equal(width(el), before);
    assert.equal(el.querySelector('.diffract-kernel-calls')!.textContent, '40');
    // the end: no ETA, no "now", no Cancel, a full bar; the timer no longer moves elapsed
    model.update({ status: 'done', slices_done: 120, slices_stored: 120, chunks_done: 1, elapsed: 20.0, eta: null, outcome: 'done: 240 computed · 0 already stored (values)' });
    assert.equal(width(el), 100);
    assert.ok((el.querySelector('.diffract-eta-item') as HTMLElement).hidden);
    assert.ok((el.querySelector('.diffract-now') as HTMLElement).hidden);
    assert.equal((el.querySelector('.diffract-cancel') as HTMLElement).style.display, 'none');
    await advance(clock, 3);
    assert.equal(el.querySelector('.diffract-elapsed')!.textContent, '20.0s');
    cleanup();
  } finally {
    performance.now = real;
  }
});

test('before the engine gives an ETA the bar shows the slices done', () => {
  const model = new MockModel<ProgressState>({ ...running(), eta: null, slices_done: 30, slices_stored: 12 });
  const el = document.createElement('div');
  progress.render(renderProps(model, el));
  assert.equal(width(el), 25);
  assert.equal(el.querySelector('.diffract-eta')!.textContent, '–');
  assert.equal(el.querySelector('.diffract-slices')!.textContent, '30/120 (12 stored)');
});
