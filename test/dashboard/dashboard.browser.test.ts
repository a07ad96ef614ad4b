/**
 * The live dashboard (issue 15) in a real browser: Debian's chromium, driven by playwright-core,
 * against real processes.
 *
 * Main stack: `runtime up --engine mocker --model tiny --prefill 1 --decode 2 --router-mode kv`
 * on a fixed free port (so `up` restarts a killed frontend on the same port), load from
 * `runtime bench`. In order:
 *   1. the Fleet panel shows 1 prefill and 2 decode workers, with the ids the workers logged;
 *   2. a request's `x-request-id` / `x-worker-instance-id` headers: the Routing panel shows
 *      that decision with that winner, and the inspector shows that worker on its path;
 *   3. under load the request-rate and KV numbers change between reads (screenshot saved);
 *   4. kill -9 of a decode worker: its row turns 'gone' within the lease TTL (`up`'s workers
 *      run with the default 10 s TTL; the wait is bounded at TTL + slack);
 *   5. kill -9 of the frontend: the page shows "reconnecting", then live again with the new
 *      frontend's instance id, without a reload (EventSource `retry:`).
 * Planner stack: `runtime up --workers 1 --planner load --planner-interval 1`: the Planner panel
 * (hidden on the main stack) appears with its pools and charts.
 * Auth stack: `runtime up --workers 1 --api-key KEY`: the stream refuses no key, and the page
 * gets the key (its form, or `?api_key=`) and then shows live data.
 *
 * Screenshots go to $TMPDIR/tandem-dashboard-artifacts (printed). Without chromium the suite
 * is skipped with that reason; it never passes without a browser.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../harness/ports.js';
import { isAlive, spawnCli, type Spawned } from '../harness/processes.js';
import { reportedPids, startUp, stopAll, type Up } from '../e2e/up.js';
import { attr, chromiumPath, launchChromium, screenshot, snapshotsSeen } from './browser.js';

const MODEL = 'tiny-llama';
/** `runtime up` does not pass --lease-ttl to its workers: they run with the runtime default. */
const LEASE_TTL_MS = 10_000;
/** Slack on a loaded 2-core box: the lease check, one snapshot tick, one page render. */
const SLACK_MS = 15_000;

const CHROMIUM = chromiumPath();
const suite = CHROMIUM ? describe : describe.skip;
if (!CHROMIUM) process.stderr.write('dashboard browser tests SKIPPED: chromium not found (apt-get install chromium, or set CHROMIUM_BIN)\n');

/** name → instance id, from the children's "worker ready" lines `up` forwards as `[name] {json}`. */
function instanceIds(out: string): Map<string, string> {
  const ids = new Map<string, string>();
  for (const m of out.matchAll(/^\[([\w-]+)\] (\{.*"msg":"worker ready".*\})$/gm)) {
    ids.set(m[1]!, (JSON.parse(m[2]!) as { instanceId: string }).instanceId);
  }
  return ids;
}

async function poolCount(page: Page, role: string): Promise<number | undefined> {
  const v = await attr(page, `pool-${role}`, 'data-worker-count');
  return v === undefined ? undefined : Number(v);
}

/** Until the page has rendered `n` more snapshots (about one a second): its own progress, not a clock. */
async function moreSnapshots(page: Page, n: number): Promise<void> {
  const target = (await snapshotsSeen(page)) + n;
  await expect.poll(() => snapshotsSeen(page), { timeout: 15_000 * n, interval: 100 }).toBeGreaterThanOrEqual(target);
}

function bench(url: string, seconds: number, extra: string[] = []): Spawned {
  return spawnCli([
    'bench', '--url', url, '--model', MODEL, '--workload', 'shared-prefix', '--groups', '4', '--prompts-per-group', '400',
    '--system-len', '600', '--question-len', '64', '--osl', '48', '--concurrency', '6', '--duration', String(seconds), '--progress', 'off', '--no-preflight', ...extra,
  ]);
}

