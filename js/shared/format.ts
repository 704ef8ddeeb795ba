/** Small formatting helpers shared by the widgets and the sidebar. */

export function fmtSeconds(s: number | null | undefined): string {
  if (s === null || s === undefined || !isFinite(s)) {
    return '–';
  }
  if (s < 60) {
    return `${s.toFixed(1)}s`;
  }
  const m = Math.floor(s / 60);
  const r = Math.round(s - m * 60);
  if (m < 60) {
    return `${m}m ${r}s`;
  }
  return `${Math.floor(m / 60)}h ${m % 60}m`;
}

/**
 * Text for a Plotly string (hover text, titles, legend): Plotly reads those as a small HTML
 * subset (<b>, <br>, <a href>), and model ids and layer names come from users and checkpoint
 * files, so &, < and > are escaped and shown as typed.
 */
export function plotText(value: unknown): string {
  return String(value).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

export function fmtTime(epochSeconds: number | null | undefined): string {
  if (!epochSeconds) {
    return '–';
  }
  const d = new Date(epochSeconds * 1000);
  return d.toLocaleString();
}

/** A table cell's time: the time of day for today, else the date (the tooltip has both). */
export function fmtShortTime(epochSeconds: number | null | undefined, now: Date = new Date()): string {
  if (!epochSeconds) {
    return '–';
  }
  const d = new Date(epochSeconds * 1000);
  return d.toDateString() === now.toDateString() ? d.toLocaleTimeString() : d.toLocaleDateString();
}

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') {
      node.className = v;
    } else {
      node.setAttribute(k, v);
    }
  }
  for (const c of children) {
    node.append(typeof c === 'string' ? document.createTextNode(c) : c);
  }
  return node;
}
