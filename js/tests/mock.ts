/** A mock anywidget model and a DOM (jsdom) for testing the widget modules in Node. */
import { JSDOM } from 'jsdom';

export function setupDom(): void {
  const dom = new JSDOM('<!doctype html><html><body></body></html>');
  const g = globalThis as any;
  g.window = dom.window;
  g.document = dom.window.document;
  g.HTMLElement = dom.window.HTMLElement;
  g.Node = dom.window.Node;
}

export class MockModel<S extends Record<string, any>> {
  private listeners = new Map<string, Set<() => void>>();
  saved: Partial<S>[] = [];
  sent: unknown[] = [];
  private pending: Partial<S> = {};

  constructor(public state: S) {}

  get<K extends keyof S>(key: K): S[K] {
    return this.state[key];
  }

  set<K extends keyof S>(key: K, value: S[K]): void {
    this.state[key] = value;
    this.pending[key] = value;
    this.emit(`change:${String(key)}`);
  }

  save_changes(): void {
    this.saved.push(this.pending);
    this.pending = {};
  }

  on(event: string, cb: () => void): void {
    if (!this.listeners.has(event)) {
      this.listeners.set(event, new Set());
    }
    this.listeners.get(event)!.add(cb);
  }

  off(event?: string | null, cb?: (() => void) | null): void {
    if (event && cb) {
      this.listeners.get(event)?.delete(cb);
    }
  }

  send(content: unknown): void {
    this.sent.push(content);
  }

  /** What the kernel does: set traits and notify. */
  update(values: Partial<S>): void {
    for (const [k, v] of Object.entries(values)) {
      (this.state as any)[k] = v;
      this.emit(`change:${k}`);
    }
  }

  listenerCount(): number {
    let n = 0;
    for (const s of this.listeners.values()) {
      n += s.size;
    }
    return n;
  }

  private emit(event: string): void {
    for (const cb of this.listeners.get(event) ?? []) {
      cb();
    }
  }
}
