/** How the sidebar groups a model's field chips (plain functions: tested in Node). */

/** Fields that hold an array per slice (spectra, singular values) or are intermediates other
 * fields are computed from: behind a toggle, since the chart has no number to plot for them. */
const ARRAY_FIELDS = new Set(['esd', 'spectrum_path', 'weights_svals', 'esd_deltas']);
const ARRAY_PATTERN = /(_svals|_evals|_path|_deltas|_spectrum|_hist)$/;

export type FieldGroup = 'layer' | 'model' | 'array';

export const GROUP_TITLES: Record<FieldGroup, string> = {
  layer: 'per layer',
  model: 'per model',
  array: 'arrays and intermediates'
};

/** The group of a field, from its name: `model_*` fields hold one number per model. */
export function fieldGroup(field: string): FieldGroup {
  if (ARRAY_FIELDS.has(field) || ARRAY_PATTERN.test(field)) {
    return 'array';
  }
  return field.startsWith('model_') ? 'model' : 'layer';
}

/** The fields matching `query` (case-insensitive substring), grouped in display order. */
export function groupFields(fields: readonly string[], query = ''): { group: FieldGroup; fields: string[] }[] {
  const q = query.trim().toLowerCase();
  const out: Record<FieldGroup, string[]> = { layer: [], model: [], array: [] };
  for (const f of fields) {
    if (!q || f.toLowerCase().includes(q)) {
      out[fieldGroup(f)].push(f);
    }
  }
  return (['layer', 'model', 'array'] as FieldGroup[]).filter(g => out[g].length).map(g => ({ group: g, fields: out[g] }));
}

/** A number for display: 4 significant digits (the full value goes in the tooltip). */
export function roundValue(v: unknown): string {
  if (typeof v !== 'number' || !Number.isFinite(v)) {
    return String(v);
  }
  if (v !== 0 && (Math.abs(v) >= 1e5 || Math.abs(v) < 1e-3)) {
    return v.toExponential(3);
  }
  return String(Number(v.toPrecision(4)));
}

/** A short axis label for a layer name: its last parts, e.g. `layers.3.attn.q.weight` -> `3.attn.q`. */
export function shortLayerName(name: string, max = 18): string {
  let parts = name.split('.');
  if (parts.length > 1 && ['weight', 'kernel', 'bias'].includes(parts[parts.length - 1])) {
    parts = parts.slice(0, -1);
  }
  let out = parts.join('.');
  while (out.length > max && parts.length > 1) {
    parts = parts.slice(1);
    out = parts.join('.');
  }
  return out.length > max ? '…' + out.slice(out.length - max + 1) : out;
}
