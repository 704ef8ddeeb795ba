/**
 * `diffract report`'s standalone page (issue 29 point 5, items o, q, r) in a browser that
 * prefers dark and one that prefers light, 1400 and 900 px wide: the page follows
 * prefers-color-scheme, the ESD grid's text reads on the page's background (it was Plotly's
 * #444 on #111), 48 checkpoints are one heatmap with 48 rows, and a table of 16 fields scrolls
 * sideways inside its box instead of running off the page. Two reports are made by the CLI in a
 * temporary folder: one of a store of 48 checkpoints (6 layers each), one of a checkpoint file
 * with --fields (the wide table). No JupyterLab.
 */
import { expect, test } from '@playwright/test';
import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { shot } from './helpers';

/** The store's fields (a store's report tables the preferred fields it holds). */
const STORE_FIELDS = ['esd', 'pl_alpha', 'pl_esd_xmin', 'frob_norm', 'spectral_norm', 'stable_rank'];
/** A checkpoint's report with 16 field columns (--fields): the wide table. */
const WIDE_FIELDS = [
  'pl_alpha', 'frob_norm', 'spectral_norm', 'stable_rank', 'matrix_rank', 'effective_rank', 'matrix_entropy', 'hill_alpha',
  'l2_norm', 'expon_lambda', 'level_spacing_ratio', 'hard_rank', 'aspect_ratio', 'alpha_mid', 'esd_max', 'esd_min'
];

const BUILD = `
import sys, numpy as np
from diffract import Session
s = Session(path=sys.argv[1])
for k in range(48):
    rng = np.random.default_rng(k)
    d, weights = 32, {}
    for i in range(6):
        weights[f"encoder.layer.{i}.output.dense.weight"] = rng.normal(size=(48, d)).astype("float32")
        d = 48
    s.models.add(weights, f"ckpt-{k * 500:05d}")
s.compute.apply(*sys.argv[2].split(","), progress=False)
np.savez(sys.argv[3], **weights)
`;

const bin = path.resolve(__dirname, '..', '..', '.venv', 'bin');

/** WCAG contrast of two css rgb() colours. */
function contrast(a: string, b: string): number {
  const lum = (c: string) => {
    const [r, g, bl] = c.match(/[\d.]+/g)!.slice(0, 3).map(v => {
      const x = Number(v) / 255;
      return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4);
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * bl;
  };
  const [hi, lo] = [lum(a), lum(b)].sort((x, y) => y - x);
  return (hi + 0.05) / (lo + 0.05);
}

let reportUrl = '';
let wideUrl = '';

test.beforeAll(() => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'diffract-report-'));
  const script = path.join(dir, 'build.py');
  fs.writeFileSync(script, BUILD);
  const store = path.join(dir, '.diffract');
  const ckpt = path.join(dir, 'ckpt.npz');
  execFileSync(path.join(bin, 'python'), [script, store, STORE_FIELDS.join(','), ckpt], { stdio: 'pipe', timeout: 120000 });
  const out = path.join(dir, 'report.html');
  execFileSync(path.join(bin, 'diffract'), ['report', store, '-o', out], { stdio: 'pipe', timeout: 120000 });
  reportUrl = 'file://' + out;
  const wide = path.join(dir, 'wide.html');
  execFileSync(path.join(bin, 'diffract'), ['report', ckpt, '--fields', WIDE_FIELDS.join(','), '-o', wide], { stdio: 'pipe', timeout: 120000 });
  wideUrl = 'file://' + wide;
});

