/**
 * A newcomer opens `/dashboard` of a keyed `runtime up` (issue 34 §3.2, §3.4), in a real chromium:
 * `runtime up --workers 1 --embedding-workers 1 --api-key KEY` (mocker).
 *
 * - Without the key the browser gets the page with a key prompt (not a JSON 401) and no panels;
 *   a wrong key is refused there; the right one opens the live dashboard. The key never travels
 *   in a URL, is kept in no storage the page's script can read, and the data routes still refuse
 *   a request without it. A link with a wrong `?api_key=` lands on the prompt, saying so.
 * - The Fleet panel and the routing decisions name workers as `up` and its logs do (agg-0,
 *   embed-0), each row still marked with the instance id the worker logged.
 * Skipped without chromium.
 */
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { upForBlock } from '../e2e/up.js';
import { attr, chromiumPath, launchChromium, screenshot } from './browser.js';

const KEY = 'sk-dashboard-prompt';
const CHROMIUM = chromiumPath();
const suite = CHROMIUM ? describe : describe.skip;
if (!CHROMIUM) process.stderr.write('dashboard key prompt browser test SKIPPED: chromium not found (apt-get install chromium, or set CHROMIUM_BIN)\n');

/** name → instance id, from the children's "worker ready" lines `up` forwards as `[name] {json}`. */
function instanceIds(out: string): Map<string, string> {
  const ids = new Map<string, string>();
  for (const m of out.matchAll(/^\[([\w-]+)\] (\{.*"msg":"worker ready".*\})$/gm)) ids.set(m[1]!, (JSON.parse(m[2]!) as { instanceId: string }).instanceId);
  return ids;
}

suite('dashboard behind --api-key: the key prompt, and workers named as up names them', () => {
  const served = upForBlock('tandem-dashboard-prompt-', async () => ['--engine', 'mocker', '--model', 'tiny', '--workers', '1', '--embedding-workers', '1', '--speedup-ratio', '100', '--api-key', KEY]);
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  /** Every URL the browser asked for. */
  const requested: string[] = [];

  beforeAll(async () => {
    browser = await launchChromium();
    context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
    context.on('request', (r) => requested.push(r.url()));
    page = await context.newPage();
    page.on('pageerror', (err) => process.stderr.write(`dashboard page error: ${err.message}\n`));
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
  });

  it('without the key: the page with a key prompt, not a JSON 401, and no panels', async () => {
    const first = await page.goto(`${served.url()}/dashboard`);
    expect(first?.headers()['content-type']).toMatch(/^text\/html/);
    await expect.poll(() => attr(page, 'conn-status', 'data-state'), { timeout: 15_000 }).toBe('auth');
    expect(await page.locator('[data-testid="auth-form"]').isVisible()).toBe(true);
    expect(await page.locator('[data-testid="auth-error"]').isVisible()).toBe(false);
    expect(await page.locator('[data-testid="panel-fleet"]').isVisible()).toBe(false);
    await screenshot(page, 'dashboard-key-prompt');
  }, 30_000);

  it('a wrong key is refused on the prompt; the right one opens the live dashboard', async () => {
    await page.locator('[data-testid="auth-input"]').fill('not-the-key');
    await page.locator('[data-testid="auth-submit"]').click();
    await expect.poll(() => page.locator('[data-testid="auth-error"]').isVisible(), { timeout: 10_000 }).toBe(true);
    expect(await attr(page, 'conn-status', 'data-state')).toBe('auth');

    await page.locator('[data-testid="auth-input"]').fill(KEY);
    await page.locator('[data-testid="auth-submit"]').click();
    await expect.poll(() => attr(page, 'conn-status', 'data-state'), { timeout: 15_000 }).toBe('live');
    expect(await page.locator('[data-testid="panel-fleet"]').isVisible()).toBe(true);
    expect(await page.locator('[data-testid="auth-form"]').isVisible()).toBe(false);
    await expect.poll(() => attr(page, 'pool-aggregated', 'data-worker-count'), { timeout: 15_000 }).toBe('2');
  }, 60_000);

  it('the key was in no URL, is in no storage the script can read, and the data still needs it', async () => {
    expect(requested.length).toBeGreaterThan(0);
    for (const url of requested) expect(url).not.toContain(KEY);
    const cookie = (await context.cookies(`${served.url()}/dashboard`)).find((c) => c.name === 'tandem_dashboard_key');
    expect(cookie?.httpOnly).toBe(true);
    expect(cookie?.sameSite).toBe('Strict');
    const seen = await page.evaluate(() => [document.cookie, JSON.stringify({ ...sessionStorage }), JSON.stringify({ ...localStorage })].join(' '));
    expect(seen).not.toContain(KEY);
    for (const path of ['/dashboard/events', '/dashboard/api/snapshot']) expect((await fetch(`${served.url()}${path}`)).status).toBe(401);
  });

  it("workers are named as up names them: agg-0 and embed-0, on the rows of the ids they logged and on routing decisions", async () => {
    const ids = instanceIds(served.output());
    for (const name of ['agg-0', 'embed-0']) {
      const id = ids.get(name);
      expect(id, `${name} logged its instance id`).toMatch(/^[0-9a-f]{16}$/);
      await expect.poll(() => attr(page, `name-${id}`, 'data-name'), { timeout: 15_000 }).toBe(name);
      expect((await page.locator(`[data-testid="name-${id}"]`).textContent())?.trim()).toBe(name);
    }
    const res = await fetch(`${served.url()}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
      body: JSON.stringify({ model: 'tiny-llama', prompt: 'named on the dashboard', max_tokens: 4 }),
    });
    expect(res.status).toBe(200);
    await res.json();
    const requestId = res.headers.get('x-request-id')!;
    const worker = res.headers.get('x-worker-instance-id')!;
    expect(worker).toBe(ids.get('agg-0'));
    const winner = page.locator(`[data-testid="decision-${requestId}"] [data-testid="candidate-${worker}"]`);
    await expect.poll(() => winner.count(), { timeout: 15_000 }).toBe(1);
    expect((await winner.textContent())?.trim()).toBe('agg-0');
    await screenshot(page, 'dashboard-named-workers');
  }, 60_000);

  it('a link with a wrong ?api_key= lands on the prompt, saying the key was refused, without the key in the address', async () => {
    const fresh = await browser.newContext();
    try {
      const p = await fresh.newPage();
      await p.goto(`${served.url()}/dashboard?api_key=wrong-key`);
      await expect.poll(() => p.locator('[data-testid="auth-error"]').isVisible(), { timeout: 15_000 }).toBe(true);
      expect(await attr(p, 'conn-status', 'data-state')).toBe('auth');
      expect(p.url()).toBe(`${served.url()}/dashboard`);
    } finally {
      await fresh.close();
    }
  }, 30_000);
});