suite(`dashboard in chromium (${CHROMIUM ?? 'missing'})`, () => {
  let cacheDir: string;
  let browser: Browser;
  let page: Page;
  let up: Up;
  const ups: Up[] = [];
  const loads: Spawned[] = [];

  beforeAll(async () => {
    cacheDir = await mkdtemp(join(tmpdir(), 'tandem-dashboard-'));
    browser = await launchChromium();
    const port = await freePort();
    up = await startUp(cacheDir, [
      '--engine', 'mocker', '--model', 'tiny', '--prefill', '1', '--decode', '2', '--http-port', String(port),
      '--speedup-ratio', '1', '--router-mode', 'kv', '--disagg-min-prefill-tokens', '48',
    ]);
    ups.push(up);
    page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    page.on('pageerror', (err) => process.stderr.write(`dashboard page error: ${err.message}\n`));
    await page.goto(`${up.url}/dashboard`);
  }, 120_000);

  afterAll(async () => {
    await Promise.all(loads.map((l) => l.stop(5_000)));
    await browser?.close();
    await stopAll(ups);
    if (cacheDir) await rm(cacheDir, { recursive: true, force: true });
  }, 60_000);

  it('Fleet shows 1 prefill and 2 decode workers, by the ids the workers logged, all ready', async () => {
    await expect.poll(() => attr(page, 'conn-status', 'data-state'), { timeout: 15_000 }).toBe('live');
    await expect.poll(() => poolCount(page, 'prefill'), { timeout: 15_000 }).toBe(1);
    await expect.poll(() => poolCount(page, 'decode'), { timeout: 15_000 }).toBe(2);
    expect(await attr(page, 'pool-aggregated', 'data-worker-count')).toBeUndefined();
    const ids = instanceIds(up.proc.output());
    for (const name of ['prefill-0', 'decode-0', 'decode-1']) {
      const id = ids.get(name);
      expect(id, `${name} logged its instance id`).toMatch(/^[0-9a-f]{16}$/);
      expect(await attr(page, `worker-${id}`, 'data-state'), name).toBe('ready');
    }
    const decodeRows = page.locator('[data-testid="pool-decode"] tr[data-testid^="worker-"]');
    expect(await decodeRows.count()).toBe(2);
    expect(await attr(page, 'routing-mode', 'data-mode')).toBe('kv');
  });

  it('a routing decision on the page names the worker the response header named; the inspector shows its path', async () => {
    const res = await fetch(`${up.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, prompt: 'the dashboard shows where this request went', max_tokens: 8, ignore_eos: true }),
    });
    expect(res.status).toBe(200);
    await res.json();
    const requestId = res.headers.get('x-request-id');
    const worker = res.headers.get('x-worker-instance-id');
    expect(requestId).toBeTruthy();
    expect(worker).toMatch(/^[0-9a-f]{16}$/);

    const decision = page.locator(`[data-testid="decision-${requestId}"]`);
    await expect.poll(() => decision.count(), { timeout: 15_000 }).toBe(1);
    expect(await decision.getAttribute('data-winner')).toBe(worker);
    // The highlighted candidate is that worker, among the two decode workers.
    const winner = decision.locator('.cand.winner');
    expect(await winner.count()).toBe(1);
    expect(await winner.getAttribute('data-testid')).toBe(`candidate-${worker}`);
    expect(await decision.locator('.cand').count()).toBe(2);

    await page.locator('[data-testid="inspect-input"]').fill(requestId!);
    await page.locator('[data-testid="inspect-go"]').click();
    await expect.poll(() => attr(page, 'inspect-result', 'data-found'), { timeout: 10_000 }).toBe('true');
    expect((await attr(page, 'inspect-workers', 'data-workers'))?.split(',')).toContain(worker);
    expect(await page.locator('[data-testid="inspect-endpoint"]').textContent()).toBe('completions');
    // Every API's requests are inspectable, each under its own endpoint.
    const message = await fetch(`${up.url}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: 'inspect me' }] }),
    });
    expect(message.status).toBe(200);
    await message.json();
    await page.locator('[data-testid="inspect-input"]').fill(message.headers.get('x-request-id')!);
    await page.locator('[data-testid="inspect-go"]').click();
    await expect.poll(() => page.locator('[data-testid="inspect-endpoint"]').textContent(), { timeout: 10_000 }).toBe('messages');
    // An unknown id says so instead of showing a stale path.
    await page.locator('[data-testid="inspect-input"]').fill('cmpl-not-a-request');
    await page.locator('[data-testid="inspect-go"]').click();
    await expect.poll(() => attr(page, 'inspect-result', 'data-found'), { timeout: 10_000 }).toBe('false');
  });

  it('under load the request-rate and KV panels move; screenshot', async () => {
    const load = bench(up.url, 40);
    loads.push(load);
    const rates = new Set<string>();
    const kv = new Set<string>();
    const deadline = Date.now() + 45_000;
    // Two reads at least a snapshot apart that differ, each while requests are flowing.
    while ((rates.size < 2 || kv.size < 2) && Date.now() < deadline) {
      const seen = await snapshotsSeen(page);
      await expect.poll(() => snapshotsSeen(page), { timeout: 10_000 }).toBeGreaterThan(seen);
      const rate = (await attr(page, 'stat-request-rate', 'data-value'))!;
      if (Number(rate) > 0) rates.add(rate);
      const used = (await attr(page, 'stat-kv-used', 'data-value'))!;
      if (Number(used) > 0) kv.add(used);
    }
    expect(rates.size, `request rates seen: ${[...rates].join(', ')}`).toBeGreaterThanOrEqual(2);
    expect(kv.size, `KV used blocks seen: ${[...kv].join(', ')}`).toBeGreaterThanOrEqual(2);
    // The charts drew (uPlot canvases), and the counters agree with the load: the page's total
    // passes 10 while the bench runs (read from the DOM as snapshots arrive, not after a guess
    // at how long 10 requests take on a loaded box).
    expect(await page.locator('[data-testid="chart-rate"] canvas').count()).toBe(1);
    await expect.poll(async () => Number(await attr(page, 'stat-requests-total', 'data-value')), { timeout: 45_000, interval: 250 }).toBeGreaterThan(10);
    // The history window buttons switch (the charts keep drawing from the same rings).
    await page.locator('[data-testid="window-15"]').click();
    expect(await attr(page, 'window-15', 'aria-pressed')).toBe('true');
    expect(await attr(page, 'window-5', 'aria-pressed')).toBe('false');
    await page.locator('[data-testid="window-5"]').click();
    expect(await attr(page, 'window-5', 'aria-pressed')).toBe('true');
    // A request id in the Routing panel opens it in the inspector (a disaggregated one, at this prompt length).
    // The oldest one shown: a request is inspectable once it has finished (6 run at a time here).
    let clickedId: string | null = null;
    await expect
      .poll(async () => {
        // One element for both reads: the panel re-renders every second, and a locator read twice
        // can name one request and click the next. A handle detached by a re-render fails the
        // click, and the poll tries again.
        const link = await page.locator('[data-testid="routing-decisions"] a[data-inspect]').last().elementHandle();
        clickedId = (await link?.getAttribute('data-inspect')) ?? null;
        await link?.click({ timeout: 2_000 });
        await expect.poll(() => attr(page, 'inspect-result', 'data-found'), { timeout: 5_000 }).not.toBe('');
        return attr(page, 'inspect-result', 'data-found');
      }, { timeout: 20_000, interval: 1_000 })
      .toBe('true');
    expect(await page.locator('[data-testid="inspect-input"]').inputValue()).toBe(clickedId);
    await page.locator('[data-testid="routing-decisions"]').evaluate((el) => el.scrollTo(0, 0));
    await moreSnapshots(page, 4); // a few more points on the charts for the picture
    await screenshot(page, 'dashboard-under-load');
    await page.emulateMedia({ colorScheme: 'dark' });
    await moreSnapshots(page, 1);
    expect(await page.locator('[data-testid="chart-rate"] canvas').count()).toBe(1); // rebuilt in dark colours
    await screenshot(page, 'dashboard-under-load-dark');
    await page.emulateMedia({ colorScheme: 'light' });
  }, 90_000);

  it('kill -9 of a decode worker marks it gone within the lease TTL', async () => {
    const ids = instanceIds(up.proc.output());
    const victim = ids.get('decode-1')!;
    const [pid] = reportedPids(up.proc.output(), 'decode-1');
    expect(isAlive(pid)).toBe(true);
    expect(await attr(page, `worker-${victim}`, 'data-state')).not.toBe('gone');
    const killedAt = Date.now();
    process.kill(pid!, 'SIGKILL');
    await expect.poll(() => attr(page, `worker-${victim}`, 'data-state'), { timeout: LEASE_TTL_MS + SLACK_MS, interval: 250 }).toBe('gone');
    process.stdout.write(`dashboard: killed worker shown gone after ${Date.now() - killedAt} ms (lease TTL ${LEASE_TTL_MS} ms)\n`);
    expect(Number(await attr(page, 'pool-decode', 'data-gone-count'))).toBeGreaterThanOrEqual(1);
    await screenshot(page, 'dashboard-worker-gone');
  }, 60_000);

  it('after kill -9 of the frontend the page reconnects by itself to the restarted one', async () => {
    const before = (await attr(page, 'frontend-id', 'data-value'))!;
    expect(before).toMatch(/^[0-9a-f]{16}$/);
    const [pid] = reportedPids(up.proc.output(), 'frontend');
    process.kill(pid!, 'SIGKILL');
    await expect.poll(() => attr(page, 'conn-status', 'data-state'), { timeout: 10_000, interval: 100 }).toBe('reconnecting');
    await screenshot(page, 'dashboard-reconnecting');
    // `up` restarts the frontend on the same port; the EventSource (retry: 2 s) finds it.
    await expect.poll(() => attr(page, 'frontend-id', 'data-value'), { timeout: 45_000, interval: 250 }).not.toBe(before);
    expect(await attr(page, 'conn-status', 'data-state')).toBe('live');
    const seen = await snapshotsSeen(page);
    await expect.poll(() => snapshotsSeen(page), { timeout: 10_000 }).toBeGreaterThan(seen);
  }, 90_000);

  it('the Planner panel stays hidden without a planner, and shows pools and charts once `up --planner` publishes', async () => {
    // The main stack runs no planner.
    expect(await page.locator('[data-testid="panel-planner"]').isHidden()).toBe(true);
    const plannerUp = await startUp(cacheDir, ['--engine', 'mocker', '--model', 'tiny', '--workers', '1', '--http-port', '0', '--planner', 'load', '--max-workers', '2', '--planner-interval', '1']);
    ups.push(plannerUp);
    const p = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    await p.goto(`${plannerUp.url}/dashboard`);
    const load = bench(plannerUp.url, 10);
    loads.push(load);
    await expect.poll(() => p.locator('[data-testid="panel-planner"]').isVisible(), { timeout: 30_000 }).toBe(true);
    const pool = p.locator('[data-testid^="planner-pool-"]').first();
    await expect.poll(() => pool.count(), { timeout: 15_000 }).toBe(1);
    expect(Number(await pool.getAttribute('data-current'))).toBeGreaterThanOrEqual(1);
    expect(Number(await pool.getAttribute('data-desired'))).toBeGreaterThanOrEqual(1);
    expect(await p.locator('[data-testid="chart-planner-rate"] canvas').count()).toBe(1);
    await moreSnapshots(p, 3); // a few points on the planner's charts for the picture
    await screenshot(p, 'dashboard-planner');
    await p.close();
  }, 120_000);

  it('with --api-key the stream refuses no key, and the page gets the key and shows live data', async () => {
    const key = 'dashboard-test-key';
    const authUp = await startUp(cacheDir, ['--engine', 'mocker', '--model', 'tiny', '--workers', '1', '--http-port', '0', '--api-key', key]);
    ups.push(authUp);
    expect((await fetch(`${authUp.url}/dashboard/events`)).status).toBe(401);
    expect((await fetch(`${authUp.url}/dashboard/api/snapshot`)).status).toBe(401);
    expect((await fetch(`${authUp.url}/dashboard/api/snapshot`, { headers: { authorization: `Bearer ${key}` } })).status).toBe(200);

    const context = await browser.newContext();
    const p = await context.newPage();
    const first = await p.goto(`${authUp.url}/dashboard`);
    if (first?.status() === 200) {
      // The shell loads without the key; the page finds the stream refused and asks for it.
      await expect.poll(() => attr(p, 'conn-status', 'data-state'), { timeout: 15_000 }).toBe('auth');
      expect(await p.locator('[data-testid="auth-form"]').isVisible()).toBe(true);
      await p.locator('[data-testid="auth-input"]').fill(key);
      await p.locator('[data-testid="auth-submit"]').click();
    } else {
      // The page itself needs the key: `?api_key=` trades it for a cookie and drops it from the URL.
      expect(first?.status()).toBe(401);
      await p.goto(`${authUp.url}/dashboard?api_key=${encodeURIComponent(key)}`);
    }
    await expect.poll(() => attr(p, 'conn-status', 'data-state'), { timeout: 15_000 }).toBe('live');
    await expect.poll(() => poolCount(p, 'aggregated'), { timeout: 15_000 }).toBe(1);
    expect(p.url()).not.toContain(key);
    const cookies = await context.cookies(`${authUp.url}/dashboard`);
    expect(cookies.find((c) => c.name === 'tandem_dashboard_key')?.httpOnly).toBe(true);
    await screenshot(p, 'dashboard-auth');
    await context.close();
  }, 120_000);
});
