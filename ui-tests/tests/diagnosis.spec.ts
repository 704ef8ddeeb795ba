/**
 * The diagnosis in JupyterLab: the sidebar's badges (flagged layers per rule in the model
 * table, the rules per layer under the chart, reasons in tooltips), the `diagnosis` panel kind,
 * and the fine-tune diff report's HTML page; light and dark, screenshots for docs/img (make docs).
 */
import * as fs from 'fs';
import * as path from 'path';

import type { Locator, Page } from '@playwright/test';

import { expect, test } from './fixtures';
import { newNotebookWithStore, openSidebarStore, outputText, runCode, shot } from './helpers';

/** WCAG contrast ratio of two CSS colours (a transparent background is the page's white). */
function contrast(a: string, b: string): number {
  const lum = (c: string) => {
    const v = (c.match(/[\d.]+/g) ?? ['0', '0', '0']).map(Number);
    const rgb = v.length === 4 && v[3] === 0 ? [255, 255, 255] : v.slice(0, 3);
    const [r, g, bl] = rgb.map(x => x / 255).map(x => (x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4)));
    return 0.2126 * r + 0.7152 * g + 0.0722 * bl;
  };
  const [hi, lo] = [lum(a), lum(b)].sort((x, y) => y - x);
  return (hi + 0.05) / (lo + 0.05);
}

/** Screenshot `target` into ui-tests/screenshots, as every spec does (`make docs` copies them
 * into docs/img: a test run leaves the tracked images alone). */
async function docShot(page: Parameters<typeof shot>[0], name: string, target: Locator | Page): Promise<void> {
  await shot(page, name, target);
}

/** (run with exec in the notebook: it uses SETUP's session) A model with one heavy-tailed layer (ESD exponent 1.5: over-trained) and a Gaussian one
 * (alpha about 3.6), next to m1 and m2 of SETUP; every diagnosis rule computed on all three. */
const DIAG = `
import numpy as np
from diffract.viz import diagnosis_fields
rng = np.random.default_rng(0)
lam = (1.0 - rng.uniform(size=60)) ** -2.0
u, _ = np.linalg.qr(rng.normal(size=(200, 60)))
v, _ = np.linalg.qr(rng.normal(size=(60, 60)))
if "m3" not in session.models:
    session.models.add({"heavy.weight": (u * np.sqrt(lam)) @ v.T, "random.weight": rng.normal(size=(200, 60))}, "m3")
session.compute.apply(*diagnosis_fields(traps=True), progress=False)
flags = session.results.export_table("diag_over_trained", export_format="pandas")
print("diagnosed", int(flags["diag_over_trained"].sum()))
`.trim();

/** Base and tuned dicts: a rank-4 update plus small noise on two of three layers. */
const DIFF = `
import numpy as np, diffract
from diffract.report import diff_report_html
rng = np.random.default_rng(1)
base = {f"blocks.{i}.weight": rng.normal(size=(96, 64)) / 8 for i in range(3)}
tuned = dict(base)
for name in ("blocks.0.weight", "blocks.2.weight"):
    tuned[name] = base[name] + rng.normal(size=(96, 4)) @ rng.normal(size=(4, 64)) / 8 + 1e-4 * rng.normal(size=(96, 64))
res = diffract.diff(base, tuned)
open("diff.html", "w").write(diff_report_html(res))
print("diff written", len(res.ranked()))
`.trim();

test('diagnosis badges in the sidebar, the diagnosis panel and the diff report, light and dark', async ({ page, tmpPath }) => {
  test.setTimeout(300000);
  await page.setViewportSize({ width: 1400, height: 900 });
  await newNotebookWithStore(page, tmpPath, 'diag.ipynb');
  await page.contents.uploadContent(DIAG + '\n', 'text', `${tmpPath}/ui_diag.py`);
  const d = await runCode(page, 'exec(open("ui_diag.py").read())');
  await expect.poll(async () => outputText(page, d), { timeout: 120000 }).toMatch(/diagnosed [1-9]/);

  // the model table: a badge per firing rule with its count; the layers under the chart
  const { panel, store } = await openSidebarStore(page, tmpPath);
  const m3 = store.locator('.diffract-model[data-model="m3"]');
  await expect(m3.locator('.diffract-badge[data-rule="over_trained"]')).toHaveText('over trained 1', { timeout: 20000 });
  await expect(m3.locator('.diffract-badge[data-rule="over_trained"]')).toHaveAttribute('title', /heavy\.weight/);
  await m3.click();
  const layer = panel.locator('.diffract-diag-layer').filter({ hasText: 'heavy.weight' });
  const badge = layer.locator('.diffract-badge[data-rule="over_trained"]');
  await expect(badge).toBeVisible();
  await expect(badge).toHaveAttribute('title', /alpha [\d.]+ < 2/); // the stored reason, quoting alpha
  await expect(panel.locator('.diffract-diag-layer').filter({ hasText: 'random.weight' }).locator('.diffract-badge[data-rule="over_trained"]')).toHaveCount(0);
  await expect(panel.locator('.diffract-chart')).toHaveAttribute('data-points', '2', { timeout: 20000 });

  // the diagnosis panel kind, in a cell
  const p = await runCode(page, 'from diffract.widgets import FieldPanel\nFieldPanel(session, kind="diagnosis")');
  const diagPanel = page.locator('.diffract-panel').last();
  await expect(diagPanel.locator('.main-svg').first()).toBeVisible({ timeout: 60000 });
  expect(p).toBeGreaterThan(0);

  for (const theme of ['light', 'dark'] as const) {
    if (theme === 'dark') {
      await page.theme.setDarkTheme();
    }
    await docShot(page, `diagnosis-sidebar-${theme}`, panel);
    await docShot(page, `diagnosis-panel-${theme}`, diagPanel);
    // the flagged layers under the chart (the panel scrolls: bring them into view)
    await panel.locator('.diffract-diag').scrollIntoViewIfNeeded();
    await docShot(page, `diagnosis-layers-${theme}`, panel.locator('.diffract-diag'));
  }
  await page.theme.setLightTheme();

  // the fine-tune diff report: its own HTML page (Plotly inline), in a browser tab
  await page.contents.uploadContent(DIFF + '\n', 'text', `${tmpPath}/ui_diff.py`);
  const f = await runCode(page, 'exec(open("ui_diff.py").read())');
  await expect.poll(async () => outputText(page, f), { timeout: 120000 }).toContain('diff written 3');
  const file = path.join(process.env.DIFFRACT_UI_ROOT!, tmpPath, 'diff.html');
  const html = fs.readFileSync(file, 'utf8');
  const report = await page.context().newPage();
  for (const theme of ['light', 'dark'] as const) {
    await report.emulateMedia({ colorScheme: theme });
    await report.setViewportSize({ width: 1200, height: 900 });
    await report.setContent(html, { waitUntil: 'load' });
    await expect(report.locator('.main-svg').first()).toBeVisible({ timeout: 30000 });
    await expect(report.locator('body')).toContainText('blocks.2.weight');
    // readable in both schemes: the body's text contrasts with its background
    const [fg, bg] = await report.evaluate(() => [getComputedStyle(document.body).color, getComputedStyle(document.body).backgroundColor]);
    expect(contrast(fg, bg), `${theme}: text ${fg} on ${bg}`).toBeGreaterThan(7);
    await docShot(page, `diff-report-${theme}`, report);
  }
  await report.close();
});
