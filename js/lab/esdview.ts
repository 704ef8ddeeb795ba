/** The spectrum (ESD) of one slice in the sidebar: the server's `esd` figure (histogram of
 * the eigenvalues on log bins, power-law fit, xmin line, MP bulk), built in Python by
 * `diffract.viz`; Plotly, loaded lazily, only renders it. */
import { clearMessages, drawFigure, plotly } from './chart';
import { h } from './dom';
import type { EsdState } from './types';

/** Draw `state` into `node`: the figure, or a message saying why there is none. */
export async function renderEsd(node: HTMLElement, state: EsdState): Promise<void> {
  node.dataset.uid = state.uid;
  node.dataset.name = state.name;
  if (state.error || !state.values || !state.values.length || !state.figure) {
    if (node.classList.contains('js-plotly-plot')) {
      (await plotly()).purge(node);
    }
    delete node.dataset.eigenvalues;
    const text =
      state.error ??
      (state.values?.length
        ? `The server drew no spectrum for ${state.name}.`
        : `No spectrum stored for ${state.name}: session.compute.apply("esd") computes it (biases and vectors have none).`);
    node.replaceChildren(h('div', 'diffract-empty', text));
    return;
  }
  clearMessages(node);
  await drawFigure(node, state.figure, 220);
  node.dataset.eigenvalues = String(state.values.length);
  node.dataset.xmin = state.xmin != null ? String(state.xmin) : '';
}
