/**
 * Disaggregation on one GPU (issue 33 "Benchmarks"): native workers on the device, real
 * processes through the frontend (startFleet), a random model in a real model's shape
 * (`tandem_gpu_bench make-model` plus a tiny tokenizer; scripts/device/disagg-bench-check.sh).
 *
 *   ttft  a 4k-token prompt, one request at a time (--repeats after 2 warm-ups): time to the
 *         first and the second token, aggregated (1 worker) vs 1 prefill + 1 decode, without and
 *         with --kv-layer-streaming (frontend and workers); ratios disaggregated / aggregated
 *         (the aim: <= 1.1x either way)
 *   itl   a prefill-heavy load (ISL 4096, OSL 128, Poisson at --rate req/s, --requests):
 *         ITL p50 / p99, TTFT p50 / p90 and output tok/s, aggregated vs 1P+1D (runBench)
 *
 *   node dist/bench/disagg-gpu-bench.js --model DIR [--device cuda|simt] [--prompt-tokens 4096]
 *        [--rate 6] [--requests 40] [--repeats 5] [--kv-cache-memory BYTES] [--out FILE]
 *
 * Both fleets share the GPU with nothing else; the KV pool of each worker is --kv-cache-memory
 * (default 16 GiB). Writes --out (default bench/results/disagg-gpu-bench.json) and a table. On
 * simt it only proves the flow (tiny model, short prompts, the numbers mean nothing).
 */
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { existsSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { startFleet, type Fleet, type FleetOptions } from './fleet/index.js';
import { FrontendStreamClient } from './fleet/stream-clients.js';
import { metricSum, randomLoad, scrapeMetrics } from './disagg-common.js';

const { values: args } = parseArgs({
  options: {
    device: { type: 'string', default: 'cuda' },
    model: { type: 'string', default: 'tiny' },
    'prompt-tokens': { type: 'string', default: '4096' },
    osl: { type: 'string', default: '128' },
    rate: { type: 'string', default: '6' },
    requests: { type: 'string', default: '40' },
    repeats: { type: 'string', default: '5' },
    'kv-cache-memory': { type: 'string', default: String(16 * 2 ** 30) },
    out: { type: 'string' },
  },
});

const REPO = resolve(import.meta.dirname, existsSync(resolve(import.meta.dirname, '../bin/runtime.js')) ? '..' : '../..');
const PROMPT = Number(args['prompt-tokens']);
const OSL = Number(args.osl);

type Config = 'agg' | 'disagg' | 'disagg-streaming';

async function fleetFor(config: Config): Promise<Fleet> {
  const common: FleetOptions = {
    engine: 'native',
    model: args.model!,
    maxNumBatchedTokens: Math.max(PROMPT, 512),
    maxNumSeqs: 64,
    startTimeoutMs: 180_000,
    extraWorkerArgs: ['--device', args.device!, '--kv-cache-memory', args['kv-cache-memory']!, ...(config === 'disagg-streaming' ? ['--kv-layer-streaming'] : [])],
    extraFrontendArgs: ['--disagg-min-prefill-tokens', '256', '--max-inflight-requests', '4096', ...(config === 'disagg-streaming' ? ['--kv-layer-streaming'] : [])],
  };
  return config === 'agg' ? startFleet({ ...common, mode: 'agg', workers: 1 }) : startFleet({ ...common, mode: 'disagg', prefill: 1, decode: 1 });
}

function ids(n: number, seed: number, vocab: number): number[] {
  let s = seed >>> 0;
  return Array.from({ length: n }, () => 3 + ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) % Math.max(1, vocab - 3)));
}

interface TtftResult {
  config: Config;
  ttftMs: number[];
  secondTokenMs: number[];
  meanTtftMs: number;
  meanSecondTokenMs: number;
  disaggregated: number | null;
}

/** One request at a time: TTFT, and the end of a 2-token answer (the second token's arrival). */
async function ttft(config: Config, fleet: Fleet, vocab: number): Promise<TtftResult> {
  const client = new FrontendStreamClient(fleet.url, fleet.model);
  const ttfts: number[] = [];
  const seconds: number[] = [];
  try {
    const repeats = Number(args.repeats);
    for (let i = 0; i < repeats + 2; i++) {
      // A fresh prompt each time: no prefix-cache hit anywhere.
      const r = await client.stream({ tokenIds: ids(PROMPT, 100 + i, vocab), maxTokens: 2, seed: i });
      if (!r.ok) throw new Error(`${config}: request failed: ${r.error}`);
      if (i < 2) continue;
      ttfts.push(r.ttftMs);
      seconds.push(r.e2eMs);
    }
  } finally {
    await client.close();
  }
  const mean = (v: number[]) => v.reduce((a, b) => a + b, 0) / v.length;
  const metrics = await scrapeMetrics(fleet.url);
  return {
    config,
    ttftMs: ttfts,
    secondTokenMs: seconds,
    meanTtftMs: mean(ttfts),
    meanSecondTokenMs: mean(seconds),
    disaggregated: config === 'agg' ? null : metricSum(metrics, 'tandem_frontend_disagg_requests_total', 'path="disagg"'),
  };
}

