/**
 * The filter-builder widget, in anywidget's module form: `export default { render }` (no named
 * `render` export, which anywidget warns about). State: FilterBuilderState in wire.ts.
 */
import type { AnyWidget, RenderProps } from '@anywidget/types';

import { el } from '../shared/format';
import { nextSort, pageText } from '../shared/paging';
import { injectStyle } from '../shared/theme';
import type { FilterBuilderState, FilterHint } from '../shared/wire';

const COLUMNS: { key: FilterBuilderState['sort_by']; label: string }[] = [
  { key: 'model_id', label: 'model' },
  { key: 'name', label: 'name' },
  { key: 'type', label: 'type' },
  { key: 'shape', label: 'shape' }
];

/** One "did you mean" line: what matched nothing, and buttons for the closest names. */
function hintLine(hint: FilterHint, pick: (value: string) => void): HTMLElement {
  const what = hint.kind === 'name' ? `no slice is named "${hint.given}"` : `no slice has type "${hint.given}"`;
  const line = el('div', { class: 'd-hint diffract-hint', 'data-given': hint.given, 'data-kind': hint.kind }, what);
  if (!hint.suggestions.length) {
    line.append(hint.kind === 'name' ? ' (and no name is close; re:<regex> matches patterns)' : ' (and no type is close)');
    return line;
  }
  line.append(' · did you mean ');
  hint.suggestions.forEach((v, i) => {
    const b = el('button', { type: 'button', class: 'd-chip diffract-suggestion', 'data-value': v, title: `use "${v}" instead` }, v);
    b.addEventListener('click', () => pick(v));
    line.append(...(i ? [' ', b] : [b]));
  });
  line.append('?');
  return line;
}

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
  // "did you mean" right under the names (a type's too: it names what matched nothing)
  const hints = el('div', { class: 'd-hints diffract-hints' });
  box.append(el('div', { class: 'd-row' }, el('span', { class: 'd-label' }, 'names'), names), error, hints);

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

  const code = el('code', { class: 'diffract-code' });
  const copy = el('button', { type: 'button', class: 'diffract-copy-code', title: 'Copy this line to the clipboard' }, 'copy as code');
  const copied = el('span', { class: 'd-msg diffract-copied', role: 'status' });
  copy.addEventListener('click', () => {
    const text = model.get('code');
    Promise.resolve()
      .then(() => navigator.clipboard.writeText(text))
      .then(
      () => (copied.textContent = 'copied'),
      () => {
        // the browser refused (no focus, no permission): select it for Ctrl+C
        const range = document.createRange();
        range.selectNodeContents(code);
        window.getSelection()?.removeAllRanges();
        window.getSelection()?.addRange(range);
        copied.textContent = 'selected: press Ctrl+C to copy';
      }
    );
  });
  box.append(el('div', { class: 'd-row' }, el('span', { class: 'd-label' }, 'code'), code, copy, copied));

  const tbody = el('tbody');
  const headRow = el('tr');
  const heads = COLUMNS.map(c => {
    const th = el('th', { class: 'diffract-sortable', 'data-sort': c.key, title: `sort by ${c.label}` }, c.label);
    th.addEventListener('click', () => {
      const next = nextSort(model.get('sort_by'), model.get('sort_desc'), c.key);
      model.set('sort_by', next.sort_by as FilterBuilderState['sort_by']);
      model.set('sort_desc', next.sort_desc);
      model.save_changes();
    });
    headRow.append(th);
    return th;
  });
  const prev = el('button', { type: 'button', class: 'diffract-prev', title: 'previous page' }, '‹ prev');
  const next = el('button', { type: 'button', class: 'diffract-next', title: 'next page' }, 'next ›');
  const more = el('span', { class: 'd-msg diffract-page' });
  const turn = (by: number) => () => {
    model.set('page', Math.max(0, model.get('page') + by));
    model.save_changes();
  };
  prev.addEventListener('click', turn(-1));
  next.addEventListener('click', turn(1));
  box.append(
    el('div', { class: 'd-preview diffract-preview' }, el('table', {}, el('thead', {}, headRow), tbody)),
    el('div', { class: 'd-pager' }, prev, ' ', more, ' ', next)
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
    if (code.textContent !== model.get('code')) {
      code.textContent = model.get('code');
      copied.textContent = '';
    }
    hints.replaceChildren(
      ...(err ? [] : model.get('hints')).map(hint =>
        hintLine(hint, value => model.send({ type: 'suggest', kind: hint.kind, given: hint.given, value }))
      )
    );
    const rows = model.get('preview');
    tbody.replaceChildren(
      ...rows.map(r => el('tr', { 'data-uid': r.uid }, el('td', {}, r.model_id), el('td', {}, r.name), el('td', {}, r.type), el('td', {}, r.shape)))
    );
    const by = model.get('sort_by');
    const desc = model.get('sort_desc');
    COLUMNS.forEach((c, i) => {
      const on = by === c.key;
      heads[i].textContent = c.label + (on ? (desc ? ' ▾' : ' ▴') : '');
      heads[i].setAttribute('aria-sort', on ? (desc ? 'descending' : 'ascending') : 'none');
    });
    const n = model.get('count');
    const page = model.get('page');
    const limit = Math.max(1, model.get('preview_limit'));
    more.textContent = pageText(page, rows.length, limit, n);
    prev.disabled = page <= 0;
    next.disabled = (page + 1) * limit >= n;
    prev.hidden = next.hidden = n <= limit;
  };
  update();
  const keys: (keyof FilterBuilderState)[] = [
    'available_models',
    'available_types',
    'model_ids',
    'names',
    'param_types',
    'uids',
    'error',
    'count',
    'total',
    'preview',
    'filter_json',
    'sort_by',
    'sort_desc',
    'page',
    'hints',
    'code'
  ];
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
