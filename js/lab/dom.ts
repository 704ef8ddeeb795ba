/** The one DOM helper of the sidebar views. */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, cls = '', text = ''): HTMLElementTagNameMap[K] {
  const n = document.createElement(tag);
  if (cls) {
    n.className = cls;
  }
  if (text) {
    n.textContent = text;
  }
  return n;
}
