/**
 * Frontend overhead per API (issue 26, "Benchmarks"): chat, Responses and Anthropic Messages —
 * three codecs over one pipeline — against the same fleet in the same run: a `runtime
 * frontend` process in front of mocker workers at a very high speedup (simulated compute ~0),
 * so what differs between endpoints is only the codec (parse, translation, per-token framing).
 *
 *   TTFT      concurrency 1, 2 output tokens, requests rotate chat → responses → messages so all
 *             three see the same load; p50 and p90 per endpoint.
 *   tokens/s  64 streams × 512 tokens (ignore_eos) per endpoint, rounds in rotating order;
 *             the sum of streamed output tokens over the wall time of each round, best round.
 *
 * Aim (issue 26): every endpoint within 5% of chat. Text and usage are read from each API's own
 * events by the loadgen SSE client (bench/loadgen/sse-client.ts), so the client's parse cost is
 * the same code path for all three.
 * Run:  npm run build && node --import tsx bench/api-overhead.ts [--quick]
 * Writes bench/results/api-overhead.json (or --out FILE) and prints a table.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { machineLoad, startFleet } from './fleet/index.js';
import { SseClient } from './loadgen/sse-client.js';
import { summarize } from './loadgen/stats.js';

const { values: args } = parseArgs({
  options: {
    workers: { type: 'string', default: '1' },
    'speedup-ratio': { type: 'string', default: '10000' },
    out: { type: 'string', default: 'bench/results/api-overhead.json' },
    quick: { type: 'boolean', default: false },
  },
});
const QUICK = args.quick!;
const config = {
  workers: Number(args.workers),
  speedup_ratio: Number(args['speedup-ratio']),
  ttft: { requests_per_endpoint: QUICK ? 100 : 400, max_tokens: 2 },
  stream: { concurrency: 64, streams: QUICK ? 64 : 256, max_tokens: 512, rounds: QUICK ? 2 : 3 },
};

type Endpoint = 'chat' | 'responses' | 'messages';
const ENDPOINTS: Endpoint[] = ['chat', 'responses', 'messages'];
const PROMPT = 'Summarize the following in one sentence: the quick brown fox jumps over the lazy dog, again and again, while the farmer watches from the porch.';

function request(endpoint: Endpoint, model: string, maxTokens: number, seed: number): { path: string; body: string } {
  const common = { model, stream: true, ignore_eos: true, seed, temperature: 0.7 };
  switch (endpoint) {
    case 'chat':
      return { path: '/v1/chat/completions', body: JSON.stringify({ ...common, max_tokens: maxTokens, stream_options: { include_usage: true }, messages: [{ role: 'user', content: PROMPT }] }) };
    case 'responses':
      return { path: '/v1/responses', body: JSON.stringify({ ...common, max_output_tokens: maxTokens, store: false, input: PROMPT }) };
    case 'messages':
      return { path: '/v1/messages', body: JSON.stringify({ ...common, max_tokens: maxTokens, messages: [{ role: 'user', content: PROMPT }] }) };
  }
}

const fleet = await startFleet({ workers: config.workers, speedupRatio: config.speedup_ratio, extraFrontendArgs: ['--max-inflight-requests', '100000'] });
const client = new SseClient(fleet.url);
const result: Record<string, unknown> = { config, machine: machineLoad() };
try {
  const send = async (endpoint: Endpoint, maxTokens: number, seed: number) => {
    const r = request(endpoint, fleet.model, maxTokens, seed);
    const out = await client.send(r.path, r.body, { expectedTokens: maxTokens, keepText: false, timeoutMs: 60_000 });
    if (!out.ok) throw new Error(`${endpoint}: ${out.errorKind} ${out.errorMessage}`);
    return out;
  };
  // Warm-up: tokenizer, template, connections.
  for (const e of ENDPOINTS) for (let i = 0; i < 20; i++) await send(e, 2, i);

  const ttft: Record<Endpoint, number[]> = { chat: [], responses: [], messages: [] };
  for (let i = 0; i < config.ttft.requests_per_endpoint; i++) {
    for (let k = 0; k < ENDPOINTS.length; k++) {
      const e = ENDPOINTS[(i + k) % ENDPOINTS.length]!;
      const out = await send(e, config.ttft.max_tokens, i);
      ttft[e].push(out.chunkTimes[0]! - out.sentAt);
    }
  }

  const tokensPerSecond: Record<Endpoint, number[]> = { chat: [], responses: [], messages: [] };
  for (let round = 0; round < config.stream.rounds; round++) {
    for (let k = 0; k < ENDPOINTS.length; k++) {
      const e = ENDPOINTS[(round + k) % ENDPOINTS.length]!;
      let next = 0;
      let tokens = 0;
      const start = performance.now();
      await Promise.all(
        Array.from({ length: config.stream.concurrency }, async () => {
          while (next < config.stream.streams) {
            const seed = next++;
            const out = await send(e, config.stream.max_tokens, seed);
            tokens += out.completionTokens ?? 0;
          }
        }),
      );
      tokensPerSecond[e].push(tokens / ((performance.now() - start) / 1000));
    }
  }

  const rows = ENDPOINTS.map((e) => {
    const s = summarize(ttft[e]);
    return { endpoint: e, ttft_p50_ms: s.p50, ttft_p90_ms: s.p90, tokens_per_s: Math.max(...tokensPerSecond[e]) };
  });
  const chat = rows[0]!;
  const table = rows.map((r) => ({ ...r, ttft_p50_vs_chat: r.ttft_p50_ms / chat.ttft_p50_ms, tokens_per_s_vs_chat: r.tokens_per_s / chat.tokens_per_s }));
  result.results = table;
  result.samples = { tokens_per_s: tokensPerSecond };
  console.log('endpoint   TTFT p50 ms  TTFT p90 ms   tok/s (best)   TTFT vs chat  tok/s vs chat');
  for (const r of table) {
    console.log(`${r.endpoint.padEnd(10)} ${r.ttft_p50_ms.toFixed(3).padStart(11)} ${r.ttft_p90_ms.toFixed(3).padStart(12)} ${r.tokens_per_s.toFixed(0).padStart(14)} ${r.ttft_p50_vs_chat.toFixed(3).padStart(14)} ${r.tokens_per_s_vs_chat.toFixed(3).padStart(14)}`);
  }
} finally {
  client.close();
  await fleet.stop();
}
mkdirSync(dirname(args.out!), { recursive: true });
writeFileSync(args.out!, `${JSON.stringify(result, null, 2)}\n`);
console.log(`wrote ${args.out}`);
