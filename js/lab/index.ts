/**
 * JupyterLab 4 plugin: the "Weight runs" sidebar. Lists the diffract stores under the server
 * root (through the diffract server extension), their models and fields, plots a field across
 * layers (and a tracked checkpoint's run across training), and inserts a cell that opens a
 * store into the active notebook.
 *
 * api.ts (the server call) <- model.ts (polling, cache, signals) <- storelist.ts, detail.ts,
 * chart.ts, esdview.ts, evolutionview.ts (views) <- panel.ts (the widget) <- this file (wiring).
 */
import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { IThemeManager } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';

import pkg from '../../package.json';
import { requestAPI } from './api';
import { RunsModel } from './model';
import { openInNotebook } from './notebook';
import { PANEL_ID, RunsPanel } from './panel';

export const VERSION: string = pkg.version;
export { RunsModel } from './model';
export { RunsPanel } from './panel';

const plugin: JupyterFrontEndPlugin<RunsPanel> = {
  id: 'diffract-lab:runs',
  description: 'The "Weight runs" sidebar: diffract stores, models, fields and charts.',
  autoStart: true,
  // app.shell, not ILabShell: Notebook 7 has no ILabShell (its shell has a left area too), and
  // requiring it left the plugin unactivated there with a console error
  optional: [ILayoutRestorer, INotebookTracker, IThemeManager],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    notebooks: INotebookTracker | null,
    themes: IThemeManager | null
  ): RunsPanel => {
    const model: RunsModel = new RunsModel({ request: requestAPI, version: VERSION, isActive: (): boolean => panel.isVisible });
    const panel = new RunsPanel(model, target => void openInNotebook(app, notebooks, target));
    const shell = app.shell;
    shell.add(panel, 'left', { rank: 600 });
    if (restorer) {
      restorer.add(panel, PANEL_ID);
    }
    if (themes) {
      themes.themeChanged.connect(() => panel.onThemeChanged());
    }
    app.commands.addCommand('diffract:open-runs', {
      label: 'Show Weight runs',
      execute: () => shell.activateById(PANEL_ID)
    });
    return panel;
  }
};

export default plugin;
