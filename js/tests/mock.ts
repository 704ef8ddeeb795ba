/** A mock anywidget model and a DOM (jsdom) for testing the widget modules in Node. */
import type { AnyModel, RenderProps } from '@anywidget/types';
import { JSDOM } from 'jsdom';

export function setupDom(): void {
  const dom = new JSDOM('<!doctype html><html><body></body></html>');
  const g = globalThis as any;
  g.window = dom.window;
  g.document = dom.window.document;
  g.HTMLElement = dom.window.HTMLElement;
  g.Node = dom.window.Node;
  g.getComputedStyle = dom.window.getComputedStyle.bind(dom.window);
}

type Handler = (...args: any[]) => void;

/** anywidget's `AnyModel`, in memory: `set` notifies at once, `save_changes` records a batch. */
export class MockModel<S extends Record<string, any>> implements AnyModel<S> {
  private listeners = new Map<string, Set<Handler>>();
  saved: Partial<S>[] = [];
  sent: unknown[] = [];
  private pending: Partial<S> = {};
  readonly widget_manager = {
    get_model: async (): Promise<never> => {
      throw new Error('the mock model has no widget manager');
    }
  };

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

  on(event: string, cb: Handler): void {
    if (!this.listeners.has(event)) {
      this.listeners.set(event, new Set());
    }
    this.listeners.get(event)!.add(cb);
  }

  off(event?: string | null, cb?: Handler | null): void {
    if (event && cb) {
      this.listeners.get(event)?.delete(cb);
    } else if (event) {
      this.listeners.delete(event);
    } else {
      this.listeners.clear();
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

/** The props anywidget passes to `render`. */
export function renderProps<S extends Record<string, any>>(model: MockModel<S>, el: HTMLElement): RenderProps<S> {
  return {
    model,
    el,
    signal: new AbortController().signal,
    host: {
      getWidget: async () => {
        throw new Error('no host in the mock');
      },
      getModel: async () => {
        throw new Error('no host in the mock');
      }
    },
    experimental: {
      invoke: async () => {
        throw new Error('no invoke in the mock');
      }
    }
  };
}
