/**
 * Galata + @playwright/test with Debian's Chromium (no browser download). Playwright starts
 * JupyterLab (see jupyter_server_test_config.py) and stops it at the end.
 */
const base = require('@jupyterlab/galata/lib/playwright-config');
const { execFileSync } = require('child_process');
const path = require('path');
const os = require('os');
const fs = require('fs');

/**
 * A port no one listens on: a throwaway node process binds port 0 on 127.0.0.1 (node's net
 * module), prints what the OS gave it and closes it. Synchronous, because Playwright reads this
 * config synchronously; kept in the environment, so Playwright's workers (which read the config
 * again) and the server config (jupyter_server_test_config.py) use the same port.
 */
function freePort() {
  const script =
    "const s = require('net').createServer();" +
    "s.listen(0, '127.0.0.1', () => { process.stdout.write(String(s.address().port)); s.close(); });";
  return execFileSync(process.execPath, ['-e', script], { encoding: 'utf8' }).trim();
}

if (!process.env.DIFFRACT_UI_PORT) {
  process.env.DIFFRACT_UI_PORT = freePort();
}
const port = process.env.DIFFRACT_UI_PORT;
const token = process.env.DIFFRACT_UI_TOKEN || 'diffract-ui-token';
if (!process.env.DIFFRACT_UI_ROOT) {
  process.env.DIFFRACT_UI_ROOT = fs.mkdtempSync(path.join(os.tmpdir(), 'diffract-ui-'));
}
const venvBin = path.resolve(__dirname, '..', '.venv', 'bin');
const jupyter = fs.existsSync(path.join(venvBin, 'jupyter')) ? path.join(venvBin, 'jupyter') : 'jupyter';

module.exports = {
  ...base,
  testDir: './tests',
  timeout: 120000,
  expect: { timeout: 30000 },
  retries: 0,
  workers: 1,
  reporter: [['list'], ['html', { open: 'never' }]],
  outputDir: './test-results',
  use: {
    ...base.use,
    baseURL: `http://127.0.0.1:${port}`,
    extraHTTPHeaders: { Authorization: `token ${token}` },
    trace: 'off',
    video: 'off',
    screenshot: 'only-on-failure',
    viewport: { width: 1400, height: 900 },
    launchOptions: {
      executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run']
    }
  },
  webServer: {
    command: `${jupyter} lab --config jupyter_server_test_config.py`,
    url: `http://127.0.0.1:${port}/api/status?token=${token}`,
    reuseExistingServer: false,
    timeout: 120000,
    stdout: process.env.DIFFRACT_UI_VERBOSE ? 'pipe' : 'ignore',
    stderr: process.env.DIFFRACT_UI_VERBOSE ? 'pipe' : 'ignore',
    env: { ...process.env, PATH: `${venvBin}:${process.env.PATH}` }
  }
};
