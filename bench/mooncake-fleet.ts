/**
 * Issue 38: Mooncake's public conversation trace (FAST'25 release) on 4 mocker workers with
 * small KV pools, in virtual time (test/router/virtual-fleet.ts: real `Scheduler`s stepping for
 * the mocker's step time, a real `KvRouter` fed their KV events and load reports, the frontend's
 * busy queue). Replayed from light load to past saturation, side by side at each speed:
 *   - rr          round-robin;
 *   - kv          `--router-mode kv`, today's defaults (never refuses; prefix affinity);
 *   - kv-refuse   kv with the old default refusal (every worker at ≥ 95% KV → wait up to 10 s in
 *                 the frontend, then 429): what the issue measured, for comparison;
 *   - rr-host, kv-host: the same with an effectively unbounded host tier (G2) on each worker.
 * Per row: requests refused, TTFT p50/p90 of those served, cached prompt tokens as a share of
 * all prompt tokens, against the trace window's infinite-cache ceiling (every full block any
 * earlier request of the window prompted).
 *
 *   node --import tsx bench/mooncake-fleet.ts --trace PATH [--requests 1200] [--offset 0] [--speeds 2,4,8,12,16,20,24,32,48] [--quick] [--out FILE]
 *
 * `--offset N` replays the window that starts at the trace's request N: the trace is chaotic
 * enough that a policy change is judged on several windows (0, 1200, 2400, ...), not one.
 *
 * The trace is not in the repository. Get it with the project's fetch tool or git:
 *   git clone --depth 1 https://github.com/kvcache-ai/Mooncake && cp Mooncake/FAST25-release/traces/conversation_trace.jsonl /tmp/
 * (see docs/router.md, "Benchmarks").
 *
 * Scaling to the tiny fleet: each 512-token hash block of the trace becomes 32 tokens (two
 * 16-token KV blocks, seeded by the hash id, so equal hash ids give equal tokens), input and
 * output lengths are divided by 16 (output clamped to 2..128). Timestamps are divided by the
 * speed. Host copies cost what an 8B-class model's would: 128 KiB of KV per token (Llama-3.1-8B,
 * bf16) over 25 GB/s (workers/kv-tiers/tier-costs.ts, H100_TIER_BANDWIDTHS), 0.084 ms a block,
 * against the perf model's ~0.25 ms recompute.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { KvRouter, type KvRouterConfig } from '../router/kv-router.js';
import { readMooncakeTrace } from '../planner/simulator/index.js';
import type { TraceEntry } from '../planner/simulator/trace.js';
import { SeededRandom } from '../runtime/random.js';
import { H100_TIER_BANDWIDTHS } from '../workers/kv-tiers/tier-costs.js';
import { VirtualFleet, type VirtualOutcome, type VirtualRequest } from '../test/router/virtual-fleet.js';
import { benchArgs } from './fleet/bench-args.js';
import { summarize } from './loadgen/stats.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const BLOCK = 16;
const TOKENS_PER_HASH = 32;
const SCALE = 512 / TOKENS_PER_HASH;
const WORKERS = 4;
/** Small pools: the window's working set is ~20x the fleet's device KV. */
const POOL_BLOCKS = 768;
/** Effectively unbounded G2 (as `--kv-host-cache-gb 1` is for the tiny model). */
const HOST_BLOCKS = 1 << 16;
const KV_BYTES_PER_TOKEN = 131_072;
const HOST_COPY_MS_PER_BLOCK = ((KV_BYTES_PER_TOKEN * BLOCK) / H100_TIER_BANDWIDTHS.hostBytesPerSec) * 1000;
const BUSY_WAIT_MS = 10_000;
/** The highest load round-robin "survives": its TTFT p90 stays under the frontend's busy wait. */
const SURVIVES_P90_MS = BUSY_WAIT_MS;

interface Config {
  name: string;
  roundRobin: boolean;
  host: boolean;
  router: Partial<KvRouterConfig>;
}

const CONFIGS: Config[] = [
  { name: 'rr', roundRobin: true, host: false, router: {} },
  { name: 'kv', roundRobin: false, host: false, router: {} },
  { name: 'kv-refuse', roundRobin: false, host: false, router: { refusal: { kvUsage: 0.95 } } },
  { name: 'rr-host', roundRobin: true, host: true, router: {} },
  { name: 'kv-host', roundRobin: false, host: true, router: {} },
];

