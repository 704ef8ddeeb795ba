/**
 * The progress widget of a chunked computation, in anywidget's module form:
 * `export default { render }`. State: ProgressState in wire.ts.
 *
 * It counts what the user asked for: the fields and slices requested (the title), the requested
 * values made out of those planned (the one counter), and a bar that is the share of the planned
 * work done as the kernel counts it (never going back). The time left is a range counted down
 * every second between the kernel's updates, and "estimating…" until enough of the run is
 * measured. Kernel names, slices complete, kernel steps and chunks are in a "details" view. Once
 * the run has ended the widget shows how (done, cancelled with what was kept and a grey bar
 * where the work stopped, failed, or nothing to compute), the counts of its report, and the
 * failures in an expandable list, with no Cancel button and no "now" line.
 */
import type { AnyWidget, RenderProps } from '@anywidget/types';

import { el, fmtSeconds } from '../shared/format';
import { injectStyle } from '../shared/theme';
import type { ProgressFailure, ProgressState } from '../shared/wire';

const LABELS: Record<string, string> = {
  waiting: 'waiting',
  running: 'running',
  cancelling: 'cancelling…',
  cancelled: 'cancelled: finished values kept',
  done: 'done',
  error: 'failed'
};

const ACTIVE = new Set(['waiting', 'running', 'cancelling']);

/** The expandable list of failures: slice, kernel (field) and message. */
function failureList(rows: ProgressFailure[], total: number): HTMLElement {
  const table = el('table', {}, el('tr', {}, el('th', {}, 'slice'), el('th', {}, 'kernel'), el('th', {}, 'message')));
  for (const f of rows) {
    const kernel = f.kernel && f.kernel !== f.field ? `${f.kernel} (${f.field})` : f.field;
    table.append(el('tr', { class: 'diffract-failure' }, el('td', { title: f.uid }, `${f.model_id}:${f.slice}`), el('td', {}, kernel), el('td', {}, f.error)));
  }
  const more = total > rows.length ? ` (the first ${rows.length}; run.report.failures has all)` : '';
  return el('details', { class: 'd-failures diffract-failure-list' }, el('summary', {}, `${total} failure${total === 1 ? '' : 's'}${more}`), table);
}

type Model = RenderProps<ProgressState>['model'];

/** What was asked for: "pl_alpha, stable_rank on 200 slices" (a count past four fields). */
function request(model: Model): string {
  const fields = model.get('fields');
  const names = fields.length <= 4 ? fields.join(', ') : `${fields.length} fields`;
  const n = model.get('slices_total');
  return n > 0 ? `${names} on ${n} slice${n === 1 ? '' : 's'}` : names;
}

/** The one counter: requested values made of those planned (slices when not counted). */
function counterText(model: Model): string {
  const vt = model.get('values_total');
  if (vt > 0) {
    return `${model.get('values_done')} of ${vt} requested values`;
  }
  return `${model.get('slices_done')} of ${model.get('slices_total')} slices`;
}

/** "about 3m 10s–4m 50s" (one number when the two round to the same). */
export function etaRange(lo: number, hi: number): string {
  const a = fmtSeconds(lo);
  const b = fmtSeconds(hi);
  return a === b ? `about ${a}` : `about ${a}–${b}`;
}

