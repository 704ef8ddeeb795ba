/** The code of the cell "Open in notebook" inserts (plain strings: tested in Node). */

/** `to` relative to the folder `from` (both relative to the server root, POSIX). */
export function relativePath(from: string, to: string): string {
  const a = from.split('/').filter(p => p && p !== '.');
  const b = to.split('/').filter(p => p && p !== '.');
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) {
    i++;
  }
  const parts = [...Array(a.length - i).fill('..'), ...b.slice(i)];
  return parts.join('/') || '.';
}

/** Whether `name` occurs as a Python identifier in `source`. */
function mentions(source: string, name: string): boolean {
  return new RegExp(`(^|[^A-Za-z0-9_])${name}($|[^A-Za-z0-9_])`).test(source);
}

/**
 * A suffix that makes `runs_session` / `runs_scope` names no cell of the notebook mentions:
 * '' first, then '_2', '_3'... The plugin cannot see the kernel's variables reliably, so the names
 * are ones a user is unlikely to have chosen, and never `session` or `scope`.
 */
export function freshSuffix(sources: readonly string[], bases: readonly string[] = ['runs_session', 'runs_scope']): string {
  const text = sources.join('\n');
  for (let n = 1; ; n++) {
    const suffix = n === 1 ? '' : `_${n}`;
    if (!bases.some(b => mentions(text, b + suffix))) {
      return suffix;
    }
  }
}

/** What the inserted cell opens: the store, and optionally the model and field shown. */
export interface OpenTarget {
  store: string;
  model?: string;
  field?: string;
}

/**
 * The code of the cell "Open in notebook" inserts: a read-only Session of the store under a
 * fresh name, the selected model's scope and, when a field is selected, a FieldPanel of it.
 *
 * @param target the store (relative to the server root), model and field.
 * @param notebookDir the notebook's folder (relative to the server root).
 * @param sources the notebook's cell sources (the names in them are not reused).
 */
export function openStoreCode(target: OpenTarget, notebookDir: string, sources: readonly string[] = []): string {
  const rel = relativePath(notebookDir, target.store);
  const sfx = freshSuffix(sources);
  const s = `runs_session${sfx}`;
  const lines = [
    'from diffract import Session',
    ...(target.field ? ['from diffract.widgets import FieldPanel'] : []),
    '',
    '# opened from the "Weight runs" sidebar; use readonly=False to compute into this store',
    `${s} = Session(path=${JSON.stringify(rel)}, readonly=True)`
  ];
  let v = s;
  if (target.model) {
    v = `runs_scope${sfx}`;
    lines.push(`${v} = ${s}.filter(model_ids=[${JSON.stringify(target.model)}])`);
  }
  lines.push(`print(${v}.models.ids(), len(${v}), "slices; fields:", ${v}.results.fields())`);
  if (target.field) {
    lines.push(`FieldPanel(${v}, ${JSON.stringify(target.field)})`);
  }
  return lines.join('\n');
}
