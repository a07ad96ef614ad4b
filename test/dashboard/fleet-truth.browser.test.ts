/**
 * The Fleet and Disaggregation panels tell the truth (issue 23), in a real browser against
 * `runtime up --engine mocker --workers 1 --prefill 1 --decode 1 --router-mode kv`: three pools.
 *
 *   1. Idle after load: once `runtime bench` has finished, every worker row shows running 0
 *      and waiting 0 within a bound. The workers throttle their `load_metrics` to one per 2 s
 *      here (`TANDEM_LOAD_METRICS_INTERVAL`), so a worker that only dropped reports inside the
 *      interval would leave its last busy count on the page for ever; the bound is that
 *      interval, one snapshot tick and slack.
 *   2. Layout at 1,400 px with three pools: no horizontal page scroll, no two header boxes
 *      overlap, and no value sits outside its card (pool, stat, panel).
 *   3. The disaggregated share matches the count beside it, also seconds after the load.
 *
 * Screenshot `dashboard-three-pools.png` goes to the artifacts folder (printed).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../harness/ports.js';
import { spawnCli, type Spawned } from '../harness/processes.js';
import { startUp, stopAll, type Up } from '../e2e/up.js';
import { attr, chromiumPath, launchChromium, screenshot } from './browser.js';

const MODEL = 'tiny-llama';
/** The workers' --load-metrics-interval in this suite: long, so a dropped last report shows. */
const LOAD_INTERVAL_MS = 2000;
/** Interval + one 1 s tick + render, with slack for a loaded 2-core box. */
const IDLE_BOUND_MS = LOAD_INTERVAL_MS + 6000;

const CHROMIUM = chromiumPath();
const suite = CHROMIUM ? describe : describe.skip;
if (!CHROMIUM) process.stderr.write('dashboard browser tests SKIPPED: chromium not found (apt-get install chromium, or set CHROMIUM_BIN)\n');

interface Row {
  id: string;
  state: string;
  running: number;
  waiting: number;
}

async function rows(page: Page): Promise<Row[]> {
  return page.$$eval('[data-testid="fleet"] tr[data-testid^="worker-"]', (trs) =>
    trs.map((tr) => ({
      id: tr.getAttribute('data-testid')!.slice('worker-'.length),
      state: tr.getAttribute('data-state') ?? '',
      running: Number(tr.getAttribute('data-running')),
      waiting: Number(tr.getAttribute('data-waiting')),
    })),
  );
}

/** Everything the layout check measures, in the page. */
interface LayoutReport {
  scrollWidth: number;
  clientWidth: number;
  /** Pairs of header boxes that overlap, by text. */
  overlaps: string[];
  /** Values whose box leaves their card's box. */
  spills: string[];
}

function measureLayout(page: Page): Promise<LayoutReport> {
  return page.evaluate(() => {
    const se = document.scrollingElement!;
    const box = (e: Element) => e.getBoundingClientRect();
    const label = (e: Element) => `${e.tagName.toLowerCase()}"${(e.textContent ?? '').trim().slice(0, 30)}"`;
    // Header boxes: panel, model and pool titles, table headers, stat labels.
    const headers = [...document.querySelectorAll('main h2, main h3, main h4, main th, main .stat .k')].filter((e) => box(e).width > 0);
    const overlaps: string[] = [];
    for (let i = 0; i < headers.length; i++) {
      for (let j = i + 1; j < headers.length; j++) {
        const a = box(headers[i]!);
        const b = box(headers[j]!);
        const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
        const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
        if (w > 0.5 && h > 0.5 && !headers[i]!.contains(headers[j]!) && !headers[j]!.contains(headers[i]!)) overlaps.push(`${label(headers[i]!)} × ${label(headers[j]!)}`);
      }
    }
    // Cards and the values in them.
    const spills: string[] = [];
    for (const card of document.querySelectorAll('main .pool, main .stat, main .panel')) {
      const c = box(card);
      if (c.width === 0) continue;
      for (const v of card.querySelectorAll('td, th, .v, .u, .k, h4')) {
        const r = box(v);
        if (r.width === 0) continue;
        if (r.left < c.left - 1 || r.right > c.right + 1) spills.push(`${label(v)} leaves ${card.className} ${card.getAttribute('data-testid') ?? ''} (${Math.round(r.right)} > ${Math.round(c.right)})`);
      }
    }
    return { scrollWidth: se.scrollWidth, clientWidth: se.clientWidth, overlaps, spills };
  });
}

