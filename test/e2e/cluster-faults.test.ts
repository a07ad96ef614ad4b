/**
 * Cluster mode under faults, over real processes and real servers: `runtime frontend
 * --router-mode kv` and two `runtime worker --engine mocker` processes of the built CLI, with
 * etcd discovery (test/harness/etcd.ts) and the NATS event plane (test/harness/nats.ts), while
 * streams are in flight.
 *
 * Scaling (to keep the file well under a minute): the lease TTL is 6 s instead of the default
 * 10 s, so the "etcd down 5 s" (below the TTL) becomes 2 s and "etcd down 20 s" (above
 * it) becomes 13 s (more than twice the TTL, as 20 s is of 10 s). The short outage is a third of
 * the TTL rather than half: a lease is renewed every TTL/3 and etcd takes ~0.4 s (more on a
 * busy box) to serve again after its restart, fixed costs that do not shrink with the TTL, so a
 * process whose last renewal came just before the kill must still renew in time.
 *
 *   1. etcd down 2 s (< TTL): nothing is interrupted. Every stream ends with its full length
 *      and [DONE], no process logs a lost lease, requests during and after the outage succeed.
 *   2. NATS killed and started again on the same port: the KV router's index learns new blocks
 *      again within 1 s of the server accepting connections (measured and printed: from the
 *      harness seeing "Server is ready" until the frontend's `tandem_router_index_blocks` has
 *      grown by a fresh 64-block prompt, polled every 25 ms; the gauge itself is refreshed on
 *      the router's 250 ms tick, which the figure includes).
 *   3. etcd down 13 s (> TTL): the workers (and the frontend, which holds a lease too) lose
 *      their lease, drain and exit with code 3, and no stream just stops: each one completes
 *      with [DONE] or ends with an SSE error frame.
 *
 * The tests share one stack and run in this order; the last one ends it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CliStack, type CliStackOptions } from '../harness/cli-stack.js';
import { startEtcd, type EtcdServer } from '../harness/etcd.js';
import { metricValue, pollUntil, readSse, scrape } from '../harness/http.js';
import { startNats, type NatsHarness } from '../harness/nats.js';
import type { Spawned } from '../harness/processes.js';

const MODEL = 'tiny';
const LEASE_TTL_S = 6;
const SHORT_OUTAGE_MS = 2_000;
const LONG_OUTAGE_MS = 13_000;
const STREAMS = 20;
/** Recovery bound after NATS is back (issue 12), and how often it is checked. */
const RECOVERY_BOUND_MS = 1_000;
const RECOVERY_POLL_MS = 25;

/** A CliStack whose processes share etcd discovery and the NATS event plane. */
class ClusterStack extends CliStack {
  private endpoints = { etcd: '', nats: '' };

  static async startCluster(etcd: EtcdServer, nats: NatsHarness, workers: number): Promise<ClusterStack> {
    const options: CliStackOptions = {
      tmpPrefix: 'tandem-cluster-faults-',
      model: MODEL,
      leaseTtl: LEASE_TTL_S,
      // Speedup 1: ~6 ms per decode step, so streams of a few hundred tokens outlast an outage.
      // A large pool: no eviction, so the router's index only grows while this file runs.
      workerArgs: ['--speedup-ratio', '1', '--num-gpu-blocks', '16384'],
    };
    const { dir, modelDir, model } = await CliStack.prepare(options);
    const stack = new ClusterStack(dir, modelDir, model, options);
    stack.endpoints = { etcd: etcd.endpoint, nats: nats.url };
    try {
      await Promise.all([stack.startFrontend(['--router-mode', 'kv']), ...Array.from({ length: workers }, () => stack.startWorker('agg', ['--engine', 'mocker']))]);
      await stack.waitForRoutable(workers);
    } catch (err) {
      await stack.close();
      throw err;
    }
    return stack;
  }

  override get common(): string[] {
    return [
      '--discovery', 'etcd', '--etcd-endpoints', this.endpoints.etcd,
      '--event-plane', 'nats', '--nats-server', this.endpoints.nats,
      '--lease-ttl', String(LEASE_TTL_S), '--host', '127.0.0.1', '--log-level', 'info',
    ];
  }
}

/** How one stream ended, as the client saw it. */
interface StreamOutcome {
  status: number;
  done: boolean;
  tokens: number;
  error: string | undefined;
  /** The body broke off (reset, mid-frame) instead of ending. */
  cut: string | undefined;
}

function post(url: string, body: unknown): Promise<Response> {
  return fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
}