function render({ model, el: root }: RenderProps<ProgressState>): () => void {
  injectStyle(root);
  const box = el('div', { class: 'diffract-w diffract-progress' });
  root.appendChild(box);
  const title = el('span', { class: 'diffract-progress-title' });
  const status = el('span', { class: 'diffract-progress-status' });
  const cancel = el('button', { type: 'button', class: 'd-danger diffract-cancel' }, 'Cancel');
  cancel.addEventListener('click', () => {
    model.set('cancel_requested', true);
    model.save_changes();
  });
  box.append(el('div', { class: 'd-head' }, title, el('span', {}, status, ' ', cancel)));
  const fill = el('div', { style: 'width:0%' });
  const bar = el('div', { class: 'd-bar', role: 'progressbar', 'aria-valuemin': '0', 'aria-valuemax': '100' }, fill);
  const pctText = el('span', { class: 'diffract-pct' });
  const counter = el('b', { class: 'diffract-counter' });
  const current = el('b', { class: 'diffract-current' });
  const elapsed = el('b', { class: 'diffract-elapsed' });
  const eta = el('b', { class: 'diffract-eta' });
  const failures = el('b', { class: 'diffract-failures' });
  const nowItem = el('span', { class: 'diffract-now' }, 'now ', current);
  const etaItem = el('span', { class: 'diffract-eta-item' }, 'left ', eta);
  // the engine's own counts: chunks, slices complete and stored, kernel steps, the kernel
  const chunks = el('b', { class: 'diffract-chunks' });
  const slices = el('b', { class: 'diffract-slices' });
  const calls = el('b', { class: 'diffract-kernel-calls' });
  const detailText = el('span', { class: 'diffract-detail-text' });
  const detail = el(
    'details',
    { class: 'd-detail diffract-detail' },
    el('summary', {}, 'details'),
    el('div', { class: 'd-stats' }, el('span', {}, 'slices complete ', slices), el('span', {}, 'kernel steps ', calls), el('span', {}, 'chunks ', chunks), detailText)
  );
  box.append(
    el('div', { class: 'd-row' }, bar, pctText),
    el('div', { class: 'd-stats' }, counter, nowItem, el('span', {}, 'elapsed ', elapsed), etaItem, el('span', {}, 'failures ', failures)),
    detail
  );
  const outcome = el('div', { class: 'd-outcome diffract-outcome' });
  const failBox = el('div', {});
  const msg = el('div', { class: 'd-msg diffract-message' });
  box.append(outcome, failBox, msg);

  // the kernel's elapsed/ETA range and when they arrived: the display ticks from there
  let since = performance.now();
  let shownFailures = '';
  let shownPct = 0;
  const setBar = (pct: number) => {
    fill.style.width = `${pct.toFixed(1)}%`;
    bar.setAttribute('aria-valuenow', pct.toFixed(0));
    pctText.textContent = `${Math.floor(pct)}%`;
  };
  const tick = () => {
    const st = model.get('status');
    const extra = ACTIVE.has(st) && st !== 'waiting' ? (performance.now() - since) / 1000 : 0;
    elapsed.textContent = fmtSeconds(model.get('elapsed') + extra);
    const lo = model.get('eta_low');
    const hi = model.get('eta_high');
    if (st !== 'running') {
      eta.textContent = '–';
    } else if (lo == null || hi == null) {
      // too little of the run is measured for a number that means something
      eta.textContent = 'estimating…';
    } else {
      eta.textContent = etaRange(Math.max(lo - extra, 0), Math.max(hi - extra, 0));
    }
  };
  const update = () => {
    const st = model.get('status');
    const active = ACTIVE.has(st);
    box.className = `diffract-w diffract-progress d-status-${st}`;
    box.dataset.status = st;
    title.textContent = active ? `computing ${request(model)}` : request(model);
    status.textContent = LABELS[st] ?? st;
    const ct = model.get('chunks_total');
    const cd = model.get('chunks_done');
    const sd = model.get('slices_done');
    const stot = model.get('slices_total');
    const nothing = st === 'done' && stot === 0;
    // the share of the work done, as the kernel counts it; never back while it runs
    const frac = Math.min(Math.max(model.get('fraction') ?? 0, 0), 1);
    const pct = st === 'done' ? 100 : 100 * frac;
    shownPct = active ? Math.max(shownPct, pct) : pct;
    setBar(shownPct);
    bar.setAttribute('aria-valuetext', counterText(model));
    counter.textContent = counterText(model);
    chunks.textContent = `${cd}/${ct}`;
    const stored = model.get('slices_stored');
    slices.textContent = active && sd > stored ? `${sd}/${stot} (${stored} stored)` : `${sd}/${stot}`;
    calls.textContent = String(model.get('kernel_calls'));
    detailText.textContent = model.get('detail') ?? '';
    const f = model.get('field');
    const p = model.get('param');
    current.textContent = p ? `${f || 'shared step'} on ${p}` : f || '–';
    nowItem.hidden = !active;
    etaItem.hidden = !active;
    const nf = model.get('failures');
    failures.textContent = String(nf);
    failures.style.color = nf > 0 ? 'var(--jp-error-color1, #c62828)' : '';
    cancel.disabled = !active || !model.get('cancellable') || model.get('cancel_requested');
    cancel.hidden = !active || (!model.get('cancellable') && st !== 'waiting' && st !== 'running');
    cancel.style.display = cancel.hidden ? 'none' : '';
    outcome.textContent = nothing && !model.get('outcome') ? 'nothing to compute: every requested value is stored' : model.get('outcome');
    outcome.hidden = !outcome.textContent;
    const rows = model.get('failure_list') ?? [];
    const key = JSON.stringify([rows, nf]);
    if (key !== shownFailures) {
      shownFailures = key;
      failBox.replaceChildren(...(rows.length ? [failureList(rows, nf)] : []));
    }
    msg.textContent = model.get('message');
    tick();
  };
  const onTime = () => {
    since = performance.now();
    update();
  };
  update();
  const timer = setInterval(() => tick(), 1000);
  // under Node (the unit tests) a pending interval would keep the process alive
  (timer as unknown as { unref?: () => void }).unref?.();
  const keys: (keyof ProgressState)[] = ['status', 'chunks_done', 'chunks_total', 'slices_done', 'slices_total', 'slices_stored', 'kernel_calls', 'values_done', 'values_total', 'fraction', 'detail', 'field', 'param', 'failures', 'failure_list', 'outcome', 'message', 'cancellable', 'cancel_requested', 'fields'];
  for (const k of keys) {
    model.on(`change:${k}`, update);
  }
  const timed: (keyof ProgressState)[] = ['elapsed', 'eta', 'eta_low', 'eta_high'];
  for (const k of timed) {
    model.on(`change:${k}`, onTime);
  }
  return () => {
    clearInterval(timer);
    for (const k of keys) {
      model.off(`change:${k}`, update);
    }
    for (const k of timed) {
      model.off(`change:${k}`, onTime);
    }
  };
}

export default { render } satisfies AnyWidget<ProgressState>;
