/** "Open in notebook": put the cell that opens a store into the active notebook. */
import type { JupyterFrontEnd } from '@jupyterlab/application';
import { PathExt } from '@jupyterlab/coreutils';
import { INotebookTracker, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';

import { openStoreCode, type OpenTarget } from './cellcode';

/** Put the cell into the active notebook (a new one when none is open): into an empty active code
 * cell, else into a new cell below it. */
export async function openInNotebook(
  app: JupyterFrontEnd,
  notebooks: INotebookTracker | null,
  target: OpenTarget
): Promise<NotebookPanel> {
  let panel = notebooks?.currentWidget ?? null;
  if (!panel) {
    panel = (await app.commands.execute('notebook:create-new', { kernelName: 'python3' })) as NotebookPanel;
    await panel.context.ready;
  }
  const notebook = panel.content;
  const sources = notebook.widgets.map(cell => cell.model.sharedModel.getSource());
  const code = openStoreCode(target, PathExt.dirname(panel.context.path), sources);
  const active = notebook.activeCell;
  if (!(active && active.model.type === 'code' && active.model.sharedModel.getSource().trim() === '')) {
    NotebookActions.insertBelow(notebook);
  }
  notebook.activeCell?.model.sharedModel.setSource(code);
  app.shell.activateById(panel.id);
  return panel;
}
