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

/**
 * Issue 29 point 5 e: with a transformer's long layer names (MiniLM-length, no spaces to break
 * at) the preview's type and shape columns stay inside the widget in a 900 px window (a ~468 px
 * output) as at 1400 px: the names wrap, the table does not scroll sideways, and every type and
 * shape cell shows its whole text ('384×1536'). Fails without the fixed table layout in
 * js/shared/theme.ts (the shape column was pushed out of the preview's box). The model is a
 * module uploaded beside the notebook (the editor would re-indent a typed function).
 */
const LONG_MODEL = `
import numpy as np

def minilm(seed=0, layers=12):
    rng = np.random.default_rng(seed)
    out = {}
    for i in range(layers):
        p = f"encoder.layer.{i}."
        out[p + "attention.self.query.weight"] = rng.normal(size=(384, 384)).astype("float32")
        out[p + "attention.output.dense.weight"] = rng.normal(size=(384, 384)).astype("float32")
        out[p + "intermediate.dense.weight"] = rng.normal(size=(1536, 384)).astype("float32")
        out[p + "output.dense.weight"] = rng.normal(size=(384, 1536)).astype("float32")
    return out
`.trim();

/** Typed into a cell: one level, nothing the notebook editor would re-indent. */
const LONG_CELL = `from ui_minilm import minilm
LONG_ID = "all-MiniLM-L12-v2-finetuned-squad"
session.models.add(minilm(), LONG_ID)
fb = FilterBuilder(session, preview_limit=12)
fb.model_ids = [LONG_ID]
fb.sort_by, fb.sort_desc = "name", True
fb`;

interface CellBox {
  column: string;
  text: string;
  left: number;
  right: number;
  scrollWidth: number;
  clientWidth: number;
}

for (const width of [1400, 900]) {
  test(`filter preview at ${width} px: long layer names wrap, type and shape stay whole and in view, both themes`, async ({ page, tmpPath }) => {
    test.setTimeout(240000);
    await page.setViewportSize({ width, height: 1000 });
    await newNotebookWithStore(page, tmpPath, `filter-preview-${width}.ipynb`);
    await page.contents.uploadContent(LONG_MODEL + '\n', 'text', `${tmpPath}/ui_minilm.py`);
    await runCode(page, LONG_CELL);
    const w = page.locator('.diffract-filter');
    await expect(w.locator('.diffract-count')).toHaveText(/^48 of \d+ slices$/, { timeout: 60000 });
    const rows = w.locator('.diffract-preview tbody tr');
    await expect(rows).toHaveCount(12);
    await expect(rows.first().locator('td').nth(1)).toHaveText('encoder.layer.11.output.dense.weight'); // numbers sort as numbers

    for (const theme of ['light', 'dark']) {
      if (theme === 'dark') {
        await page.theme.setDarkTheme();
      }
      const preview = w.locator('.diffract-preview');
      await preview.scrollIntoViewIfNeeded();
      const box = await preview.evaluate((el: Element) => {
        const r = el.getBoundingClientRect();
        return { left: r.left, right: r.left + (el as HTMLElement).clientWidth, scrollWidth: el.scrollWidth, clientWidth: (el as HTMLElement).clientWidth };
      });
      // the preview box does not scroll sideways: the whole table fits it
      expect(box.scrollWidth, `${theme} ${width}: preview scrollWidth vs clientWidth`).toBeLessThanOrEqual(box.clientWidth);
      // ... and the preview itself lies inside the notebook's output area
      const area = await page.locator('.jp-OutputArea-output').filter({ has: w }).boundingBox();
      expect(area).not.toBeNull();
      expect(box.right).toBeLessThanOrEqual(area!.x + area!.width + 0.5);

      const cells: CellBox[] = await w.locator('.diffract-preview tr').evaluateAll((trs: Element[]) =>
        trs.flatMap(tr =>
          Array.from(tr.children)
            .slice(2, 4)
            .map((c, i) => {
              const r = c.getBoundingClientRect();
              return {
                column: i === 0 ? 'type' : 'shape',
                text: (c.textContent ?? '').trim(),
                left: r.left,
                right: r.right,
                scrollWidth: c.scrollWidth,
                clientWidth: (c as HTMLElement).clientWidth
              };
            })
        )
      );
      expect(cells.length).toBe(2 * 13); // the head row and 12 rows
      for (const c of cells) {
        const what = `${theme} ${width}: ${c.column} cell '${c.text}'`;
        expect(c.left, what).toBeGreaterThanOrEqual(box.left - 0.5);
        expect(c.right, what).toBeLessThanOrEqual(box.right + 0.5);
        expect(c.scrollWidth, what).toBeLessThanOrEqual(c.clientWidth);
      }
      const shapes = cells.filter(c => c.column === 'shape').map(c => c.text);
      expect(shapes[0]).toMatch(/^shape/);
      expect(new Set(shapes.slice(1))).toEqual(new Set(['384×1536', '1536×384', '384×384']));
      // each shape cell holds its text on one line (not broken into '384×' / '1536')
      const lineBreaks = await w.locator('.diffract-preview tbody td:nth-child(4)').evaluateAll((tds: Element[]) =>
        tds.filter(td => td.getBoundingClientRect().height > 1.6 * parseFloat(getComputedStyle(td).lineHeight || '16')).length
      );
      expect(lineBreaks, `${theme} ${width}: shape cells wrapped`).toBe(0);
      await shot(page, `filter-preview-${theme}-${width}`, w);
    }
    await page.theme.setLightTheme();
  });
}
