/** What the sidebar says when something is wrong, and what to do about it (plain strings, no DOM). */

/** An error's own message (an ApiError carries the server's), else the value as text. */
export function messageOf(e: unknown): string {
  const message = (e as { message?: unknown } | null)?.message;
  return typeof message === 'string' ? message : String(e);
}

/** A message that says what went wrong and what to do about it. */
export function errorMessage(e: unknown): string {
  const status = (e as { status?: unknown } | null)?.status;
  if (status === 404) {
    return (
      'The diffract server extension is not answering (HTTP 404). Enable it with ' +
      '"jupyter server extension enable diffract" and restart JupyterLab.'
    );
  }
  if (status === 403) {
    return 'The server refused the request (HTTP 403): log in to JupyterLab again.';
  }
  return `Cannot list stores: ${messageOf(e)}`;
}

/** The banner for a front end and server of different versions (null when they agree). */
export function mismatchMessage(client: string, server: string): string | null {
  if (client === server) {
    return null;
  }
  return (
    `Version mismatch: this page runs the diffract-lab front end ${client}, the server has diffract-lab ${server}. ` +
    `Install one version in the environment that runs JupyterLab (pip install "diffract-lab==${server}"), ` +
    'restart JupyterLab, then reload this page.'
  );
}

/** "step 9", "steps 9, 10 and 100", "steps 9, 10, 20, … (12 in all)" */
export function stepList(steps: readonly number[], max = 6): string {
  if (steps.length === 1) {
    return `step ${steps[0]}`;
  }
  if (steps.length > max) {
    return `steps ${steps.slice(0, max - 1).join(', ')}, … (${steps.length} in all)`;
  }
  return `steps ${steps.slice(0, -1).join(', ')} and ${steps[steps.length - 1]}`;
}

/**
 * Why a tracked run's across-training view has nothing to draw yet, and what to do (null: it
 * can be drawn). `steps`: the run's committed steps; `holding`: those whose checkpoint holds
 * `field`; `perLayer`: the field has a number per layer.
 */
export function evolutionBlocker(field: string, run: string, steps: readonly number[], holding: readonly number[], perLayer: boolean): string | null {
  if (!perLayer) {
    return `${field} has no number per layer to follow across training: pick a per-layer field (pl_alpha, stable_rank, ...) above.`;
  }
  if (steps.length < 2) {
    return (
      `The across-training view needs two steps: run ${run} has one checkpoint so far (${stepList(steps)}). ` +
      'It fills in by itself when the tracker commits the next step.'
    );
  }
  if (holding.length < 2) {
    return (
      `${field} is stored at ${holding.length} of the ${steps.length} steps of run ${run}` +
      (holding.length ? ` (${stepList(holding)})` : '') +
      `: the across-training view needs two. session.compute.apply("${field}") computes it for the other checkpoints (only what is missing).`
    );
  }
  return null;
}

/** Under a drawn across-training chart: the run's steps it has no column for, and what to do. */
export function missingStepsNote(field: string, missing: readonly number[]): string | null {
  if (!missing.length) {
    return null;
  }
  return `No ${field} at ${stepList(missing)} (no column): session.compute.apply("${field}") computes it there.`;
}
