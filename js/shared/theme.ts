/** Styles of the widgets: JupyterLab CSS variables, with fallbacks for other front ends. */
export const WIDGET_CSS = `
.diffract-w { font-family: var(--jp-ui-font-family, system-ui, sans-serif); font-size: var(--jp-ui-font-size1, 13px);
  color: var(--jp-ui-font-color1, #1a1a1a); background: var(--jp-layout-color1, transparent);
  border: 1px solid var(--jp-border-color2, #ddd); border-radius: 6px; padding: 8px 10px; max-width: 960px; }
.diffract-w .d-row { display: flex; gap: 8px; align-items: flex-start; margin: 6px 0; flex-wrap: wrap; }
.diffract-w .d-label { min-width: 88px; color: var(--jp-ui-font-color2, #555); padding-top: 3px; }
.diffract-w .d-head { display: flex; justify-content: space-between; align-items: center; font-weight: 600; }
.diffract-w input[type=text], .diffract-w textarea { font-family: var(--jp-code-font-family, monospace);
  font-size: var(--jp-code-font-size, 12px); color: var(--jp-ui-font-color1, #1a1a1a);
  background: var(--jp-input-background, var(--jp-layout-color1, #fff));
  border: 1px solid var(--jp-border-color1, #bbb); border-radius: 3px; padding: 3px 6px; flex: 1; min-width: 240px; }
.diffract-w input.d-invalid { border-color: var(--jp-error-color1, #c62828); }
.diffract-w .d-chip { border: 1px solid var(--jp-border-color1, #bbb); border-radius: 12px; padding: 1px 10px;
  background: var(--jp-layout-color2, #f0f0f0); color: var(--jp-ui-font-color1, #1a1a1a); cursor: pointer; font-size: 12px; }
.diffract-w .d-chip.d-on { background: var(--jp-brand-color1, #1976d2); border-color: var(--jp-brand-color1, #1976d2);
  color: var(--jp-ui-inverse-font-color1, #fff); }
.diffract-w .d-chips { display: flex; flex-wrap: wrap; gap: 4px; flex: 1; }
.diffract-w .d-error { color: var(--jp-error-color1, #c62828); font-size: 12px; min-height: 1em; margin-left: 96px; }
.diffract-w .d-count { font-weight: 600; color: var(--jp-brand-color1, #1976d2); }
.diffract-w table { border-collapse: collapse; width: 100%; font-size: 12px; }
.diffract-w th, .diffract-w td { text-align: left; padding: 2px 8px; border-bottom: 1px solid var(--jp-border-color2, #e5e5e5); }
.diffract-w th { color: var(--jp-ui-font-color2, #555); font-weight: 600; }
.diffract-w .d-preview { max-height: 240px; overflow: auto; }
.diffract-w .diffract-preview table { table-layout: fixed; }
.diffract-w .diffract-preview th:nth-child(1) { width: 22%; }
.diffract-w .diffract-preview th:nth-child(3) { width: 6em; }
.diffract-w .diffract-preview th:nth-child(4) { width: 7em; }
.diffract-w .diffract-preview td { overflow-wrap: anywhere; vertical-align: top; }
.diffract-w th.diffract-sortable { cursor: pointer; user-select: none; white-space: nowrap; }
.diffract-w .d-pager { display: flex; align-items: center; gap: 6px; margin-top: 4px; }
.diffract-w .d-pager .d-msg { margin-top: 0; }
.diffract-w .d-hint { font-size: 12px; margin: 2px 0 2px 96px; color: var(--jp-warn-color0, #8a5a00); }
.diffract-w .d-hint .d-chip { font-size: 11px; padding: 0 8px; }
.diffract-w .diffract-code { font-family: var(--jp-code-font-family, monospace); font-size: 12px; overflow-wrap: anywhere; flex: 1; }
.diffract-w code { font-family: var(--jp-code-font-family, monospace); font-size: 11px; color: var(--jp-ui-font-color2, #555); word-break: break-all; }
.diffract-w button { font-size: 12px; padding: 2px 10px; border-radius: 3px; cursor: pointer;
  border: 1px solid var(--jp-border-color1, #bbb); background: var(--jp-layout-color2, #f0f0f0); color: var(--jp-ui-font-color1, #1a1a1a); }
.diffract-w button:disabled { opacity: 0.5; cursor: default; }
.diffract-w button.d-danger { border-color: var(--jp-error-color1, #c62828); color: var(--jp-error-color1, #c62828); }
.diffract-w .d-bar { height: 10px; background: var(--jp-layout-color3, #ddd); border-radius: 5px; overflow: hidden; flex: 1; min-width: 200px; margin-top: 4px; }
.diffract-w .d-bar > div { height: 100%; background: var(--jp-brand-color1, #1976d2); transition: width 0.2s; }
.diffract-w.d-status-cancelling .d-bar > div { background: var(--jp-warn-color1, #f57c00); }
.diffract-w.d-status-cancelled .d-bar > div { background: var(--jp-ui-font-color3, #9e9e9e); }
.diffract-w .diffract-pct { min-width: 3em; text-align: right; font-variant-numeric: tabular-nums; }
.diffract-w .d-detail summary { cursor: pointer; color: var(--jp-ui-font-color2, #555); }
.diffract-w.d-status-error .d-bar > div { background: var(--jp-error-color1, #c62828); }
.diffract-w.d-status-done .d-bar > div { background: var(--jp-success-color1, #388e3c); }
.diffract-w .d-stats { display: flex; gap: 14px; flex-wrap: wrap; color: var(--jp-ui-font-color2, #555); font-size: 12px; }
.diffract-w .d-stats b { color: var(--jp-ui-font-color1, #1a1a1a); font-weight: 600; }
.diffract-w .d-failures { font-size: 12px; margin-top: 4px; }
.diffract-w .d-failures summary { cursor: pointer; color: var(--jp-error-color1, #c62828); }
.diffract-w .d-failures table { border-collapse: collapse; margin-top: 4px; }
.diffract-w .d-failures td, .diffract-w .d-failures th { padding: 1px 8px 1px 0; text-align: left; vertical-align: top; }
.diffract-w .d-outcome { font-size: 12px; font-weight: 600; margin-top: 4px; }
.diffract-w .d-msg { font-size: 12px; color: var(--jp-ui-font-color2, #555); margin-top: 4px; }
`;

export function injectStyle(root: HTMLElement): void {
  const style = document.createElement('style');
  style.textContent = WIDGET_CSS;
  root.appendChild(style);
}
