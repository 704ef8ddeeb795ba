/** The selected model: its title, "Open in notebook", the field chips and the chart; for a
 * tracked checkpoint, its run across training under the chart. */
import type { OpenTarget } from './cellcode';
import { renderChart, resizeChart } from './chart';
import { layerBadges } from './diagnosis';
import { h } from './dom';
import { renderEsd } from './esdview';
import { renderEvolution } from './evolutionview';
import { GROUP_TITLES, groupFields } from './fieldgroups';
import type { RunsModel } from './model';

export class DetailView {
  readonly node = h('div', 'diffract-detail');
  private readonly chart = h('div', 'diffract-chart');
  /** the clicked slice's spectrum (under the chart; empty until a point is clicked) */
  private readonly esdBox = h('div', 'diffract-esd-box');
  private readonly esdChart = h('div', 'diffract-esd');
  /** a tracked checkpoint's run across training (under the chart; only for checkpoints) */
  private readonly evolutionBox = h('div', 'diffract-evolution-box');
  private readonly evolutionChart = h('div', 'diffract-evolution');
  private readonly evolutionNote = h('div', 'diffract-evolution-note diffract-muted');
  /** Bring the across-training chart into view once it is drawn (asked from a run's row). */
  revealEvolution = false;
  /** The search box's text: only chips containing it are shown. */
  query = '';
  /** Whether the arrays and intermediates (esd, spectrum_path, ...) are shown. */
  showArrays = false;

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
    const name = h('b', 'diffract-ellipsis', m.model_id);
    name.title = m.model_id;
    title.append(name, h('span', 'diffract-muted', ` · ${m.slices} slices · ${m.framework ?? ''}`));
    const openBtn = h('button', 'jp-Button jp-mod-styled jp-mod-accept diffract-open', 'Open in notebook');
    openBtn.title = 'Insert a cell that opens this store read-only, this model and the chosen field';
    openBtn.addEventListener('click', () => this.onOpen({ store: sel.store, model: sel.model, field: this.model.selection?.field || undefined }));
    this.node.append(title, openBtn);
    if (!m.fields.length) {
      this.node.append(h('div', 'diffract-empty', 'No fields computed for this model yet: session.compute.apply("pl_alpha")'));
      return;
    }
    const chips = h('div', 'diffract-fields');
    // the search box filters the chips when some field contains its text (else it named a
    // store or a model: every chip stays)
    const matching = groupFields(m.fields, this.query);
    const groups = matching.length ? matching : groupFields(m.fields);
    for (const { group, fields } of groups) {
      if (group === 'array') {
        const toggle = h('button', 'diffract-toggle-arrays', `${this.showArrays ? '▾' : '▸'} ${GROUP_TITLES.array} (${fields.length})`);
        toggle.title = 'Fields holding an array per slice, or intermediates: the chart has no number per layer for them';
        toggle.addEventListener('click', () => {
          this.showArrays = !this.showArrays;
          this.render();
        });
        chips.append(toggle);
        if (!this.showArrays && fields.includes(sel.field)) {
          // the field shown stays visible
          fields.splice(0, fields.length, sel.field);
        } else if (!this.showArrays) {
          continue;
        }
      }
      const box = h('div', 'diffract-field-group');
      box.dataset.group = group;
      if (group !== 'array') {
        box.append(h('div', 'diffract-group-title', GROUP_TITLES[group]));
      }
      const row = h('div', 'diffract-chip-row');
      for (const f of fields) {
        const c = h('button', 'diffract-field' + (f === sel.field ? ' diffract-on' : ''), f);
        c.dataset.field = f;
        c.addEventListener('click', () => void this.model.selectField(f));
        row.append(c);
      }
      box.append(row);
      chips.append(box);
    }
    this.node.append(chips, this.chart);
    if (m.track) {
      this.evolutionBox.dataset.run = m.track.run;
      this.evolutionBox.replaceChildren(this.evolutionChart, this.evolutionNote);
      this.node.append(this.evolutionBox);
    }
    const diag = layerBadges(this.model.diagnosis(sel.store, sel.model));
    if (diag) {
      this.node.append(diag);
    }
    this.node.append(this.esdBox);
  }

  /** Show the model's open spectrum (or hide the box when none is open). */
  async plotEsd(): Promise<void> {
    const state = this.model.esd;
    this.esdBox.hidden = !state;
    if (!state) {
      this.esdBox.replaceChildren();
      return;
    }
    const close = h('button', 'diffract-esd-close', '×');
    close.title = 'Close the spectrum';
    close.addEventListener('click', () => this.model.closeEsd());
    const head = h('div', 'diffract-esd-head diffract-muted', `spectrum of ${state.name} (${state.model})`);
    head.append(close);
    this.esdBox.replaceChildren(head, this.esdChart);
    if (this.esdChart.isConnected) {
      await renderEsd(this.esdChart, state);
      // the spectrum opens under the chart, often below the sidebar's fold: bring it (its
      // title first) into view
      this.esdBox.scrollIntoView?.({ block: 'nearest' });
    }
  }

  /** Fit the charts to the sidebar's width (the run across training is drawn again: its
   * step labels and title are fitted to the width). */
  async resize(): Promise<void> {
    await resizeChart(this.chart);
    await resizeChart(this.esdChart);
    await this.plotEvolution();
  }

  /** Draw the selected checkpoint's run across training (again: after a theme change). */
  async plotEvolution(): Promise<void> {
    const state = this.model.evolution;
    if (!state || state.selection !== this.model.selection || !this.evolutionChart.isConnected) {
      return;
    }
    await renderEvolution(this.evolutionChart, this.evolutionNote, state, model => void this.model.select(state.selection.store, model));
    if (this.revealEvolution) {
      this.revealEvolution = false;
      this.evolutionBox.scrollIntoView?.({ block: 'nearest' });
    }
  }

  /** Draw the model's current field (again: after a theme change). */
  async plot(): Promise<void> {
    const state = this.model.field;
    if (state && state.selection === this.model.selection && this.chart.isConnected) {
      await renderChart(this.chart, state, p => void this.model.openEsd(p.uid, p.name));
    }
  }
}
