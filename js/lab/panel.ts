/** The "Weight runs" sidebar widget: the header, banners and search box around the two views,
 * re-rendered from the model's signals. */
import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import type { OpenTarget } from './cellcode';
import { DetailView } from './detail';
import { h } from './dom';
import type { RunsModel, VersionState } from './model';
import { StoreListView } from './storelist';

export const PANEL_ID = 'diffract-runs';

const ICON_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
<g class="jp-icon3" fill="#616161"><rect x="3" y="13" width="3" height="8"/><rect x="8" y="8" width="3" height="13"/>
<rect x="13" y="4" width="3" height="17"/><rect x="18" y="10" width="3" height="11"/></g></svg>`;
const runsIcon = new LabIcon({ name: 'diffract-lab:runs', svgstr: ICON_SVG });

export class RunsPanel extends Widget {
  readonly list: StoreListView;
  readonly detail: DetailView;
  private readonly versionNote = h('div', 'diffract-banner diffract-version');
  private readonly errorNote = h('div', 'diffract-banner diffract-error');
  private readonly search = h('input', 'jp-mod-styled diffract-search');

  constructor(
    readonly model: RunsModel,
    onOpen: (target: OpenTarget) => void
  ) {
    super();
    this.id = PANEL_ID;
    this.addClass('diffract-runs');
    this.title.icon = runsIcon;
    this.title.caption = 'Weight runs (diffract stores)';
    this.list = new StoreListView(model, (store, run) => {
      this.detail.revealEvolution = true;
      void model.selectRun(store, run);
    });
    this.detail = new DetailView(model, onOpen);

    const head = h('div', 'diffract-head');
    head.append(h('span', 'diffract-title', 'Weight runs'));
    const reload = h('button', 'jp-Button diffract-reload', '↻');
    reload.title = 'Refresh';
    reload.addEventListener('click', () => void model.refresh(true));
    head.append(reload);
    this.search.placeholder = 'Filter stores, models, fields…';
    this.search.addEventListener('input', () => {
      this.list.query = this.search.value;
      this.detail.query = this.search.value;
      this.list.render();
      this.detail.render();
    });
    this.versionNote.hidden = true;
    this.errorNote.hidden = true;
    this.node.append(head, this.versionNote, this.errorNote, this.search, this.list.node, this.detail.node);

    model.changed.connect(this.onChanged, this);
    model.selectionChanged.connect(this.onChanged, this);
    model.fieldChanged.connect(this.onField, this);
    model.errorChanged.connect(this.onError, this);
    model.versionChanged.connect(this.onVersion, this);
    model.esdChanged.connect(this.onEsd, this);
    model.evolutionChanged.connect(this.onEvolution, this);
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.model.dispose();
    super.dispose();
  }

  /** Re-plot in the new theme's colours (from the model's data: no request). */
  onThemeChanged(): void {
    void this.detail.plot();
    void this.detail.plotEsd();
    void this.detail.plotEvolution();
  }

  protected onAfterAttach(): void {
    this.model.start();
  }

  protected onBeforeDetach(): void {
    this.model.stop();
  }

  /** The sidebar was dragged wider or narrower: the chart follows (the rest is CSS). */
  protected onResize(): void {
    void this.detail.resize();
  }

  protected onAfterShow(): void {
    void this.model.refresh(false);
  }

  private onChanged(): void {
    this.list.render();
    this.detail.render();
    void this.detail.plotEsd(); // render() rebuilt the detail: the open spectrum comes back
  }

  private onField(): void {
    void this.detail.plot();
  }

  private onEsd(): void {
    void this.detail.plotEsd();
  }

  private onEvolution(): void {
    void this.detail.plotEvolution();
  }

  private onError(_: RunsModel, message: string | null): void {
    this.errorNote.hidden = message === null;
    this.errorNote.textContent = message ?? '';
  }

  private onVersion(_: RunsModel, v: VersionState): void {
    this.versionNote.hidden = v.mismatch === null;
    this.versionNote.textContent = v.mismatch ?? '';
    this.node.dataset.serverVersion = v.server;
  }
}
