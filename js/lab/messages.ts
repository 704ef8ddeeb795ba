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