function hashTokens(cache: Map<number, number[]>, id: number): number[] {
  let t = cache.get(id);
  if (t === undefined) {
    const rng = new SeededRandom(0x9e37 + id);
    t = Array.from({ length: TOKENS_PER_HASH }, () => Math.floor(rng.next() * 30_000));
    cache.set(id, t);
  }
  return t;
}

function requestsOf(entries: readonly TraceEntry[], speed: number): VirtualRequest[] {
  const cache = new Map<number, number[]>();
  const t0 = entries[0]!.timestamp;
  return entries.map((e, i) => {
    const isl = Math.max(BLOCK + 1, Math.round(e.input_length / SCALE));
    return {
      requestId: `m${i}`,
      atMs: (e.timestamp - t0) / speed,
      tokens: e.hash_ids.flatMap((h) => hashTokens(cache, h)).slice(0, isl),
      osl: Math.min(128, Math.max(2, Math.round(e.output_length / SCALE))),
    };
  });
}

/**
 * The infinite-cache ceiling: prompt tokens in full blocks that some earlier request of the
 * window also prompted (a block is named by its hash id and which half of it), at most all
 * but the last token (a prefill computes at least one), over all prompt tokens.
 */
function ceiling(requests: readonly VirtualRequest[], entries: readonly TraceEntry[]): number {
  const seen = new Set<string>();
  let hit = 0;
  let total = 0;
  requests.forEach((r, i) => {
    const full = Math.floor(r.tokens.length / BLOCK);
    const ids = entries[i]!.hash_ids;
    const key = (j: number) => `${ids[Math.floor((j * BLOCK) / TOKENS_PER_HASH)]}:${j % (TOKENS_PER_HASH / BLOCK)}`;
    let j = 0;
    while (j < full && seen.has(key(j))) j++;
    hit += Math.min(j * BLOCK, Math.floor((r.tokens.length - 1) / BLOCK) * BLOCK);
    total += r.tokens.length;
    for (let k = 0; k < full; k++) seen.add(key(k));
  });
  return hit / total;
}

function runOne(config: Config, requests: readonly VirtualRequest[]) {
  const router = new KvRouter(config.router);
  const fleet = new VirtualFleet(
    Array.from({ length: WORKERS }, (_, i) => ({ id: `w${i}`, speed: 1, numBlocks: POOL_BLOCKS })),
    router,
    undefined,
    { loadReports: true, busyWaitMs: BUSY_WAIT_MS, roundRobin: config.roundRobin, ...(config.host ? { hostBlocks: HOST_BLOCKS, hostCopyMsPerBlock: HOST_COPY_MS_PER_BLOCK } : {}) },
  );
  const started = Date.now();
  const out: VirtualOutcome[] = fleet.run(requests);
  const served = out.filter((o) => o.refused !== true);
  const ttft = summarize(served.map((o) => o.firstTokenMs! - o.arrivalMs));
  const prompt = served.reduce((a, o) => a + o.promptTokens, 0);
  const cached = served.reduce((a, o) => a + (o.cachedTokens ?? 0), 0);
  return {
    config: config.name,
    refused: out.length - served.length,
    ttftMs: { p50: ttft.p50, p90: ttft.p90 },
    cachedShare: cached / prompt,
    affinityDecisions: served.filter((o) => o.costs !== undefined && o.row.prefixHolder === true).length,
    perWorker: Array.from({ length: WORKERS }, (_, i) => served.filter((o) => o.workerId === `w${i}`).length),
    wallMs: Date.now() - started,
  };
}

