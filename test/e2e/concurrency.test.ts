/**
 * 1,000 concurrent streams through real processes (built CLI): a frontend and two mocker
 * workers at a high speedup. Every stream completes with exactly the tokens it asked for, and
 * afterwards the frontend's in-flight gauge and the workers' KV blocks are back at baseline.
 */
import { Agent, request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricValue, pollUntil, scrape, tokenIdsOf } from '../harness/http.js';
import { E2eCluster, MODEL } from './cluster.js';

const STREAMS = 1000;
const LABELS = { model_name: MODEL };

interface StreamResult {
  status: number;
  body: string;
}

/** POST a streaming completion over `agent` and resolve with the whole SSE body. */
function streamCompletion(agent: Agent, url: string, body: unknown): Promise<StreamResult> {
  const payload = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${url}/v1/completions`, { method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(payload);
  });
}

function parseFrames(body: string): { chunks: Array<Record<string, unknown>>; done: boolean } {
  const frames = body.split('\n\n').filter((f) => f.length > 0);
  const done = frames.at(-1) === 'data: [DONE]';
  const chunks = frames.filter((f) => f !== 'data: [DONE]').map((f) => {
    if (!f.startsWith('data: ')) throw new Error(`bad SSE frame ${JSON.stringify(f)}`);
    return JSON.parse(f.slice(6)) as Record<string, unknown>;
  });
  return { chunks, done };
}

describe(`e2e: ${STREAMS} concurrent streams (frontend + 2 mocker workers)`, () => {
  let cluster: E2eCluster;

  beforeAll(async () => {
    cluster = await E2eCluster.start({
      workers: 2,
      workerArgs: ['--speedup-ratio', '100', '--num-gpu-blocks', '8192', '--max-num-seqs', '1024', '--load-metrics-interval', '100'],
      frontendArgs: ['--max-inflight-requests', String(STREAMS + 100)],
      // The default TTL: nothing here is killed, and a 2 s file heartbeat can be missed while the
      // frontend is saturated on 2 shared cores (see the README's notes).
      leaseTtl: 10,
    });
  });
  afterAll(async () => {
    await cluster?.close();
  });

  it('all complete with the requested lengths, then in-flight and KV blocks return to baseline', async () => {
    const baseline = await Promise.all(cluster.workers.map((w) => scrape(w.statusUrl)));
    for (const text of baseline) expect(metricValue(text, 'tandem_worker_kv_active_blocks', LABELS)).toBe(0);

    // One socket per stream, so all 1,000 are in flight at once; keep-alive reuses them after.
    const agent = new Agent({ keepAlive: true, maxSockets: STREAMS });
    let peakInflight = 0;
    const healthErrors: string[] = [];
    let running = true;
    const watcher = (async () => {
      while (running) {
        try {
          const health = (await (await fetch(`${cluster.url}/health`)).json()) as { inflight: number };
          peakInflight = Math.max(peakInflight, health.inflight);
        } catch (err) {
          healthErrors.push(String((err as Error).cause ?? err));
        }
        await new Promise((r) => setTimeout(r, 25));
      }
    })();

    const lengthOf = (i: number) => 8 + (i % 25);
    const startedAt = Date.now();
    let results: StreamResult[];
    try {
      results = await Promise.all(
        Array.from({ length: STREAMS }, (_, i) =>
          streamCompletion(agent, cluster.url, {
            model: MODEL,
            prompt: `request ${i}: tell me something`,
            max_tokens: lengthOf(i),
            ignore_eos: true,
            stream: true,
            stream_options: { include_usage: true },
            logprobs: 0,
            return_tokens_as_token_ids: true,
          }),
        ),
      );
    } finally {
      running = false;
      await watcher;
      agent.destroy();
    }
    const elapsedMs = Date.now() - startedAt;

    const failures: string[] = [];
    results.forEach((r, i) => {
      if (r.status !== 200) return failures.push(`#${i}: HTTP ${r.status} ${r.body.slice(0, 200)}`);
      const { chunks, done } = parseFrames(r.body);
      const tokens = tokenIdsOf(chunks).length;
      const usage = chunks.at(-1)?.usage as { completion_tokens?: number } | undefined;
      const finishes = chunks.flatMap((c) => ((c.choices ?? []) as Array<{ finish_reason: string | null }>).map((ch) => ch.finish_reason)).filter((f) => f !== null);
      if (!done || tokens !== lengthOf(i) || usage?.completion_tokens !== lengthOf(i) || finishes.join() !== 'length') {
        failures.push(`#${i}: done=${done} tokens=${tokens} usage=${usage?.completion_tokens} finish=${finishes.join()} want ${lengthOf(i)}`);
      }
      return undefined;
    });
    expect(failures.slice(0, 10)).toEqual([]);
    // The streams overlapped in the frontend (all were sent at once over 1,000 sockets; how
    // many the 25 ms health poll catches together depends on how busy the 2 cores are).
    expect(peakInflight).toBeGreaterThanOrEqual(100);
    expect(healthErrors).toEqual([]);
    console.info(`${STREAMS} streams in ${elapsedMs} ms; peak in-flight ${peakInflight}; health errors ${healthErrors.length} ${healthErrors.slice(0, 3).join('; ')}`);

    await pollUntil('frontend in-flight back to 0', async () => {
      const text = await cluster.frontendMetrics();
      return metricValue(text, 'tandem_frontend_inflight_requests', { model: MODEL }) === 0;
    }, 10_000);
    const frontend = await cluster.frontendMetrics();
    expect(metricValue(frontend, 'tandem_frontend_requests_total', { model: MODEL, endpoint: 'completions', status: '200' })).toBe(STREAMS);
    expect(((await (await fetch(`${cluster.url}/health`)).json()) as { inflight: number }).inflight).toBe(0);

    let served = 0;
    for (const worker of cluster.workers) {
      await pollUntil(`worker ${worker.instanceId} idle`, async () => {
        const text = await scrape(worker.statusUrl);
        return (
          metricValue(text, 'tandem_worker_kv_active_blocks', LABELS) === 0 &&
          metricValue(text, 'vllm:num_requests_running', LABELS) === 0 &&
          metricValue(text, 'vllm:num_requests_waiting', LABELS) === 0
        );
      }, 10_000);
      const text = await scrape(worker.statusUrl);
      expect(metricValue(text, 'vllm:kv_cache_usage_perc', LABELS)).toBe(0);
      served += metricValue(text, 'tandem_worker_requests_total', LABELS)!;
    }
    expect(served).toBe(STREAMS);
  });
});
