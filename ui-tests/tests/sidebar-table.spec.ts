import { expect, test } from './fixtures';
import { newNotebookWithStore, openSidebarStore, runCode, shot } from './helpers';

/** The selected row's text and background colours as the page draws them. */
async function rowColours(row: import('@playwright/test').Locator): Promise<{ fg: string; bg: string }> {
  return row.evaluate(el => {
    const cs = getComputedStyle(el.querySelector('td') as Element);
    return { fg: cs.color, bg: getComputedStyle(el).backgroundColor };
  });
}

/** WCAG contrast ratio of two `rgb(...)` colours. */
function contrast(a: string, b: string): number {
  const lum = (c: string) => {
    const [r, g, bl] = (c.match(/[\d.]+/g) ?? ['0', '0', '0']).slice(0, 3).map(v => Number(v) / 255).map(v => (v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4)));
    return 0.2126 * r + 0.7152 * g + 0.0722 * bl;
  };
  const [hi, lo] = [lum(a), lum(b)].sort((x, y) => y - x);
  return (hi + 0.05) / (lo + 0.05);
}

for (const width of [1400, 900]) {
  test(`sidebar at ${width} px: grouped chips, search, rounded values, layer names, copy, selected row in both themes`, async ({ page, tmpPath }) => {
    await page.setViewportSize({ width, height: 900 });
    await newNotebookWithStore(page, tmpPath, `side${width}.ipynb`);
    await runCode(page, 'session.compute.apply("frob_norm", "stable_rank", "esd", "pl_alpha", "model_stable_rank", progress=False); print("computed")');
    const { panel, store } = await openSidebarStore(page, tmpPath);
    const m1 = store.locator('.diffract-model[data-model="m1"]');
    await m1.click();
    // chips grouped: per layer, per model; arrays and intermediates behind a toggle
    const layer = panel.locator('.diffract-field-group[data-group="layer"]');
    await expect(layer.locator('.diffract-field[data-field="frob_norm"]')).toBeVisible();
    await expect(panel.locator('.diffract-field-group[data-group="model"] .diffract-field[data-field="model_stable_rank"]')).toBeVisible();
    await expect(panel.locator('.diffract-field[data-field="esd"]')).toHaveCount(0);
    await panel.locator('.diffract-toggle-arrays').click();
    await expect(panel.locator('.diffract-field-group[data-group="array"] .diffract-field[data-field="esd"]')).toBeVisible();
    await panel.locator('.diffract-toggle-arrays').click();
    await expect(panel.locator('.diffract-field[data-field="esd"]')).toHaveCount(0);
    // the search box filters the chips
    await panel.locator('.diffract-search').fill('rank');
    await expect(panel.locator('.diffract-field')).toHaveText(['stable_rank', 'model_stable_rank']);
    await panel.locator('.diffract-search').fill('');
    await panel.locator('.diffract-field[data-field="frob_norm"]').click();
    const chart = panel.locator('.diffract-chart');
    await expect(chart).toHaveAttribute('data-points', '4', { timeout: 20000 });
    // the chart is the figure route's layers figure (diffract.viz): layers in depth order, each
    // point's hover naming its model, layer, type and value (5 significant digits), its uid last
    await expect(chart.locator('.xtick text')).toHaveText(['0 layers.0', '1 layers.1', '2 layers.2', '3 layers.3']);
    const custom = await chart.evaluate((gd: any) => gd.data[0].customdata[0] as string[]);
    expect(custom.slice(0, 3)).toEqual(['m1', 'layers.0.weight', 'dense']);
    expect(custom[3]).toMatch(/^\d+(\.\d+)?(e[+-]?\d+)?$/);
    expect(custom[4]).toMatch(/^[0-9a-f]{16}$/);
    // clicking a point copies its name
    await chart.evaluate((gd: any) => gd.emit('plotly_click', { points: [{ customdata: gd.data[0].customdata[2] }] }));
    await expect(chart).toHaveAttribute('data-copied', 'layers.2.weight');
    await expect(panel.locator('.diffract-copied')).toContainText('layers.2.weight');
    // the selected row is readable in both themes
    await expect(m1).toHaveClass(/diffract-selected/);
    const light = await rowColours(m1);
    expect(contrast(light.fg, light.bg), `light ${JSON.stringify(light)}`).toBeGreaterThan(3);
    await shot(page, `sidebar-${width}-light`, panel);
    await page.theme.setDarkTheme();
    const dark = await rowColours(m1);
    expect(contrast(dark.fg, dark.bg), `dark ${JSON.stringify(dark)}`).toBeGreaterThan(3);
    await shot(page, `sidebar-${width}-dark`, panel);
    await page.theme.setLightTheme();
  });
}