/** A streamed completion; `started` resolves at its first chunk. */
function openStream(url: string, prompt: string, maxTokens: number): { started: Promise<void>; outcome: Promise<StreamOutcome> } {
  let markStarted!: () => void;
  const started = new Promise<void>((r) => (markStarted = r));
  const outcome = (async (): Promise<StreamOutcome> => {
    let res: Response;
    try {
      res = await post(url, { model: MODEL, prompt, max_tokens: maxTokens, ignore_eos: true, stream: true, stream_options: { include_usage: true } });
    } catch (err) {
      markStarted();
      return { status: 0, done: false, tokens: 0, error: undefined, cut: String(err) };
    }
    if (res.status !== 200) {
      markStarted();
      return { status: res.status, done: false, tokens: 0, error: await res.text(), cut: undefined };
    }
    let tokens = 0;
    let error: string | undefined;
    try {
      const { done } = await readSse(res, (chunk) => {
        markStarted();
        if (chunk.error !== undefined) error = JSON.stringify(chunk.error);
        const usage = chunk.usage as { completion_tokens?: number } | undefined | null;
        if (usage?.completion_tokens !== undefined) tokens = usage.completion_tokens;
      });
      return { status: 200, done, tokens, error, cut: undefined };
    } catch (err) {
      markStarted();
      return { status: 200, done: false, tokens, error, cut: String(err) };
    }
  })();
  return { started, outcome };
}