for (const scheme of ['dark', 'light'] as const) {
  for (const width of [1400, 900]) {
    test(`report page prefers ${scheme} at ${width} px: ESD grid readable, 48 checkpoints one heatmap, wide table scrolls in its box`, async ({ page }) => {
      test.setTimeout(120000);
      const errors: string[] = [];
      page.on('pageerror', e => errors.push(String(e)));
      page.on('console', m => (m.type() === 'error' ? errors.push(m.text()) : undefined));
      await page.emulateMedia({ colorScheme: scheme });
      await page.setViewportSize({ width, height: 900 });
      await page.goto(reportUrl);
      const tag = `${scheme}-${width}`;

      const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
      if (scheme === 'dark') {
        expect(bg).toBe('rgb(17, 17, 17)');
      } else {
        expect(bg).not.toBe('rgb(17, 17, 17)');
      }
      const pageBg = scheme === 'dark' ? bg : 'rgb(255, 255, 255)';

      // the ESD grid: every text Plotly drew (titles, legend, ticks, axis titles) reads on the page
      const grid = page.locator('#esd-grid');
      await grid.scrollIntoViewIfNeeded();
      await expect(grid.locator('.main-svg').first()).toBeVisible();
      const fills = await grid.evaluate((el: Element) =>
        Array.from(el.querySelectorAll('.infolayer text, .xtick text, .ytick text, .legendtext, .annotation-text, .g-xtitle text, .g-ytitle text'))
          .map(t => getComputedStyle(t).fill)
          .filter(f => f.startsWith('rgb'))
      );
      expect(fills.length, 'ESD grid texts').toBeGreaterThan(10);
      for (const f of new Set(fills)) {
        expect(contrast(f, pageBg), `ESD grid text ${f} on ${pageBg} (${tag})`).toBeGreaterThanOrEqual(3);
      }
      // the panels' titles ("model:short-name (α=...)") stay apart (whole names ran into
      // the next panel's title at 900 px)
      const titles = await grid.evaluate((el: Element) =>
        Array.from(el.querySelectorAll('.annotation-text')).map(t => {
          const r = t.getBoundingClientRect();
          return { text: t.textContent ?? '', left: r.left, right: r.right, top: r.top, bottom: r.bottom };
        })
      );
      expect(titles.length, 'one title per ESD panel').toBeGreaterThan(1);
      for (const [i, a] of titles.entries()) {
        for (const b of titles.slice(i + 1)) {
          const apart = a.right <= b.left || b.right <= a.left || a.bottom <= b.top || b.bottom <= a.top;
          expect(apart, `"${a.text}" and "${b.text}" overlap (${tag})`).toBe(true);
        }
      }
      await shot(page as any, `report-esd-grid-${tag}`, grid);

      // 48 checkpoints: one heatmap row each, not 48 lines
      const depth = page.locator('#alpha-depth');
      await depth.scrollIntoViewIfNeeded();
      const heat = await depth.evaluate((el: any) => el.data.map((t: any) => ({ type: t.type, rows: (t.y ?? []).length })));
      expect(heat).toEqual([{ type: 'heatmap', rows: 48 }]);
      const depthFills = await depth.evaluate((el: Element) => Array.from(el.querySelectorAll('.ytick text')).map(t => getComputedStyle(t).fill));
      expect(depthFills.length).toBeGreaterThan(0);
      expect(contrast(depthFills[0], pageBg), `heatmap tick text on ${pageBg} (${tag})`).toBeGreaterThanOrEqual(3);
      await shot(page as any, `report-48-checkpoints-${tag}`, depth);

      // the wide table: its box stays on the page and scrolls sideways to the last column
      await page.goto(wideUrl);
      const wrap = page.locator('.table-wrap');
      await wrap.scrollIntoViewIfNeeded();
      const box = await wrap.evaluate((el: Element) => {
        const r = el.getBoundingClientRect();
        return { right: r.right, scrollWidth: el.scrollWidth, clientWidth: el.clientWidth, page: document.documentElement.scrollWidth, view: window.innerWidth };
      });
      expect(box.right, `table box inside the window (${tag})`).toBeLessThanOrEqual(box.view);
      expect(box.page, `the page itself does not scroll sideways (${tag})`).toBeLessThanOrEqual(box.view);
      expect(box.scrollWidth, `the table is wider than its box (${tag})`).toBeGreaterThan(box.clientWidth);
      const heads = await wrap.locator('thead th').allTextContents();
      expect(heads.length).toBeGreaterThanOrEqual(WIDE_FIELDS.length);
      const last = wrap.locator('thead th').last();
      await wrap.evaluate((el: Element) => (el.scrollLeft = el.scrollWidth));
      const lastBox = await last.boundingBox();
      const wrapBox = await wrap.boundingBox();
      expect(lastBox!.x + lastBox!.width, `last column scrolled into the box (${tag})`).toBeLessThanOrEqual(wrapBox!.x + wrapBox!.width + 1);
      expect(await wrap.evaluate((el: Element) => el.scrollLeft)).toBeGreaterThan(0);
      await wrap.evaluate((el: Element) => (el.scrollLeft = Math.round((el.scrollWidth - el.clientWidth) / 2)));
      await shot(page as any, `report-wide-table-${tag}`, wrap);
      expect(errors, 'page errors').toEqual([]);
    });
  }
}