function main(): void {
  const args = benchArgs();
  const path = args.value('--trace');
  if (path === undefined) {
    process.stderr.write('mooncake-fleet: --trace PATH is required (conversation_trace.jsonl from github.com/kvcache-ai/Mooncake, FAST25-release/traces; see docs/router.md)\n');
    process.exit(2);
  }
  const count = args.number('--requests', args.quick ? 400 : 1200);
  const offset = args.number('--offset', 0);
  const speeds = (args.value('--speeds') ?? (args.quick ? '4,16' : '2,4,8,12,16,20,24,32,48')).split(',').map(Number);
  let entries: TraceEntry[];
  try {
    entries = readMooncakeTrace(path).slice(offset, offset + count);
    if (entries.length === 0) throw new Error(`--offset ${offset} is past the trace's end`);
  } catch (err) {
    process.stderr.write(`mooncake-fleet: ${(err as Error).message}\n`);
    process.exit(2);
  }
  const results: Array<{ speed: number; offeredReqPerS: number } & ReturnType<typeof runOne>> = [];
  let ceil = 0;
  for (const speed of speeds) {
    const requests = requestsOf(entries, speed);
    ceil = ceiling(requests, entries);
    for (const c of CONFIGS) {
      const r = { speed, offeredReqPerS: (requests.length / requests[requests.length - 1]!.atMs) * 1000, ...runOne(c, requests) };
      results.push(r);
      process.stdout.write(`speed ${speed}x ${c.name}: refused ${r.refused}, TTFT p90 ${r.ttftMs.p90.toFixed(0)} ms, cached ${(r.cachedShare * 100).toFixed(1)}% (${r.wallMs} ms)\n`);
    }
  }
  const row = (speed: number, name: string) => results.find((r) => r.speed === speed && r.config === name)!;
  const surviving = speeds.filter((s) => row(s, 'rr').refused === 0 && row(s, 'rr').ttftMs.p90 < SURVIVES_P90_MS);
  const top = surviving.length > 0 ? Math.max(...surviving) : undefined;
  const checks = {
    infiniteCacheCeiling: ceil,
    kvRefusesZeroWhereRrDoes: speeds.every((s) => row(s, 'rr').refused > 0 || row(s, 'kv').refused === 0),
    highestSpeedRrSurvives: top,
    ttftP90RrOverKvAtThatSpeed: top !== undefined ? row(top, 'rr').ttftMs.p90 / row(top, 'kv').ttftMs.p90 : undefined,
    perSpeed: speeds.map((s) => ({
      speed: s,
      kvHostCachedOverCeiling: row(s, 'kv-host').cachedShare / ceil,
      ttftP90KvOverKvHost: row(s, 'kv').ttftMs.p90 / row(s, 'kv-host').ttftMs.p90,
      ttftP90RrOverKv: row(s, 'rr').ttftMs.p90 / row(s, 'kv').ttftMs.p90,
    })),
  };
  const head = '| speed | req/s | config | refused | TTFT p50 ms | TTFT p90 ms | cached % | % of ceiling | requests per worker |';
  const rows = results.map((r) => `| ${r.speed}x | ${r.offeredReqPerS.toFixed(1)} | ${r.config} | ${r.refused} | ${r.ttftMs.p50.toFixed(0)} | ${r.ttftMs.p90.toFixed(0)} | ${(r.cachedShare * 100).toFixed(1)} | ${((r.cachedShare / ceil) * 100).toFixed(0)} | ${r.perWorker.join(' / ')} |`);
  const lines = [
    `infinite-cache ceiling of the window: ${(ceil * 100).toFixed(1)}% of prompt tokens`,
    `KV refuses 0 wherever round-robin refuses 0: ${checks.kvRefusesZeroWhereRrDoes}`,
    `highest speed round-robin survives (TTFT p90 < ${SURVIVES_P90_MS} ms): ${top ?? 'none'}; there TTFT p90 rr/kv ${checks.ttftP90RrOverKvAtThatSpeed?.toFixed(2) ?? '-'}x (target >= 3x)`,
    ...checks.perSpeed.map((p) => `${p.speed}x: kv-host cached ${(p.kvHostCachedOverCeiling * 100).toFixed(0)}% of ceiling (target >= 80%), TTFT p90 kv/kv-host ${p.ttftP90KvOverKvHost.toFixed(2)}x (target >= 1.5x), rr/kv ${p.ttftP90RrOverKv.toFixed(2)}x`),
  ];
  const text = [head, '|---|---|---|---|---|---|---|---|---|', ...rows].join('\n');
  const file = resolve(ROOT, 'bench', 'results', args.value('--out') ?? 'mooncake-fleet.json');
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, `${JSON.stringify({ bench: 'mooncake-fleet', trace: 'conversation_trace.jsonl (Mooncake FAST25-release)', requests: count, offset, workers: WORKERS, poolBlocks: POOL_BLOCKS, hostBlocks: HOST_BLOCKS, hostCopyMsPerBlock: HOST_COPY_MS_PER_BLOCK, tokensPerHash: TOKENS_PER_HASH, results, checks }, null, 2)}\n`);
  process.stdout.write(`\n${text}\n\n${lines.join('\n')}\nwrote ${file}\n`);
}

main();
