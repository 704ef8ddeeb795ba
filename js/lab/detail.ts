/** The selected model: its title, "Open in notebook", the field chips and the chart. */
import { renderChart } from './chart';
import { h } from './dom';
import type { OpenTarget } from './cellcode';
import type { RunsModel } from './model';

export class DetailView {
  readonly node = h('div', 'diffract-detail');
  private readonly chart = h('div', 'diffract-chart');

  constructor(
    private readonly model: RunsModel,
    private readonly onOpen: (target: OpenTarget) => void
  ) {}

  /** Title and chips from the model (the chart keeps its plot until `plot`). */
  render(): void {
    this.node.replaceChildren();
    const sel = this.model.selection;
    const m = this.model.selectedModel();
    if (!sel || !m) {
      return;
    }
    const title = h('div', 'diffract-detail-title');
    title.append(h('b', '', m.model_id), h('span', 'diffract-muted', ` · ${m.slices} slices · ${m.framework ?? ''}`));
    const openBtn = h('button', 'jp-Button jp-mod-styled jp-mod-accept diffract-open', 'Open in notebook');
    openBtn.addEventListener('click', () => this.onOpen({ store: sel.store, model: sel.model, field: this.model.selection?.field || undefined }));
    this.node.append(title, openBtn);
    if (!m.fields.length) {
      this.node.append(h('div', 'diffract-empty', 'No fields computed for this model yet: session.compute.apply("pl_alpha")'));
      return;
    }
    const chips = h('div', 'diffract-fields');
    for (const f of m.fields) {
      const c = h('button', 'diffract-field' + (f === sel.field ? ' diffract-on' : ''), f);
      c.dataset.field = f;
      c.addEventListener('click', () => void this.model.selectField(f));
      chips.append(c);
    }
    this.node.append(chips, this.chart);
  }

  /** Draw the model's current field (again: after a theme change). */
  async plot(): Promise<void> {
    const state = this.model.field;
    if (state && state.selection === this.model.selection && this.chart.isConnected) {
      await renderChart(this.chart, state);
    }
  }
}
