/**
 * The progress widget of a chunked computation, in anywidget's module form:
 * `export default { render }`. State: ProgressState in wire.ts.
 */
import type { AnyWidget, RenderProps } from '@anywidget/types';

import { el, fmtSeconds } from '../shared/format';
import { injectStyle } from '../shared/theme';
import type { ProgressState } from '../shared/wire';

const LABELS: Record<string, string> = {
  waiting: 'waiting',
  running: 'running',
  cancelling: 'cancelling…',
  cancelled: 'cancelled (finished values kept)',
  done: 'done',
  error: 'failed'
};

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
  const current = el('b', { class: 'diffract-current' });
  const elapsed = el('b', { class: 'diffract-elapsed' });
  const eta = el('b', { class: 'diffract-eta' });
  const failures = el('b', { class: 'diffract-failures' });
  box.append(
    el('div', { class: 'd-row' }, bar),
    el(
      'div',
      { class: 'd-stats' },
      el('span', {}, 'chunks ', chunks),
      el('span', {}, 'slices ', slices),
      el('span', {}, 'now ', current),
      el('span', {}, 'elapsed ', elapsed),
      el('span', {}, 'ETA ', eta),
      el('span', {}, 'failures ', failures)
    )
  );
  const msg = el('div', { class: 'd-msg diffract-message' });
  box.append(msg);

  const update = () => {
    const st = model.get('status');
    box.className = `diffract-w diffract-progress d-status-${st}`;
    box.dataset.status = st;
    title.textContent = `computing ${model.get('fields').join(', ')}`;
    status.textContent = LABELS[st] ?? st;
    const ct = model.get('chunks_total');
    const cd = model.get('chunks_done');
    const sd = model.get('slices_done');
    const stot = model.get('slices_total');
    const pct = stot > 0 ? (100 * sd) / stot : ct > 0 ? (100 * cd) / ct : st === 'done' ? 100 : 0;
    fill.style.width = `${pct.toFixed(1)}%`;
    bar.setAttribute('aria-valuenow', pct.toFixed(0));
    chunks.textContent = `${cd}/${ct}`;
    slices.textContent = `${sd}/${stot}`;
    const f = model.get('field');
    const p = model.get('param');
    current.textContent = f ? `${f}${p ? ' @ ' + p : ''}` : '–';
    elapsed.textContent = fmtSeconds(model.get('elapsed'));
    eta.textContent = st === 'running' ? fmtSeconds(model.get('eta')) : '–';
    failures.textContent = String(model.get('failures'));
    failures.style.color = model.get('failures') > 0 ? 'var(--jp-error-color1, #c62828)' : '';
    const active = st === 'running' || st === 'waiting';
    cancel.disabled = !active || !model.get('cancellable') || model.get('cancel_requested');
    cancel.style.display = model.get('cancellable') || active ? '' : 'none';
    msg.textContent = model.get('message');
  };
  update();
  const keys: (keyof ProgressState)[] = ['status', 'chunks_done', 'chunks_total', 'slices_done', 'slices_total', 'field', 'param', 'elapsed', 'eta', 'failures', 'message', 'cancellable', 'cancel_requested', 'fields'];
  for (const k of keys) {
    model.on(`change:${k}`, update);
  }
  return () => {
    for (const k of keys) {
      model.off(`change:${k}`, update);
    }
  };
}

export default { render } satisfies AnyWidget<ProgressState>;
