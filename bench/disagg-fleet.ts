/**
 * Fleet benchmark of disaggregation (issue 8 "Benchmarks"): disaggregated (2 prefill + 2 decode
 * mocker workers) against aggregated (4 mocker workers), same frontend, same offered load, on a
 * prefill-heavy workload (ISL 4k, OSL 256, Poisson arrivals near saturation), using the bench
 * tool's runBench. Reports TTFT p50/p90, ITL p50/p99, output tok/s side by side.
 *
 *   npm run build && node --import tsx bench/disagg-fleet.ts [--quick] [--rates 4,10] [--requests 60]
 *        [--kv-bytes-per-token 4096] [--tls sm,self] [--speedup-ratio 1]
 *
 * The prefill and decode workers keep a real host KV pool and move real bytes over UCX; on this
 * 2-core machine the KV per token is scaled down (default 4 KiB instead of an 8B model's
 * 128 KiB) so the CPU copying bytes does not become the benchmark. Writes
 * bench/results/disagg-fleet.json. A fresh fleet per mode.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { flagValue, longContextModel, metricSum, randomLoad, scrapeMetrics } from './disagg-common.js';
import { machineLoad } from './fleet/machine.js';
import { startFleet, type Fleet, type FleetOptions } from './fleet/index.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const QUICK = args.includes('--quick');
const num = (name: string, fallback: number) => Number(flagValue(args, name, String(fallback)));
const str = (name: string, fallback: string) => flagValue(args, name, fallback);

const PLAN = {
  isl: 4096,
  osl: 256,
  /** Offered loads (req/s): one below and one at the decode pool's KV capacity. */
  rates: str('--rates', QUICK ? '6' : '4,10').split(',').map(Number),
  requests: num('--requests', QUICK ? 16 : 60),
  speedupRatio: num('--speedup-ratio', 1),
  numGpuBlocks: num('--num-gpu-blocks', 4096),
  maxNumSeqs: 64,
  kvBytesPerToken: num('--kv-bytes-per-token', 4096),
  tls: str('--tls', 'sm,self'),
};

type Mode = 'agg' | 'disagg';

interface ModeResult {
  mode: Mode;
  rate: number;
  fleet: string;
  completed: number;
  failed: number;
  ttftMs: { p50: number; p90: number; p99: number };
  itlMs: { p50: number; p99: number };
  e2eMs: { p50: number; p90: number };
  outputTokPerS: number;
  requestsPerS: number;
  durationS: number;
  /** Requests the frontend actually disaggregated (disagg mode). */
  disaggregated: number | null;
}

async function runMode(mode: Mode, model: string, rate: number): Promise<ModeResult> {
  const common: FleetOptions = {
    model,
    speedupRatio: PLAN.speedupRatio,
    numGpuBlocks: PLAN.numGpuBlocks,
    maxNumSeqs: PLAN.maxNumSeqs,
    extraFrontendArgs: ['--disagg-min-prefill-tokens', '512', '--max-inflight-requests', '4096'],
  };
  const fleet: Fleet =
    mode === 'agg'
      ? await startFleet({ ...common, mode: 'agg', workers: 4 })
      : await startFleet({ ...common, mode: 'disagg', prefill: 2, decode: 2, extraWorkerArgs: ['--kv-bytes-per-token', String(PLAN.kvBytesPerToken)] });
  try {
    const report = await randomLoad(fleet, { isl: PLAN.isl, osl: PLAN.osl, rate, requests: PLAN.requests });
    const s = report.summary;
    const metrics = await scrapeMetrics(fleet.url);
    return {
      mode,
      rate,
      fleet: mode === 'agg' ? '4 aggregated' : '2 prefill + 2 decode',
      completed: s.requests.completed,
      failed: s.requests.failed,
      ttftMs: { p50: s.latency_ms.ttft.p50, p90: s.latency_ms.ttft.p90, p99: s.latency_ms.ttft.p99 },
      itlMs: { p50: s.latency_ms.itl.p50, p99: s.latency_ms.itl.p99 },
      e2eMs: { p50: s.latency_ms.e2e.p50, p90: s.latency_ms.e2e.p90 },
      outputTokPerS: s.throughput.output_tokens_per_s,
      requestsPerS: s.throughput.requests_per_s,
      durationS: s.duration_s,
      disaggregated: mode === 'disagg' ? metricSum(metrics, 'tandem_frontend_disagg_requests_total', 'path="disagg"') : null,
    };
  } finally {
    await fleet.stop();
  }
}

async function main(): Promise<void> {
  process.env.UCX_TLS = PLAN.tls;
  const loadBefore = machineLoad();
  const results: ModeResult[] = [];
  const tmp = mkdtempSync(join(tmpdir(), 'tandem-disagg-fleet-'));
  try {
    const model = await longContextModel(join(tmp, 'tiny-32k'));
    for (const rate of PLAN.rates) {
      for (const mode of ['agg', 'disagg'] as const) {
        results.push(await runMode(mode, model, rate));
        process.stderr.write(`disagg-fleet: ${mode} at ${rate} req/s done\n`);
      }
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  const out = {
    bench: 'disagg-fleet',
    date: new Date().toISOString(),
    plan: PLAN,
    machine: { cores: cpus().length, loadBefore, loadAfter: machineLoad() },
    results,
  };
  mkdirSync(join(ROOT, 'bench', 'results'), { recursive: true });
  const file = join(ROOT, 'bench', 'results', QUICK ? 'disagg-fleet-quick.json' : 'disagg-fleet.json');
  writeFileSync(file, JSON.stringify(out, null, 2) + '\n');
  console.table(
    results.map((r) => ({
      fleet: r.fleet,
      'req/s': r.rate,
      ok: `${r.completed}/${r.completed + r.failed}`,
      'TTFT p50 ms': round(r.ttftMs.p50),
      'TTFT p90 ms': round(r.ttftMs.p90),
      'ITL p50 ms': round(r.itlMs.p50),
      'ITL p99 ms': round(r.itlMs.p99),
      'out tok/s': round(r.outputTokPerS),
      disaggregated: r.disaggregated ?? '-',
    })),
  );
  process.stdout.write(`wrote ${file}\n`);
}

function round(x: number | null | undefined): number | null {
  return x === null || x === undefined ? null : Math.round(x * 10) / 10;
}

await main();
