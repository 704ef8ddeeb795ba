/**
 * Galata's `test`, plus a browser-console guard in every test: console errors, deprecation
 * warnings (anywidget's for a direct `render` export among them) and uncaught page errors fail
 * the test, with each message listed. Listening starts on the browser context, before JupyterLab
 * loads, so errors while the page starts up count too.
 *
 * Allowed noise is listed below, each with why it is unrelated to diffract; a test that causes
 * an error on purpose allows it itself with `consoleGuard.allow(pattern, why)`.
 */
import { expect, test as base } from '@jupyterlab/galata';
import type { ConsoleMessage } from '@playwright/test';

interface Allowed {
  pattern: RegExp;
  why: string;
}

/**
 * Known messages that say nothing about diffract-lab, each with its reason. Empty: a full run
 * logs none (Galata's deletion of the test folder, which the file browser then fails to list,
 * happens after the check; see the `context` fixture).
 */
const KNOWN_NOISE: Allowed[] = [];

interface Seen {
  kind: string;
  text: string;
  url: string;
}

export class ConsoleGuard {
  readonly seen: Seen[] = [];
  private readonly allowed: Allowed[] = [...KNOWN_NOISE];
  private closed = false;

  /** The test is over: what the page logs while fixtures tear down is not the test's. */
  close(): void {
    this.closed = true;
  }

  /** Let messages matching `pattern` (text or source URL) pass in this test, for the reason `why`. */
  allow(pattern: RegExp, why: string): void {
    if (!why.trim()) {
      throw new Error('consoleGuard.allow needs a reason');
    }
    this.allowed.push({ pattern, why });
  }

  onConsole(msg: ConsoleMessage): void {
    if (this.closed) {
      return;
    }
    const type = msg.type();
    const text = msg.text();
    const isError = type === 'error' || type === 'assert';
    const isDeprecation = (type === 'warning' || type === 'warn') && /deprecat/i.test(text);
    if (isError || isDeprecation) {
      this.seen.push({ kind: isError ? `console.${type}` : 'deprecation warning', text, url: msg.location().url ?? '' });
    }
  }

  onPageError(error: Error): void {
    if (this.closed) {
      return;
    }
    this.seen.push({ kind: 'page error', text: `${error.name}: ${error.message}\n${error.stack ?? ''}`, url: '' });
  }

  /** The messages no allow-list entry explains. */
  unexpected(): Seen[] {
    return this.seen.filter(s => !this.allowed.some(a => a.pattern.test(s.text) || (s.url !== '' && a.pattern.test(s.url))));
  }
}

export const test = base.extend<{ consoleGuard: ConsoleGuard }>({
  consoleGuard: async ({}, use) => {
    await use(new ConsoleGuard());
  },
  // `page` is built on `context`, so these listeners are in place before JupyterLab loads.
  // Depending on `tmpPath` makes this teardown (the check) run before Galata's tmpPath teardown
  // deletes the test folder, which the file browser, still open on it, would then fail to list.
  context: async ({ context, consoleGuard, tmpPath }, use, testInfo) => {
    void tmpPath;
    context.on('console', msg => consoleGuard.onConsole(msg));
    context.on('weberror', e => consoleGuard.onPageError(e.error()));
    await use(context);
    consoleGuard.close();
    const bad = consoleGuard.unexpected();
    if (bad.length) {
      await testInfo.attach('browser-console', { body: JSON.stringify(consoleGuard.seen, null, 2), contentType: 'application/json' });
    }
    expect(bad.map(s => `${s.kind}: ${s.text}${s.url ? ` (${s.url})` : ''}`), 'browser console errors / page errors').toEqual([]);
  }
});

export { expect };
