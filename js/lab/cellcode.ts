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

/** The code of the cell "Open in notebook" inserts. */
export function openStoreCode(storePath: string, notebookDir: string, modelId?: string): string {
  const rel = relativePath(notebookDir, storePath);
  const lines = [
    'from diffract import Session',
    '',
    '# opened from the "Weight runs" sidebar; use readonly=False to compute into this store',
    `session = Session(path=${JSON.stringify(rel)}, readonly=True)`
  ];
  if (modelId) {
    lines.push(`scope = session.filter(model_ids=[${JSON.stringify(modelId)}])`);
    lines.push('print(scope.models.ids(), len(scope), "slices; fields:", scope.results.fields())');
  } else {
    lines.push('print(session.models.ids(), len(session), "slices; fields:", session.results.fields())');
  }
  return lines.join('\n');
}
