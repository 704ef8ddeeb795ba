/**
 * The wire contract: synced traits of the widgets and the JSON of the server API.
 * Mirrors python/diffract/_vocab/wire.py (checked by tests/widgets/test_widgets_wire.py), the widgets'
 * synced traitlets and the server extension's answers. The widget model itself is anywidget's
 * `AnyModel<State>` from `@anywidget/types`.
 */

export interface PreviewRow {
  model_id: string;
  name: string;
  type: string;
  shape: string;
  uid: string;
}

export interface FilterBuilderState {
  available_models: string[];
  available_types: string[];
  model_ids: string[];
  names: string;
  param_types: string[];
  uids: string;
  error: string;
  count: number;
  total: number;
  preview: PreviewRow[];
  preview_limit: number;
  filter_json: string;
  /** the preview's sort column ('' keeps the store's order) */
  sort_by: '' | 'model_id' | 'name' | 'type' | 'shape';
  sort_desc: boolean;
  /** the preview page shown, 0-based, `preview_limit` rows each */
  page: number;
  /** "did you mean" for exact names and types that match nothing */
  hints: FilterHint[];
  /** the `.filter(...)` line that selects the same slices */
  code: string;
}

export interface FilterHint {
  kind: 'name' | 'type';
  given: string;
  suggestions: string[];
}

export type ProgressStatus = 'waiting' | 'running' | 'cancelling' | 'cancelled' | 'done' | 'error';

/** One failure as the progress widget lists it. */
export interface ProgressFailure {
  model_id: string;
  slice: string;
  uid: string;
  field: string;
  kernel: string;
  error: string;
}

export interface ProgressState {
  fields: string[];
  status: ProgressStatus;
  chunks_done: number;
  chunks_total: number;
  slices_done: number;
  slices_total: number;
  /** slices whose values are committed to the store (slices_done also counts those reached) */
  slices_stored: number;
  kernel_calls: number;
  /** requested values (a requested field on a slice) made, and planned */
  values_done: number;
  values_total: number;
  /** share of the planned work done (0..1): the bar; never goes back while running */
  fraction: number;
  /** the requested field in progress ("" for a step the requested fields share) */
  field: string;
  /** the slice in progress (model:slice) */
  param: string;
  /** the kernel in progress, its slices, kernel steps, chunks */
  detail: string;
  elapsed: number;
  eta: number | null;
  /** the range of the time left; null until it means something */
  eta_low: number | null;
  eta_high: number | null;
  failures: number;
  failure_list: ProgressFailure[];
  /** the final one-line summary: empty while the run goes on */
  outcome: string;
  message: string;
  cancellable: boolean;
  cancel_requested: boolean;
}

export interface VersionReply {
  version: string;
  api: number;
  package: string;
}

export interface StoreEntry {
  path: string;
  name: string;
  segments: number;
  updated: number;
  stamp: string;
}

export interface StoresReply {
  root: string;
  stores: StoreEntry[];
}

export interface ModelEntry {
  model_id: string;
  slices: number;
  fields: string[];
  framework: string | null;
  added: number | null;
  /** when its fields last changed, at the latest (the server's ChangeClock) */
  changed: number | null;
  /** a tracked checkpoint's run and step, else null */
  track: TrackEntry | null;
}

export interface TrackEntry {
  run: string;
  step: number;
}

export interface ManifestEntry {
  identity: string;
  label: string | null;
  teacher_id: string | null;
  mode: string;
  n_eligible: number;
  n_selected: number;
  n_excluded: number;
  models: string[];
}

export interface StoreReply extends StoreEntry {
  models: ModelEntry[];
  fields: string[];
  levels: Record<string, string>;
  manifests: ManifestEntry[];
}

export interface FieldPoint {
  name: string;
  uid: string;
  type: string;
  index: number;
  value: number | string | boolean | null;
}

export interface FieldReply extends StoreEntry {
  field: string;
  models: { model_id: string; points: FieldPoint[]; value: number | null }[];
}

/** One slice's spectrum (`GET /diffract/api/esd?path=&uid=`): the sidebar's ESD view. */
export interface EsdReply extends StoreEntry {
  uid: string;
  name: string;
  model_id: string;
  field: string;
  /** the eigenvalues, or null when the store holds no spectrum for the slice */
  values: number[] | null;
  xmin: number | null;
  alpha: number | null;
}

/** A Plotly figure as Python's `diffract.viz` builds it (`{data, layout}`, plain JSON). */
export interface FigureSpec {
  data: Record<string, unknown>[];
  layout: Record<string, unknown>;
}

/** One figure (`GET /diffract/api/figure?kind=&store=&...`): what the sidebar's charts draw. */
export interface FigureReply {
  kind: string;
  path: string;
  figure: FigureSpec;
}

/** FieldPanel's synced traits (python/diffract/widgets/panel.py): the figure as Plotly JSON
 * (what Python's `diffract.viz` built), the status line, the CSV download and the toolbar's
 * image format. */
export interface PanelState {
  figure_json: string;
  status_html: string;
  csv_href: string;
  download_name: string;
  value_count: number;
  image_format: string;
  height: number;
}
