/**
 * KV-mode backpressure on real processes (issue 38): a burst that round-robin serves is served
 * in KV mode too, with 0 refusals, and refusing is the operator's opt-in. Three `runtime up`
 * fleets of two mocker workers with 64-block pools (speedup 2). The burst: 24 requests of ~40
 * blocks and 128 output tokens at once, so each worker runs one or two at a time and every
 * worker stays over its load threshold (95% KV) for the whole burst, which lasts well past the
 * frontend's 10 s busy wait.
 *   - round-robin serves all 24;
 *   - `--router-mode kv` serves all 24 too: each goes to the least-bad worker and waits in its
 *     queue (`tandem_router_saturated_decisions_total` > 0), where it used to wait in the
 *     frontend and then get 429 once the wait passed 10 s;
 *   - with `--router-busy-threshold 0.5` the requests that cannot start within the wait get 429
 *     with Retry-After, and each is counted in `tandem_router_refused_requests_total`.
 */
import { describe, expect, it } from 'vitest';
import { metricValue, scrape } from '../harness/http.js';
import { upForBlock } from './up.js';
import { seededWords } from './words.js';

const MODEL = 'tiny-llama';
const BURST = 24;

interface Outcome {
  status: number;
  retryAfter: string | null;
}

/** ~37 blocks of prompt (the tiny tokenizer makes about 4 tokens of each of these words). */
const prompt = (seed: number) => seededWords(seed, 140);

async function burst(url: string): Promise<Outcome[]> {
  return Promise.all(
    Array.from({ length: BURST }, async (_, i) => {
      const res = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: prompt(i + 1) }], max_tokens: 128, ignore_eos: true }),
      });
      await res.text();
      return { status: res.status, retryAfter: res.headers.get('retry-after') };
    }),
  );
}

const fleet = (mode: string, extra: string[] = []) => async () => ['--engine', 'mocker', '--model', 'tiny', '--workers', '2', '--router-mode', mode, '--num-gpu-blocks', '64', '--speedup-ratio', '2', ...extra];

describe('a burst round-robin serves', () => {
  const up = upForBlock('tandem-kv-backpressure-rr-', fleet('round-robin'));
  it('round-robin serves every request of the burst', async () => {
    const out = await burst(up.url());
    expect(out.map((o) => o.status)).toEqual(out.map(() => 200));
  }, 120_000);
});

describe('the same burst in KV mode', () => {
  const up = upForBlock('tandem-kv-backpressure-kv-', fleet('kv'));
  it('is served with 0 refusals: saturated workers queue the requests as round-robin would', async () => {
    const out = await burst(up.url());
    expect(out.filter((o) => o.status !== 200)).toEqual([]);
    const metrics = await scrape(up.url());
    expect(metricValue(metrics, 'tandem_router_saturated_decisions_total')).toBeGreaterThan(0);
    expect(metricValue(metrics, 'tandem_router_refused_requests_total') ?? 0).toBe(0);
  }, 120_000);
});

describe('the same burst with the opt-in --router-busy-threshold 0.5', () => {
  const up = upForBlock('tandem-kv-backpressure-busy-', fleet('kv', ['--router-busy-threshold', '0.5']));
  it('refuses what cannot start within the bounded wait: 429 with Retry-After, each counted', async () => {
    const out = await burst(up.url());
    const refused = out.filter((o) => o.status === 429);
    expect(refused.length).toBeGreaterThan(0);
    expect(refused.length + out.filter((o) => o.status === 200).length).toBe(BURST);
    for (const r of refused) expect(Number(r.retryAfter)).toBeGreaterThan(0);
    const metrics = await scrape(up.url());
    expect(metricValue(metrics, 'tandem_router_refused_requests_total', { reason: 'busy_wait' })).toBe(refused.length);
  }, 120_000);
});
