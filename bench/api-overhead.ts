/**
 * Frontend overhead per API (issue 26, "Benchmarks"): chat, Responses and Anthropic Messages —
 * three codecs over one pipeline — against the same fleet in the same run: a `runtime
 * frontend` process in front of mocker workers at a very high speedup (simulated compute ~0),
 * so what differs between endpoints is only the codec (parse, translation, per-token framing).
 *
 *   TTFT      concurrency 1, 2 output tokens, in blocks of one endpoint rotating chat → responses
 *             → messages so all three see the same load; p50 and p90 per endpoint.
 *   tokens/s  64 streams × 512 tokens (ignore_eos) per endpoint, rounds in rotating order;
 *             the sum of streamed output tokens over the wall time of each round, best round.
 *
 *   CPU       the frontend process's CPU time (utime + stime from /proc) per request in the TTFT
 *             phase and per streamed token in the tokens/s phase: on a shared, loaded machine the
 *             wall-clock numbers swing by tens of percent between rounds, the CPU charged to the
 *             frontend per unit of work much less.
 *
 * Aim (issue 26): every endpoint within 5% of chat. Text and usage are read from each API's own
 * events by the loadgen SSE client (bench/loadgen/sse-client.ts), so the client's parse cost is
 * the same code path for all three.
 * Run:  npm run build && node --import tsx bench/api-overhead.ts [--quick]
 * Writes bench/results/api-overhead.json (or --out FILE) and prints a table.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
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

/** CPU seconds (user + system) the process has used, from /proc (Linux); clock ticks are 1/100 s. */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
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

  const pid = fleet.frontendPid!;
  const ttft: Record<Endpoint, number[]> = { chat: [], responses: [], messages: [] };
  const cpuPerRequestMs: Record<Endpoint, number> = { chat: 0, responses: 0, messages: 0 };
  // Blocks of one endpoint (for its CPU account), rotating through the endpoints so each sees the same load over time.
  for (let block = 0; block < 8; block++) {
    for (let k = 0; k < ENDPOINTS.length; k++) {
      const e = ENDPOINTS[(block + k) % ENDPOINTS.length]!;
      const before = cpuSeconds(pid);
      const n = config.ttft.requests_per_endpoint / 8;
      for (let i = 0; i < n; i++) {
        const out = await send(e, config.ttft.max_tokens, i);
        ttft[e].push(out.chunkTimes[0]! - out.sentAt);
      }
      cpuPerRequestMs[e] += ((cpuSeconds(pid) - before) * 1000) / config.ttft.requests_per_endpoint;
    }
  }

  const tokensPerSecond: Record<Endpoint, number[]> = { chat: [], responses: [], messages: [] };
  const cpuTokens: Record<Endpoint, { cpu: number; tokens: number }> = { chat: { cpu: 0, tokens: 0 }, responses: { cpu: 0, tokens: 0 }, messages: { cpu: 0, tokens: 0 } };
  for (let round = 0; round < config.stream.rounds; round++) {
    for (let k = 0; k < ENDPOINTS.length; k++) {
      const e = ENDPOINTS[(round + k) % ENDPOINTS.length]!;
      let next = 0;
      let tokens = 0;
      const start = performance.now();
      const cpuBefore = cpuSeconds(pid);
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
      cpuTokens[e].cpu += cpuSeconds(pid) - cpuBefore;
      cpuTokens[e].tokens += tokens;
    }
  }

  const rows = ENDPOINTS.map((e) => {
    const s = summarize(ttft[e]);
    return {
      endpoint: e,
      ttft_p50_ms: s.p50,
      ttft_p90_ms: s.p90,
      tokens_per_s: Math.max(...tokensPerSecond[e]),
      cpu_ms_per_request: cpuPerRequestMs[e],
      cpu_us_per_token: (cpuTokens[e].cpu * 1e6) / cpuTokens[e].tokens,
    };
  });
  const chat = rows[0]!;
  const table = rows.map((r) => ({
    ...r,
    ttft_p50_vs_chat: r.ttft_p50_ms / chat.ttft_p50_ms,
    tokens_per_s_vs_chat: r.tokens_per_s / chat.tokens_per_s,
    cpu_per_request_vs_chat: r.cpu_ms_per_request / chat.cpu_ms_per_request,
    cpu_per_token_vs_chat: r.cpu_us_per_token / chat.cpu_us_per_token,
  }));
  result.results = table;
  result.samples = { tokens_per_s: tokensPerSecond };
  console.log('endpoint   TTFT p50 ms  TTFT p90 ms  tok/s (best)  CPU ms/req  CPU us/token  TTFT/chat  tok/s/chat  CPU req/chat  CPU tok/chat');
  for (const r of table) {
    console.log(
      `${r.endpoint.padEnd(10)} ${r.ttft_p50_ms.toFixed(3).padStart(11)} ${r.ttft_p90_ms.toFixed(3).padStart(12)} ${r.tokens_per_s.toFixed(0).padStart(13)} ${r.cpu_ms_per_request.toFixed(3).padStart(11)} ${r.cpu_us_per_token.toFixed(2).padStart(13)} ${r.ttft_p50_vs_chat.toFixed(3).padStart(10)} ${r.tokens_per_s_vs_chat.toFixed(3).padStart(11)} ${r.cpu_per_request_vs_chat.toFixed(3).padStart(13)} ${r.cpu_per_token_vs_chat.toFixed(3).padStart(13)}`,
    );
  }
} finally {
  client.close();
  await fleet.stop();
}
mkdirSync(dirname(args.out!), { recursive: true });
writeFileSync(args.out!, `${JSON.stringify(result, null, 2)}\n`);
console.log(`wrote ${args.out}`);
