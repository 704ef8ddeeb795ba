/** The one helper for every call to the diffract server extension (`/diffract/api/<endpoint>`). */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** A failed call: the server's own message (or the HTTP status text) and the status (0: unreachable). */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

/** The shape of `requestAPI`, so the sidebar model can be given a fake in tests. */
export type RequestFn = <T>(endpoint: string, query?: Record<string, string>) => Promise<T>;

export async function requestAPI<T>(endpoint: string, query: Record<string, string> = {}): Promise<T> {
  const settings = ServerConnection.makeSettings();
  const qs = new URLSearchParams(query).toString();
  const url = URLExt.join(settings.baseUrl, 'diffract', 'api', endpoint) + (qs ? `?${qs}` : '');
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, {}, settings);
  } catch (error) {
    throw new ApiError(`cannot reach the Jupyter server (${String(error)})`, 0);
  }
  const text = await response.text();
  let data: any = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    const msg = data && typeof data.error === 'string' ? data.error : data && data.message ? data.message : response.statusText;
    throw new ApiError(msg || `HTTP ${response.status}`, response.status);
  }
  return data as T;
}
