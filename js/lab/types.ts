/** The sidebar model's state, as the views read it. */
import type { FieldPoint, FigureSpec } from '../shared/wire';
import type { RequestFn } from './api';

export interface Selection {
  readonly store: string;
  readonly model: string;
  readonly field: string;
}

/** The selected field, ready to plot: its per-layer numbers, or its model-level value, or why not. */
export interface FieldState {
  readonly selection: Selection;
  /** Per-layer points with a numeric value, in layer order. */
  readonly points: FieldPoint[];
  /** The model-level value when the field has one (and no per-layer numbers). */
  readonly value: number | null;
  /** The chart: the `layers` figure of the figure route, built in Python (null: no points). */
  readonly figure: FigureSpec | null;
  readonly error: string | null;
}

/**
 * The selected checkpoint's tracked run across its steps: the `evolution` figure of the figure
 * route for the selected field (a layer x step heatmap and one line per layer), or why not.
 */
export interface EvolutionState {
  readonly selection: Selection;
  readonly run: string;
  /** the selected checkpoint's step (the chart marks its column) */
  readonly step: number;
  /** the run's committed steps, in step order (the store summary's checkpoints of the run) */
  readonly steps: number[];
  /** the steps whose checkpoint does not hold the field (the figure has no column for them) */
  readonly missing: number[];
  /** The chart: the route's `evolution` figure (null: nothing to draw, `message` says why). */
  readonly figure: FigureSpec | null;
  /** Why there is no chart and what to do (null: the figure is drawn). */
  readonly message: string | null;
  /** The message is a failed request (not an empty state). */
  readonly failed: boolean;
}

/** The spectrum of one slice, opened by clicking its point on the chart. */
export interface EsdState {
  readonly store: string;
  readonly model: string;
  readonly uid: string;
  readonly name: string;
  /** the eigenvalues (null: none stored for this slice) */
  readonly values: number[] | null;
  readonly xmin: number | null;
  readonly alpha: number | null;
  /** The chart: the `esd` figure of the figure route (histogram, fit, xmin, MP bulk). */
  readonly figure: FigureSpec | null;
  readonly error: string | null;
}

export interface VersionState {
  readonly client: string;
  readonly server: string;
  /** What to do about a mismatch, or null when both sides run the same version. */
  readonly mismatch: string | null;
}

export interface RunsModelOptions {
  /** The server call (api.ts `requestAPI` in JupyterLab, a fake in tests). */
  request: RequestFn;
  /** The front end's own version (package.json). */
  version: string;
  /** Polls only while this says yes (the panel is visible). */
  isActive?: () => boolean;
  pollMs?: number;
}
