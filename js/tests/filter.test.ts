/** The filter builder's table: sort clicks, pages, "did you mean" buttons and "copy as code". */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { MockModel, renderProps, setupDom } from './mock';
setupDom();

import { nextSort, pageText } from '../shared/paging';
import type { FilterBuilderState, PreviewRow } from '../shared/wire';
import filter from '../widgets/filter';

function rows(n: number, from = 0): PreviewRow[] {
  return Array.from({ length: n }, (_, i) => ({ model_id: 'm1', name: `layers.${from + i}.weight`, type: 'dense', shape: '4×4', uid: `u${from + i}` }));
}

function state(extra: Partial<FilterBuilderState> = {}): FilterBuilderState {
  return {
    available_models: ['m1'],
    available_types: ['dense', 'bias'],
    model_ids: [],
    names: '',
    param_types: [],
    uids: '',
    error: '',
    count: 120,
    total: 120,
    preview: rows(50),
    preview_limit: 50,
    filter_json: '[]',
    sort_by: '',
    sort_desc: false,
    page: 0,
    hints: [],
    code: 'session.filter()',
    ...extra
  };
}

test('sort and page helpers', () => {
  assert.deepEqual(nextSort('', false, 'name'), { sort_by: 'name', sort_desc: false });
  assert.deepEqual(nextSort('name', false, 'name'), { sort_by: 'name', sort_desc: true });
  assert.deepEqual(nextSort('name', true, 'name'), { sort_by: '', sort_desc: false });
  assert.deepEqual(nextSort('name', true, 'type'), { sort_by: 'type', sort_desc: false });
  assert.equal(pageText(1, 50, 50, 120), 'rows 51–100 of 120');
  assert.equal(pageText(2, 20, 50, 120), 'rows 101–120 of 120');
  assert.equal(pageText(0, 0, 50, 0), '');
});

test('a header click asks the kernel to sort; the sorted column shows its direction', () => {
  const model = new MockModel(state());
  const el = document.createElement('div');
  filter.render(renderProps(model, el));
  const th = () => el.querySelector<HTMLElement>('th[data-sort="name"]')!;
  th().click();
  assert.equal(model.state.sort_by, 'name');
  assert.equal(model.state.sort_desc, false);
  assert.equal(th().textContent, 'name ▴');
  assert.equal(th().getAttribute('aria-sort'), 'ascending');
  th().click();
  assert.equal(model.state.sort_desc, true);
  assert.equal(th().textContent, 'name ▾');
  assert.ok(model.saved.some(s => s.sort_by === 'name'));
});

test('pages: next and prev ask for a page; the text says which rows; the ends are disabled', () => {
  const model = new MockModel(state());
  const el = document.createElement('div');
  filter.render(renderProps(model, el));
  const prev = el.querySelector<HTMLButtonElement>('.diffract-prev')!;
  const next = el.querySelector<HTMLButtonElement>('.diffract-next')!;
  assert.equal(el.querySelector('.diffract-page')!.textContent, 'rows 1–50 of 120');
  assert.ok(prev.disabled && !next.disabled);
  next.click();
  assert.equal(model.state.page, 1);
  model.update({ preview: rows(20, 100), page: 2 }); // the kernel's answer for the last page
  assert.equal(el.querySelector('.diffract-page')!.textContent, 'rows 101–120 of 120');
  assert.ok(!prev.disabled && next.disabled);
  assert.equal(el.querySelectorAll('.diffract-preview tbody tr').length, 20);
  model.update({ count: 10, preview: rows(10), page: 0 });
  assert.ok(prev.hidden && next.hidden); // one page: no pager buttons
});

test('did you mean: a button per suggestion sends it; nothing close says so', () => {
  const model = new MockModel(
    state({
      count: 0,
      preview: [],
      hints: [
        { kind: 'name', given: 'layers.1.wieght', suggestions: ['layers.1.weight', 'layers.3.weight'] },
        { kind: 'type', given: 'zzz', suggestions: [] }
      ]
    })
  );
  const el = document.createElement('div');
  filter.render(renderProps(model, el));
  const lines = el.querySelectorAll<HTMLElement>('.diffract-hint');
  assert.equal(lines.length, 2);
  assert.match(lines[0].textContent!, /no slice is named "layers.1.wieght" · did you mean layers.1.weight layers.3.weight\?/);
  assert.match(lines[1].textContent!, /no slice has type "zzz" \(and no type is close\)/);
  lines[0].querySelector<HTMLElement>('.diffract-suggestion[data-value="layers.1.weight"]')!.click();
  assert.deepEqual(model.sent, [{ type: 'suggest', kind: 'name', given: 'layers.1.wieght', value: 'layers.1.weight' }]);
  model.update({ hints: [] });
  assert.equal(el.querySelectorAll('.diffract-hint').length, 0);
});

test('copy as code copies the .filter(...) line (or selects it when the clipboard is refused)', async () => {
  const model = new MockModel(state({ code: "session.filter(param_types=['dense'])" }));
  const el = document.createElement('div');
  document.body.replaceChildren(el);
  filter.render(renderProps(model, el));
  assert.equal(el.querySelector('.diffract-code')!.textContent, "session.filter(param_types=['dense'])");
  const written: string[] = [];
  const setClipboard = (clipboard: unknown) =>
    Object.defineProperty(globalThis, 'navigator', { value: { clipboard }, configurable: true, writable: true });
  setClipboard({ writeText: async (t: string) => void written.push(t) });
  el.querySelector<HTMLElement>('.diffract-copy-code')!.click();
  await new Promise(r => setTimeout(r, 0));
  assert.deepEqual(written, ["session.filter(param_types=['dense'])"]);
  assert.equal(el.querySelector('.diffract-copied')!.textContent, 'copied');
  setClipboard(undefined);
  (globalThis as any).window.getSelection = () => document.getSelection();
  el.querySelector<HTMLElement>('.diffract-copy-code')!.click();
  await new Promise(r => setTimeout(r, 0));
  assert.equal(el.querySelector('.diffract-copied')!.textContent, 'selected: press Ctrl+C to copy');
  model.update({ code: 'session.filter()' }); // a new line clears the note
  assert.equal(el.querySelector('.diffract-copied')!.textContent, '');
});