suite(`dashboard fleet truth in chromium (${CHROMIUM ?? 'missing'})`, () => {
  let cacheDir: string;
  let browser: Browser;
  let page: Page;
  let up: Up;
  const ups: Up[] = [];
  const loads: Spawned[] = [];

  beforeAll(async () => {
    cacheDir = await mkdtemp(join(tmpdir(), 'tandem-dashboard-fleet-'));
    browser = await launchChromium();
    up = await startUp(
      cacheDir,
      ['--engine', 'mocker', '--model', 'tiny', '--workers', '1', '--prefill', '1', '--decode', '1', '--http-port', String(await freePort()),
        '--speedup-ratio', '1', '--router-mode', 'kv', '--disagg-min-prefill-tokens', '48'],
      { TANDEM_LOAD_METRICS_INTERVAL: String(LOAD_INTERVAL_MS) },
    );
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

  it('three pools; busy under load, then every worker shows running 0 and waiting 0 within the interval + 6 s after the load ends', async () => {
    await expect.poll(() => attr(page, 'conn-status', 'data-state'), { timeout: 15_000 }).toBe('live');
    for (const role of ['aggregated', 'prefill', 'decode']) await expect.poll(() => attr(page, `pool-${role}`, 'data-worker-count'), { timeout: 20_000 }).toBe('1');

    const load = spawnCli([
      'bench', '--url', up.url, '--model', MODEL, '--workload', 'shared-prefix', '--groups', '4', '--prompts-per-group', '400',
      '--system-len', '600', '--question-len', '64', '--osl', '48', '--concurrency', '8', '--duration', '8', '--progress', 'off', '--no-preflight',
    ]);
    loads.push(load);
    // The load is visible: some worker reports running requests while the bench runs.
    let busiest = 0;
    await expect
      .poll(async () => {
        busiest = Math.max(busiest, ...(await rows(page)).map((r) => r.running));
        return busiest;
      }, { timeout: 15_000, interval: 250 })
      .toBeGreaterThan(0);
    const exit = await load.exited();
    expect(exit.code, load.output().slice(-2000)).toBe(0);
    const endedAt = Date.now();

    await expect
      .poll(async () => (await rows(page)).filter((r) => r.running !== 0 || r.waiting !== 0).map((r) => `${r.id.slice(-8)} running ${r.running} waiting ${r.waiting}`), { timeout: IDLE_BOUND_MS, interval: 250 })
      .toEqual([]);
    process.stdout.write(`dashboard: fleet idle ${Date.now() - endedAt} ms after the load ended\n`);
    expect(await attr(page, 'stat-inflight', 'data-value')).toBe('0');
    // And it stays idle: the heartbeat repeats the zero, it does not bring back an old count.
    const frames = Number(await attr(page, 'conn-status', 'data-frames'));
    await expect.poll(async () => Number(await attr(page, 'conn-status', 'data-frames')), { timeout: 15_000 }).toBeGreaterThanOrEqual(frames + 2);
    expect((await rows(page)).filter((r) => r.running !== 0)).toEqual([]);
  }, 90_000);

  it('at 1,400 px with three pools: no sideways scroll, no overlapping headers, no value outside its card', async () => {
    await screenshot(page, 'dashboard-three-pools');
    const layout = await measureLayout(page);
    expect(layout.scrollWidth, 'page scrolls sideways').toBeLessThanOrEqual(layout.clientWidth);
    expect(layout.overlaps).toEqual([]);
    expect(layout.spills).toEqual([]);
  });

  it('the disaggregated share matches the disaggregated count over the finished requests, seconds after the load', async () => {
    const total = Number(await attr(page, 'stat-disagg-total', 'data-value'));
    const finished = Number(await attr(page, 'stat-requests-total', 'data-value'));
    const share = Number(await attr(page, 'stat-disagg-share', 'data-value'));
    expect(await attr(page, 'stat-inflight', 'data-value')).toBe('0'); // all started requests have finished
    expect(total).toBeGreaterThan(0);
    expect(finished).toBeGreaterThanOrEqual(total);
    expect(share).toBeCloseTo(total / finished, 6);
    expect(await page.locator('[data-testid="stat-disagg-share"]').textContent()).toBe(`${((100 * total) / finished).toFixed(0)}%`);
  });
});