async function completeOnce(url: string, prompt: string, maxTokens = 8): Promise<{ status: number; worker: string | null; cached: number }> {
  const res = await post(url, { model: MODEL, prompt, max_tokens: maxTokens, ignore_eos: true });
  const body = (await res.json()) as { usage?: { completion_tokens: number; prompt_tokens_details?: { cached_tokens: number } } };
  if (res.status === 200) expect(body.usage?.completion_tokens).toBe(maxTokens);
  return { status: res.status, worker: res.headers.get('x-worker-instance-id'), cached: body.usage?.prompt_tokens_details?.cached_tokens ?? 0 };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const leaseLost = (p: Spawned) => p.output().includes('lease lost');

describe('cluster faults: real etcd + nats-server, frontend --router-mode kv, 2 mocker workers', () => {
  let etcd: EtcdServer;
  let nats: NatsHarness;
  let stack: ClusterStack;

  beforeAll(async () => {
    [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
    stack = await ClusterStack.startCluster(etcd, nats, 2);
  }, 60_000);
  afterAll(async () => {
    await stack?.close();
    await Promise.all([etcd?.stop(), nats?.stop()]);
  });

  it(`etcd down ${SHORT_OUTAGE_MS} ms (below the ${LEASE_TTL_S} s TTL): every stream completes, no process leaves, requests keep being served`, async () => {
    const MAX_TOKENS = 600;
    const streams = Array.from({ length: STREAMS }, (_, i) => openStream(stack.url, `short outage stream ${i}: a tale of the sea`, MAX_TOKENS));
    await Promise.all(streams.map((s) => s.started));

    await etcd.kill();
    const killedAt = Date.now();
    // Requests during the outage: routing works from what discovery already delivered.
    const during = await Promise.all([0, 1, 2].map((i) => completeOnce(stack.url, `during the etcd outage ${i}`)));
    await sleep(SHORT_OUTAGE_MS - (Date.now() - killedAt));
    await etcd.restart();
    const after = await Promise.all([0, 1, 2].map((i) => completeOnce(stack.url, `after the etcd outage ${i}`)));

    const outcomes = await Promise.all(streams.map((s) => s.outcome));
    // Past the TTL since the outage began: a lease that etcd failed to keep would be gone now.
    await sleep(Math.max(0, (LEASE_TTL_S + 1) * 1000 - (Date.now() - killedAt)));

    expect(during.map((r) => r.status)).toEqual([200, 200, 200]);
    expect(after.map((r) => r.status)).toEqual([200, 200, 200]);
    for (const o of outcomes) expect(o).toEqual({ status: 200, done: true, tokens: MAX_TOKENS, error: undefined, cut: undefined });
    for (const p of [stack.frontend, ...stack.workers.map((w) => w.proc)]) {
      expect(p.running).toBe(true);
      expect(leaseLost(p)).toBe(false);
    }
    await stack.waitForRoutable(2);
    expect((await completeOnce(stack.url, 'one more after the outage')).status).toBe(200);
  }, 40_000);

  it(`NATS restarted: the KV router's index reflects new blocks within ${RECOVERY_BOUND_MS} ms of NATS accepting connections`, async () => {
    const indexBlocks = async () => metricValue(await scrape(stack.url), 'tandem_router_index_blocks') ?? 0;
    // The index follows the workers before the fault (kv_events over NATS).
    await completeOnce(stack.url, 'warm the index '.repeat(20));
    await pollUntil('router index has blocks', async () => (await indexBlocks()) > 0, 10_000);

    // Streaming load through the restart: the request plane (gRPC) does not need NATS.
    const MAX_TOKENS = 400;
    const streams = Array.from({ length: 10 }, (_, i) => openStream(stack.url, `nats restart stream ${i}`, MAX_TOKENS));
    await Promise.all(streams.map((s) => s.started));

    await nats.halt();
    await sleep(1_000); // every client has seen the disconnect and is in its reconnect loop
    await nats.start(); // resolves at "Server is ready": accepting connections
    const backAt = Date.now();

    // A prompt no worker has seen: 64 full blocks of 16 tokens, whose Stored events can only
    // reach the router through NATS (or a replay that a later event's gap triggers).
    const before = await indexBlocks();
    const fresh = `fresh prefix after the NATS restart ${backAt} `.repeat(40);
    const first = await completeOnce(stack.url, fresh, 1);
    expect(first.status).toBe(200);
    let recoveredAt = 0;
    await pollUntil('router index reflecting the fresh prefix', async () => {
      if ((await indexBlocks()) < before + 64) return false;
      recoveredAt = Date.now();
      return true;
    }, 15_000, RECOVERY_POLL_MS);
    const recoveryMs = recoveredAt - backAt;
    console.log(`[cluster-faults] NATS restart: router index recovered ${recoveryMs} ms after NATS was back (poll ${RECOVERY_POLL_MS} ms, gauge tick 250 ms)`);

    const outcomes = await Promise.all(streams.map((s) => s.outcome));
    for (const o of outcomes) expect(o).toEqual({ status: 200, done: true, tokens: MAX_TOKENS, error: undefined, cut: undefined });

    // The index holds the fresh prefix itself, not only blocks of the load: with the load over
    // (no active decode blocks to outweigh it), a request sharing the prefix goes to its worker
    // and hits the cache.
    await pollUntil('router bookings released', async () => metricValue(await scrape(stack.url), 'tandem_router_active_sequences') === 0, 10_000);
    const again = await completeOnce(stack.url, `${fresh}and then some more`, 1);
    expect(again.status).toBe(200);
    expect(again.worker).toBe(first.worker);
    expect(again.cached).toBeGreaterThanOrEqual(64 * 16 - 16);
    expect(recoveryMs).toBeLessThanOrEqual(RECOVERY_BOUND_MS);
  }, 40_000);

  it(`etcd down ${LONG_OUTAGE_MS} ms (above the ${LEASE_TTL_S} s TTL): workers and frontend drain and exit 3, no stream stops silently`, async () => {
    const MAX_TOKENS = 1500;
    const streams = Array.from({ length: STREAMS }, (_, i) => openStream(stack.url, `long outage stream ${i}: a tale of the sea`, MAX_TOKENS));
    await Promise.all(streams.map((s) => s.started));

    await etcd.kill();
    const killedAt = Date.now();
    try {
      // The frontend holds a lease too: it drains its HTTP streams and exits like the workers.
      const processes = [...stack.workers.map((w) => w.proc), stack.frontend];
      const exits = await Promise.all(processes.map((p) => p.exited()));
      const exitedAfterMs = Date.now() - killedAt;
      expect(exits.map((e) => e.code)).toEqual([3, 3, 3]);
      for (const p of processes) expect(leaseLost(p)).toBe(true);
      // The workers lost their lease with streams in flight, so the drain had work to do.
      const drained = stack.workers.map((w) => Number(/"inflight":(\d+)[^\n]*"msg":"draining in-flight streams"/.exec(w.proc.output())?.[1] ?? -1));
      expect(drained.every((n) => n >= 0)).toBe(true);
      expect(drained.reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
      // Not before the TTL ran out: the first failed keep-alive is not a lost lease.
      expect(exitedAfterMs).toBeGreaterThanOrEqual(LEASE_TTL_S * 1000 - 500);
    } finally {
      await sleep(Math.max(0, LONG_OUTAGE_MS - (Date.now() - killedAt)));
      await etcd.restart();
    }

    const outcomes = await Promise.all(streams.map((s) => s.outcome));
    const summary = { completed: 0, errorFrame: 0 };
    for (const o of outcomes) {
      expect(o.status).toBe(200);
      expect(o.cut, 'a stream broke off with neither [DONE] nor an error frame').toBeUndefined();
      expect(o.done).toBe(true); // an error frame is followed by [DONE] too
      if (o.error === undefined) {
        expect(o.tokens).toBe(MAX_TOKENS);
        summary.completed += 1;
      } else {
        summary.errorFrame += 1;
      }
    }
    console.log(`[cluster-faults] etcd down ${LONG_OUTAGE_MS} ms: ${summary.completed} streams completed, ${summary.errorFrame} ended with an error frame`);
  }, 60_000);
});
