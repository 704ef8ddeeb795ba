/**
 * The filter builder over a store of 1,216 slices (issue 16 point 6): columns that sort over
 * every match, pages, "did you mean" for an exact name or a custom type that matches nothing,
 * and "copy as code" whose line selects what the builder selects. Light and dark themes, 1400
 * and 900 px windows.
 */
import { expect, test } from './fixtures';
import { newNotebookWithStore, outputText, runCode, shot } from './helpers';

for (const width of [1400, 900]) {
  test(`filter builder at ${width} px: sort, pages, did you mean, copy as code, both themes`, async ({ page, tmpPath }) => {
    test.setTimeout(240000);
    await page.setViewportSize({ width, height: 1000 });
    await newNotebookWithStore(page, tmpPath, `filter-${width}.ipynb`);
    await runCode(page, 'session.models.add(mlp(5, layers=600, width=4), "big")\nfb = FilterBuilder(session, preview_limit=50)\nfb');
    const w = page.locator('.diffract-filter');
    const count = w.locator('.diffract-count');
    await expect(count).toHaveText('1216 of 1216 slices', { timeout: 60000 });
    const rows = w.locator('.diffract-preview tbody tr');
    await expect(rows).toHaveCount(50);
    const pageText = w.locator('.diffract-page');
    await expect(pageText).toHaveText('rows 1–50 of 1216');

    // pages: next, next, prev
    await w.locator('.diffract-next').click();
    await expect(pageText).toHaveText('rows 51–100 of 1216');
    await w.locator('.diffract-next').click();
    await expect(pageText).toHaveText('rows 101–150 of 1216');
    await w.locator('.diffract-prev').click();
    await expect(pageText).toHaveText('rows 51–100 of 1216');

    // sort by name over all matches (numbers as numbers), then descending
    const nameHead = w.locator('th[data-sort="name"]');
    await nameHead.click();
    await expect(nameHead).toHaveText('name ▴');
    await expect(rows.first().locator('td').nth(1)).toHaveText('layers.0.bias');
    await nameHead.click();
    await expect(nameHead).toHaveText('name ▾');
    await expect(rows.first().locator('td').nth(1)).toHaveText('layers.599.weight');
    await expect(rows.nth(2).locator('td').nth(1)).toHaveText('layers.598.weight'); // 598 < 599, not "598" < "60"
    await shot(page, `filter-sorted-${width}-light`, w);

    // an exact name that matches nothing: did you mean, one click fixes it
    const names = w.locator('.diffract-names');
    await names.fill('layers.1.wieght');
    await expect(count).toHaveText('0 of 1216 slices');
    const hint = w.locator('.diffract-hint[data-kind="name"]');
    await expect(hint).toContainText('no slice is named "layers.1.wieght" · did you mean layers.1.weight');
    await shot(page, `filter-did-you-mean-${width}-light`, w);
    await hint.locator('.diffract-suggestion[data-value="layers.1.weight"]').click();
    await expect(count).toHaveText('3 of 1216 slices');
    await expect(names).toHaveValue('layers.1.weight');
    await expect(w.locator('.diffract-hint')).toHaveCount(0);
    await expect(w.locator('.diffract-page')).toHaveText('rows 1–3 of 3');
    await expect(w.locator('.diffract-next')).toBeHidden();

    // a custom type that matches nothing
    await w.locator('.diffract-custom-type').fill('dens');
    await w.locator('.diffract-add-type').click();
    const typeHint = w.locator('.diffract-hint[data-kind="type"]');
    await expect(typeHint).toContainText('no slice has type "dens" · did you mean dense');
    await typeHint.locator('.diffract-suggestion[data-value="dense"]').click();
    await expect(count).toHaveText('3 of 1216 slices');
    await expect(w.locator('.diffract-type-chip[data-value="dense"]')).toHaveClass(/d-on/);

    // copy as code: the line, run in the kernel, selects the same slices as the builder
    const code = w.locator('.diffract-code');
    await expect(code).toHaveText("session.filter(param_names=['layers.1.weight'], param_types=['dense'])");
    await w.locator('.diffract-copy-code').click();
    await expect(w.locator('.diffract-copied')).toHaveText(/copied|selected: press Ctrl\+C to copy/);
    const line = (await code.textContent())!;
    const k = await runCode(page, `print("same", [s.uid for s in ${line}.models.slices()] == [s.uid for s in fb.scope.models.slices()], len(fb.scope.models.slices()))`);
    await expect.poll(async () => outputText(page, k), { timeout: 30000 }).toContain('same True 3');

    await page.theme.setDarkTheme();
    await names.fill('layers.2.wieght');
    await expect(w.locator('.diffract-hint[data-kind="name"]')).toBeVisible();
    const fg = await w.locator('.diffract-hint').first().evaluate(el => getComputedStyle(el).color);
    const bg = await w.evaluate(el => getComputedStyle(el).backgroundColor);
    expect(fg).not.toBe(bg);
    await shot(page, `filter-did-you-mean-${width}-dark`, w);
    await page.theme.setLightTheme();
  });
}
