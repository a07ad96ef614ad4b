/**
 * A real browser for the dashboard tests: Debian's `chromium` driven by `playwright-core`
 * through `executablePath` (no browser download; scripts/setup.sh installs both).
 *
 * `chromiumPath()` says where the binary is, or undefined when it is missing; the tests then
 * skip with that reason, never pass without a browser. Screenshots go to an artifacts folder
 * outside the repository (`TANDEM_DASHBOARD_ARTIFACTS`, else $TMPDIR/tandem-dashboard-artifacts).
 */
import { existsSync, mkdirSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll } from 'vitest';
import { startUp, stopAll, type Up } from '../e2e/up.js';
import { freePort } from '../harness/ports.js';

const CANDIDATES = ['/usr/bin/chromium', '/usr/bin/chromium-browser'];

/** `CHROMIUM_BIN` when set (and only it), else the Debian paths. */
export function chromiumPath(): string | undefined {
  const override = process.env.CHROMIUM_BIN;
  const candidates = override !== undefined && override !== '' ? [override] : CANDIDATES;
  return candidates.find((p) => existsSync(p));
}

export async function launchChromium(): Promise<Browser> {
  const executablePath = chromiumPath();
  if (!executablePath) throw new Error('chromium not found (apt-get install chromium, or set CHROMIUM_BIN)');
  // --no-sandbox: test containers run as root, where chromium's sandbox refuses to start.
  return chromium.launch({ executablePath, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
}

/** Where screenshots go; created on first use. */
export function artifactsDir(): string {
  const dir = process.env.TANDEM_DASHBOARD_ARTIFACTS ?? join(tmpdir(), 'tandem-dashboard-artifacts');
  mkdirSync(dir, { recursive: true });
  return dir;
}

/** Save a full-page screenshot as an artifact; returns its path (also printed, to find it). */
export async function screenshot(page: Page, name: string): Promise<string> {
  const path = join(artifactsDir(), `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  process.stdout.write(`dashboard screenshot: ${path}\n`);
  return path;
}

/** Attribute of the element with `data-testid`, or undefined when the element is absent. */
export async function attr(page: Page, testid: string, name: string): Promise<string | undefined> {
  const el = page.locator(`[data-testid="${testid}"]`).first();
  if ((await el.count()) === 0) return undefined;
  return (await el.getAttribute(name)) ?? undefined;
}

/** Snapshots the page has rendered so far (body[data-snapshots]). */
export async function snapshotsSeen(page: Page): Promise<number> {
  return Number((await page.locator('body').getAttribute('data-snapshots')) ?? 0);
}

/**
 * `runtime up ...args` with the dashboard open in chromium, for one describe block: started in
 * its beforeAll (the tiny model cached in a temp dir named by `prefix`, a free port), closed in
 * its afterAll. The getters are valid inside the block's tests.
 */
export function dashboardOnUp(prefix: string, args: (port: number) => string[]): { page: () => Page; up: () => Up } {
  let cacheDir: string | undefined;
  let browser: Browser | undefined;
  let page: Page | undefined;
  let up: Up | undefined;
  beforeAll(async () => {
    cacheDir = await mkdtemp(join(tmpdir(), prefix));
    browser = await launchChromium();
    up = await startUp(cacheDir, args(await freePort()));
    page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    page.on('pageerror', (err) => process.stderr.write(`dashboard page error: ${err.message}\n`));
    await page.goto(`${up.url}/dashboard`);
  }, 120_000);
  afterAll(async () => {
    await browser?.close();
    if (up) await stopAll([up]);
    if (cacheDir) await rm(cacheDir, { recursive: true, force: true });
  }, 60_000);
  return { page: () => page!, up: () => up! };
}
