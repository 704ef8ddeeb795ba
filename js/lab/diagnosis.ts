/** The diagnosis badges of the sidebar: which layers each rule flags (the stored `diag_<rule>`
 * bools, with their `diag_<rule>_reason` text), counted per model and listed per layer.
 * Plain functions and DOM builders (tested in Node); the model reads the fields. */
import type { FieldReply } from '../shared/wire';
import { h } from './dom';

/** One rule firing on one layer, and why (the stored reason, quoting the numbers). */
export interface DiagHit {
  readonly rule: string;
  readonly reason: string;
}

/** A flagged layer: its slice and the rules that fire on it, in rule order. */
export interface DiagLayer {
  readonly uid: string;
  readonly name: string;
  readonly index: number;
  readonly hits: DiagHit[];
}

/** One model's diagnosis: flagged layers per rule, and the flagged layers in depth order. */
export interface Diagnosis {
  readonly counts: Record<string, number>;
  readonly layers: DiagLayer[];
}

/** The rules a store's summary holds: `diag_<rule>` fields (not their `_reason`, not model-level). */
export function diagRules(fields: readonly string[]): string[] {
  return fields
    .filter(f => f.startsWith('diag_') && !f.endsWith('_reason'))
    .map(f => f.slice('diag_'.length))
    .sort();
}

/** Whether a stored flag says the rule fires (a bool, or 1 from an older writer). */
export function fires(value: unknown): boolean {
  return value === true || value === 1;
}

/**
 * Per model, the diagnosis built from each rule's flag field reply and its reason field reply
 * (null when no reason is stored). Every model listed in a flag reply gets an entry, so a
 * model with the fields and no flagged layer counts 0 per rule.
 */
export function buildDiagnosis(rules: readonly { rule: string; flags: FieldReply; reasons: FieldReply | null }[]): Map<string, Diagnosis> {
  const out = new Map<string, { counts: Record<string, number>; layers: Map<string, DiagLayer> }>();
  for (const { rule, flags, reasons } of rules) {
    const why = new Map<string, string>();
    for (const m of reasons?.models ?? []) {
      for (const p of m.points) {
        why.set(p.uid, typeof p.value === 'string' ? p.value : '');
      }
    }
    for (const m of flags.models) {
      let d = out.get(m.model_id);
      if (!d) {
        d = { counts: {}, layers: new Map() };
        out.set(m.model_id, d);
      }
      d.counts[rule] = 0;
      for (const p of m.points) {
        if (!fires(p.value)) {
          continue;
        }
        d.counts[rule]++;
        let layer = d.layers.get(p.uid);
        if (!layer) {
          layer = { uid: p.uid, name: p.name, index: p.index, hits: [] };
          d.layers.set(p.uid, layer);
        }
        layer.hits.push({ rule, reason: why.get(p.uid) || `diag_${rule} fires` });
      }
    }
  }
  const result = new Map<string, Diagnosis>();
  for (const [model, d] of out) {
    const layers = [...d.layers.values()].sort((a, b) => a.index - b.index);
    layers.forEach(l => l.hits.sort((a, b) => (a.rule < b.rule ? -1 : a.rule > b.rule ? 1 : 0)));
    result.set(model, { counts: d.counts, layers });
  }
  return result;
}

/** A rule's short label on a badge: `over_trained` -> `over trained`. */
export function ruleLabel(rule: string): string {
  return rule.replace(/_/g, ' ');
}

function badge(rule: string, text: string, title: string): HTMLElement {
  const b = h('span', 'diffract-badge', text);
  b.dataset.rule = rule;
  b.title = title;
  return b;
}

/** The model table's badges: one per rule that flags some layer, with the count (null: none). */
export function modelBadges(diag: Diagnosis | undefined): HTMLElement | null {
  if (!diag) {
    return null;
  }
  const rules = Object.keys(diag.counts)
    .filter(r => diag.counts[r] > 0)
    .sort();
  const box = h('span', 'diffract-badges');
  box.dataset.diagnosis = String(rules.length);
  if (!rules.length) {
    box.append(h('span', 'diffract-badge diffract-badge-ok', 'ok'));
    box.firstElementChild!.setAttribute('title', 'no diagnosis rule fires on any layer');
    return box;
  }
  for (const r of rules) {
    const n = diag.counts[r];
    const names = diag.layers.filter(l => l.hits.some(x => x.rule === r)).map(l => l.name);
    box.append(badge(r, `${ruleLabel(r)} ${n}`, `diag_${r}: ${n} layer${n === 1 ? '' : 's'} flagged (${names.join(', ')})`));
  }
  return box;
}

/** Under the layer chart: each flagged layer with a badge per rule, the reason in its tooltip. */
export function layerBadges(diag: Diagnosis | undefined): HTMLElement | null {
  if (!diag) {
    return null;
  }
  const box = h('div', 'diffract-diag');
  const flagged = diag.layers.length;
  box.append(h('div', 'diffract-group-title', flagged ? `Diagnosis: ${flagged} layer${flagged === 1 ? '' : 's'} flagged` : 'Diagnosis: no rule fires'));
  for (const l of diag.layers) {
    const row = h('div', 'diffract-diag-layer');
    row.dataset.uid = l.uid;
    row.append(h('span', 'diffract-diag-name diffract-wrap', l.name));
    for (const hit of l.hits) {
      row.append(badge(hit.rule, ruleLabel(hit.rule), hit.reason));
    }
    box.append(row);
  }
  return box;
}
