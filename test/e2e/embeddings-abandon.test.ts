/**
 * An abandoned embeddings request frees its worker (issue 34, item 1.2), with real processes:
 * `runtime frontend` and one mocker embedding worker (`--task embed`) over file discovery. The
 * mocker spends the perf model's prefill time per engine call, so a request of 512 inputs of
 * 200 tokens is about 10 s of work in calls of at most `--max-num-batched-tokens` 256 tokens.
 *
 * The client goes away after the worker has started on it; a small request sent next must not
 * wait behind it. Asserted on the worker's counters, never on wall time: the worker reports
 * nothing in flight after the abort, the abandoned inputs it never computed are counted as
 * cancelled, and when the small request is answered the only request the worker has answered
 * is that one (before the fix the abandoned one ran to its end first, and was answered to nobody).
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CliStack } from '../harness/cli-stack.js';
import { metricValue, pollUntil, scrape } from '../harness/http.js';

const INPUTS = 512;
const TOKENS = 200;

describe('an abandoned embeddings request (real frontend + mocker embedding worker)', () => {
  let stack: CliStack;
  let statusUrl: string;

  beforeAll(async () => {
    stack = await CliStack.create({ tmpPrefix: 'tandem-embed-abandon-', model: 'tiny-embed', tiny: { arch: 'qwen3', dtype: 'f32', seed: 3, embedding: 'last' } });
    await stack.startFrontend();
    const worker = await stack.startWorker('agg', ['--engine', 'mocker', '--task', 'embed', '--max-num-batched-tokens', '256']);
    statusUrl = worker.statusUrl;
    await stack.waitForRoutable(1);
  }, 90_000);

  afterAll(async () => {
    await stack?.close();
  }, 30_000);

  const workerMetric = async (name: string): Promise<number | undefined> => metricValue(await scrape(statusUrl), name);

  it('is cancelled on the worker: nothing stays in flight, its uncomputed inputs are dropped, and a small request behind it is answered first', async () => {
    const big = Array.from({ length: INPUTS }, (_, i) => Array.from({ length: TOKENS }, (_, t) => (i * 7 + t) % 200));
    const abandon = new AbortController();
    const pending = fetch(`${stack.url}/v1/embeddings`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny-embed', input: big }),
      signal: abandon.signal,
    }).catch((err: unknown) => err);
    // The worker has taken it and finished at least one of its engine calls.
    await pollUntil('the worker is embedding the big request', async () => (await workerMetric('tandem_worker_embedding_inflight_requests')) === 1 && ((await workerMetric('tandem_worker_embedding_batches_total')) ?? 0) >= 1, 30_000);
    abandon.abort();
    expect(await pending).toBeInstanceOf(Error);
    await pollUntil('nothing in flight on the worker after the abort', async () => (await workerMetric('tandem_worker_embedding_inflight_requests')) === 0, 15_000);

    const openai = new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const small = await openai.embeddings.create({ model: 'tiny-embed', input: [[1, 2, 3], [4, 5]], encoding_format: 'float' });
    expect(small.data).toHaveLength(2);

    // The only request the worker answered is the small one: the big one was never answered.
    expect(await workerMetric('tandem_worker_embedding_requests_total')).toBe(1);
    expect(await workerMetric('tandem_worker_embedding_inputs_total')).toBe(2);
    expect(await workerMetric('tandem_worker_embedding_cancelled_requests_total')).toBe(1);
    const cancelledInputs = (await workerMetric('tandem_worker_embedding_cancelled_inputs_total')) ?? 0;
    const batches = (await workerMetric('tandem_worker_embedding_batches_total')) ?? 0;
    // One 200-token input per 256-token call: every big input was computed or cancelled, and most were cancelled.
    expect(cancelledInputs).toBeGreaterThan(INPUTS / 2);
    expect(cancelledInputs + batches - 1).toBe(INPUTS);
    expect(await workerMetric('tandem_worker_embedding_inflight_requests')).toBe(0);
  }, 90_000);
});
