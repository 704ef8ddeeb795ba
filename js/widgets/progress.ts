/**
 * The progress widget of a chunked computation, in anywidget's module form:
 * `export default { render }`. State: ProgressState in wire.ts.
 *
 * While the run goes on the elapsed time (and the ETA, counted down) tick every second between
 * the kernel's updates, and the bar shows the share of the run's time spent (elapsed over
 * elapsed + ETA, never going back) once the engine gives an ETA, else the slices done; once it has ended the widget shows how (done, cancelled, failed, or
 * nothing to compute), the counts of its report, and the failures in an expandable list, with
 * no Cancel button and no "now" line.
 */
import type { AnyWidget, RenderProps } from '@anywidget/types';

import { el, fmtSeconds } from '../shared/format';
import { injectStyle } from '../shared/theme';
import type { ProgressFailure, ProgressState } from '../shared/wire';

const LABELS: Record<string, string> = {
  waiting: 'waiting',
  running: 'running',
  cancelling: 'cancelling…',
  cancelled: 'cancelled (finished values kept)',
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
  const chunks = el('b', { class: 'diffract-chunks' });
  const slices = el('b', { class: 'diffract-slices' });
  const calls = el('b', { class: 'diffract-kernel-calls' });
  const current = el('b', { class: 'diffract-current' });
  const elapsed = el('b', { class: 'diffract-elapsed' });
  const eta = el('b', { class: 'diffract-eta' });
  const failures = el('b', { class: 'diffract-failures' });
  const nowItem = el('span', { class: 'diffract-now' }, 'now ', current);
  const etaItem = el('span', { class: 'diffract-eta-item' }, 'ETA ', eta);
  box.append(
    el('div', { class: 'd-row' }, bar),
    el(
      'div',
      { class: 'd-stats' },
      el('span', {}, 'chunks ', chunks),
      el('span', {}, 'slices ', slices),
      el('span', {}, 'kernel calls ', calls),
      nowItem,
      el('span', {}, 'elapsed ', elapsed),
      etaItem,
      el('span', {}, 'failures ', failures)
    )
  );
  const outcome = el('div', { class: 'd-outcome diffract-outcome' });
  const failBox = el('div', {});
  const msg = el('div', { class: 'd-msg diffract-message' });
  box.append(outcome, failBox, msg);

  // the kernel's elapsed/eta and when they arrived: the display ticks from there
  let since = performance.now();
  let shownFailures = '';
  let shownPct = 0;
  const setBar = (pct: number) => {
    fill.style.width = `${pct.toFixed(1)}%`;
    bar.setAttribute('aria-valuenow', pct.toFixed(0));
  };
  const tick = (fromTimer = true) => {
    const st = model.get('status');
    const extra = ACTIVE.has(st) && st !== 'waiting' ? (performance.now() - since) / 1000 : 0;
    const spent = model.get('elapsed') + extra;
    elapsed.textContent = fmtSeconds(spent);
    const e = model.get('eta');
    const left = e != null ? Math.max(e - extra, 0) : null;
    eta.textContent = st === 'running' && left != null ? fmtSeconds(left) : '–';
    if (st === 'running' && e != null) {
      // the share of the run's time spent (the kernel's figures, moved on by this clock
      // between its messages): moves every second, never back
      const s = fromTimer ? spent : model.get('elapsed');
      const l = fromTimer ? (left as number) : e;
      shownPct = s + l > 0 ? Math.min(Math.max(shownPct, (100 * s) / (s + l)), 99.9) : shownPct;
      setBar(shownPct);
    }
  };
  const update = () => {
    const st = model.get('status');
    const active = ACTIVE.has(st);
    box.className = `diffract-w diffract-progress d-status-${st}`;
    box.dataset.status = st;
    const fields = model.get('fields').join(', ');
    title.textContent = active ? `computing ${fields}` : fields;
    status.textContent = LABELS[st] ?? st;
    const ct = model.get('chunks_total');
    const cd = model.get('chunks_done');
    const sd = model.get('slices_done');
    const stot = model.get('slices_total');
    const nothing = st === 'done' && stot === 0;
    const pct = stot > 0 ? (100 * sd) / stot : ct > 0 ? (100 * cd) / ct : st === 'done' ? 100 : 0;
    if (!active || pct > shownPct) {
      shownPct = st === 'done' ? 100 : pct;
    }
    setBar(shownPct);
    chunks.textContent = `${cd}/${ct}`;
    const stored = model.get('slices_stored');
    slices.textContent = active && sd > stored ? `${sd}/${stot} (${stored} stored)` : `${sd}/${stot}`;
    calls.textContent = String(model.get('kernel_calls'));
    const f = model.get('field');
    const p = model.get('param');
    current.textContent = f ? `${f}${p ? ' @ ' + p : ''}` : '–';
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
    tick(false);
  };
  const onTime = () => {
    since = performance.now();
    update();
  };
  update();
  const timer = setInterval(() => tick(), 1000);
  // under Node (the unit tests) a pending interval would keep the process alive
  (timer as unknown as { unref?: () => void }).unref?.();
  const keys: (keyof ProgressState)[] = ['status', 'chunks_done', 'chunks_total', 'slices_done', 'slices_total', 'slices_stored', 'kernel_calls', 'field', 'param', 'failures', 'failure_list', 'outcome', 'message', 'cancellable', 'cancel_requested', 'fields'];
  for (const k of keys) {
    model.on(`change:${k}`, update);
  }
  model.on('change:elapsed', onTime);
  model.on('change:eta', onTime);
  return () => {
    clearInterval(timer);
    for (const k of keys) {
      model.off(`change:${k}`, update);
    }
    model.off('change:elapsed', onTime);
    model.off('change:eta', onTime);
  };
}

export default { render } satisfies AnyWidget<ProgressState>;
