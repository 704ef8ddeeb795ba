/**
 * The filter-builder widget, in anywidget's module form: `export default { render }` (no named
 * `render` export, which anywidget warns about). State: FilterBuilderState in wire.ts.
 */
import type { AnyWidget, RenderProps } from '@anywidget/types';

import { el } from '../shared/format';
import { injectStyle } from '../shared/theme';
import type { FilterBuilderState } from '../shared/wire';

function debounce(fn: () => void, ms: number): () => void {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return () => {
    if (timer !== undefined) {
      clearTimeout(timer);
    }
    timer = setTimeout(fn, ms);
  };
}

function chip(label: string, on: boolean, cls: string, onClick: () => void): HTMLButtonElement {
  const b = el('button', { class: `d-chip ${cls}${on ? ' d-on' : ''}`, 'data-value': label, type: 'button' }, label);
  b.setAttribute('aria-pressed', String(on));
  b.addEventListener('click', onClick);
  return b;
}

function toggle(list: string[], value: string): string[] {
  return list.includes(value) ? list.filter(v => v !== value) : [...list, value];
}

function render({ model, el: root }: RenderProps<FilterBuilderState>): () => void {
  injectStyle(root);
  const box = el('div', { class: 'diffract-w diffract-filter' });
  root.appendChild(box);

  const count = el('span', { class: 'd-count diffract-count' });
  const refresh = el('button', { type: 'button', title: 'Re-read models and types from the store' }, '↻');
  refresh.addEventListener('click', () => model.send({ type: 'refresh' }));
  box.append(el('div', { class: 'd-head' }, el('span', {}, 'diffract filter'), el('span', {}, count, ' ', refresh)));

  const modelChips = el('div', { class: 'd-chips diffract-models' });
  box.append(el('div', { class: 'd-row' }, el('span', { class: 'd-label' }, 'models'), modelChips));

  const names = el('input', {
    type: 'text',
    class: 'diffract-names',
    placeholder: 'exact names, comma-separated (or one per line), or re:<regex> (full match)',
    spellcheck: 'false'
  });
  const error = el('div', { class: 'd-error diffract-error', role: 'alert' });
  box.append(el('div', { class: 'd-row' }, el('span', { class: 'd-label' }, 'names'), names), error);

  const typeChips = el('div', { class: 'd-chips diffract-types' });
  const custom = el('input', { type: 'text', class: 'diffract-custom-type', placeholder: 'custom type', style: 'flex:0;min-width:110px' });
  const addType = el('button', { type: 'button', class: 'diffract-add-type' }, '+ type');
  const addCustom = () => {
    const v = custom.value.trim().toLowerCase();
    if (!v) {
      return;
    }
    const types = model.get('param_types');
    if (!types.includes(v)) {
      model.set('param_types', [...types, v]);
    }
    const avail = model.get('available_types');
    if (!avail.includes(v)) {
      model.set('available_types', [...avail, v]);
    }
    model.save_changes();
    custom.value = '';
  };
  addType.addEventListener('click', addCustom);
  custom.addEventListener('keydown', e => {
    if (e.key === 'Enter') {
      addCustom();
    }
  });
  box.append(el('div', { class: 'd-row' }, el('span', { class: 'd-label' }, 'types'), typeChips, custom, addType));

  const uids = el('textarea', { class: 'diffract-uids', rows: '1', placeholder: 'paste slice uids (space, comma or newline separated)' });
  box.append(el('div', { class: 'd-row' }, el('span', { class: 'd-label' }, 'uids'), uids));

  const json = el('code', { class: 'diffract-json' });
  box.append(el('div', { class: 'd-row' }, el('span', { class: 'd-label' }, 'filter'), json));

  const tbody = el('tbody');
  const more = el('div', { class: 'd-msg' });
  box.append(
    el(
      'div',
      { class: 'd-preview diffract-preview' },
      el('table', {}, el('thead', {}, el('tr', {}, el('th', {}, 'model'), el('th', {}, 'name'), el('th', {}, 'type'), el('th', {}, 'shape'))), tbody)
    ),
    more
  );

  const sendNames = debounce(() => {
    model.set('names', names.value);
    model.save_changes();
  }, 200);
  names.addEventListener('input', sendNames);
  const sendUids = debounce(() => {
    model.set('uids', uids.value);
    model.save_changes();
  }, 300);
  uids.addEventListener('input', sendUids);

  const update = () => {
    const selected = model.get('model_ids');
    modelChips.replaceChildren(
      ...model.get('available_models').map(m =>
        chip(m, selected.includes(m), 'diffract-model-chip', () => {
          model.set('model_ids', toggle(model.get('model_ids'), m));
          model.save_changes();
        })
      )
    );
    if (!model.get('available_models').length) {
      modelChips.append(el('span', { class: 'd-msg' }, 'no models stored yet: session.models.add(model, "id")'));
    }
    const types = model.get('param_types');
    typeChips.replaceChildren(
      ...model.get('available_types').map(t =>
        chip(t, types.includes(t), 'diffract-type-chip', () => {
          model.set('param_types', toggle(model.get('param_types'), t));
          model.save_changes();
        })
      )
    );
    if (document.activeElement !== names && names.value !== model.get('names')) {
      names.value = model.get('names');
    }
    if (document.activeElement !== uids && uids.value !== model.get('uids')) {
      uids.value = model.get('uids');
    }
    const err = model.get('error');
    error.textContent = err;
    names.classList.toggle('d-invalid', !!err);
    count.textContent = err ? 'invalid filter' : `${model.get('count')} of ${model.get('total')} slices`;
    json.textContent = model.get('filter_json');
    const rows = model.get('preview');
    tbody.replaceChildren(
      ...rows.map(r => el('tr', {}, el('td', {}, r.model_id), el('td', {}, r.name), el('td', {}, r.type), el('td', {}, r.shape)))
    );
    const n = model.get('count');
    more.textContent = n > rows.length ? `showing ${rows.length} of ${n}` : '';
  };
  update();
  const keys: (keyof FilterBuilderState)[] = ['available_models', 'available_types', 'model_ids', 'names', 'param_types', 'uids', 'error', 'count', 'total', 'preview', 'filter_json'];
  for (const k of keys) {
    model.on(`change:${k}`, update);
  }
  return () => {
    for (const k of keys) {
      model.off(`change:${k}`, update);
    }
  };
}

export default { render } satisfies AnyWidget<FilterBuilderState>;