async function itl(config: Config, fleet: Fleet) {
  const report = await randomLoad(fleet, { isl: PROMPT, osl: OSL, rate: Number(args.rate), requests: Number(args.requests) });
  const s = report.summary;
  return {
    config,
    completed: s.requests.completed,
    failed: s.requests.failed,
    itlMs: { p50: s.latency_ms.itl.p50, p99: s.latency_ms.itl.p99 },
    ttftMs: { p50: s.latency_ms.ttft.p50, p90: s.latency_ms.ttft.p90 },
    outputTokPerS: s.throughput.output_tokens_per_s,
  };
}

async function main(): Promise<void> {
  const ttfts: TtftResult[] = [];
  const itls: Array<Awaited<ReturnType<typeof itl>>> = [];
  for (const config of ['agg', 'disagg', 'disagg-streaming'] as const) {
    const fleet = await fleetFor(config);
    try {
      const vocab = Number(JSON.parse(await readFile(join(fleet.modelDir, 'config.json'), 'utf8')).vocab_size);
      ttfts.push(await ttft(config, fleet, vocab));
      console.error(`disagg-gpu-bench: ${config} TTFT ${ttfts.at(-1)!.meanTtftMs.toFixed(1)} ms`);
      if (config !== 'disagg-streaming') {
        itls.push(await itl(config, fleet));
        console.error(`disagg-gpu-bench: ${config} ITL p99 ${itls.at(-1)!.itlMs.p99.toFixed(1)} ms`);
      }
    } finally {
      await fleet.stop();
    }
  }
  const agg = ttfts.find((t) => t.config === 'agg')!;
  const ratios = Object.fromEntries(ttfts.filter((t) => t.config !== 'agg').map((t) => [`${t.config}TtftVsAgg`, t.meanTtftMs / agg.meanTtftMs]));
  const report = {
    bench: 'disagg-gpu',
    date: new Date().toISOString(),
    device: args.device,
    model: args.model,
    plan: { promptTokens: PROMPT, osl: OSL, rate: Number(args.rate), requests: Number(args.requests), repeats: Number(args.repeats), kvCacheMemory: Number(args['kv-cache-memory']) },
    aim: 'disaggregated TTFT <= 1.1x aggregated at a 4k prompt, with and without layer streaming; ITL p99 reported as measured',
    ttft: ttfts,
    itl: itls,
    ratios,
  };
  const out = args.out ?? join(REPO, 'bench/results/disagg-gpu-bench.json');
  await mkdir(dirname(out), { recursive: true });
  await writeFile(out, `${JSON.stringify(report, null, 2)}\n`);
  console.log(`\ndisagg-gpu-bench (${args.device}, ${PROMPT}-token prompts)`);
  console.log('config            | TTFT ms (mean) | 2nd token ms | vs agg');
  for (const t of ttfts) console.log(`${t.config.padEnd(17)} | ${t.meanTtftMs.toFixed(1).padStart(14)} | ${t.meanSecondTokenMs.toFixed(1).padStart(12)} | ${(t.meanTtftMs / agg.meanTtftMs).toFixed(2)}x`);
  console.log(`\nprefill-heavy load (ISL ${PROMPT}, OSL ${OSL}, ${args.rate} req/s):`);
  console.log('config   | ITL p50 | ITL p99 | TTFT p50 | TTFT p90 | out tok/s | done/failed');
  for (const r of itls) console.log(`${r.config.padEnd(8)} | ${r.itlMs.p50.toFixed(1).padStart(7)} | ${r.itlMs.p99.toFixed(1).padStart(7)} | ${r.ttftMs.p50.toFixed(1).padStart(8)} | ${r.ttftMs.p90.toFixed(1).padStart(8)} | ${r.outputTokPerS.toFixed(0).padStart(9)} | ${r.completed}/${r.failed}`);
  console.log(`wrote ${out}`);
}

await main();
