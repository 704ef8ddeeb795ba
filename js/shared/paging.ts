/** The filter builder's table helpers: sort clicks and page text (plain functions: tested in Node). */

/** The next (column, descending) after a click on `key`: ascending, descending, then off. */
export function nextSort(by: string, desc: boolean, key: string): { sort_by: string; sort_desc: boolean } {
  if (by !== key) {
    return { sort_by: key, sort_desc: false };
  }
  return desc ? { sort_by: '', sort_desc: false } : { sort_by: key, sort_desc: true };
}

/** "rows 51–100 of 309" for a page of the preview. */
export function pageText(page: number, shown: number, limit: number, count: number): string {
  if (!count) {
    return '';
  }
  const first = page * limit + 1;
  return `rows ${first}–${first + shown - 1} of ${count}`;
}
