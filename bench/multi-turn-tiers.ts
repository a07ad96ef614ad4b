/**
 * Issue 38: does a host KV tier (G2) lower TTFT on multi-turn workloads? One mocker worker
 * under `runtime up`, `runtime bench` against it, without and with `--kv-host-cache-gb 1`,
 * alternating (no-host, host, no-host, host, ... for `--pairs`), each on a fresh fleet.
 *
 *   node --import tsx bench/multi-turn-tiers.ts [--pairs 2] [--quick] [--runtime PATH] [--out FILE] [--workloads multi-turn,agentic]   (needs `npx tsc -b`)
 *
 * Workloads (`runtime bench --workload multi-turn`, 16 sessions x 5 turns, Poisson 4 sessions/s):
 *   - multi-turn: the setup: `--num-gpu-blocks 96 --block-size 16 --speedup-ratio 4`,
 *     ISL 200 a turn, OSL 24, think time 300 ms;
 *   - agentic: the same with a 512-token system prompt shared by every session (an agent's
 *     instructions and tools) and a 256-block pool.
 * Per run: cached prompt tokens, TTFT mean/p50/p90; per pair the ratios no-host / host.
 * Writes bench/results/multi-turn-tiers.json.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { benchArgs } from './fleet/bench-args.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
/** `--runtime PATH`: another checkout's bin/runtime.js (e.g. main's, for a before/after). */
const RUNTIME = benchArgs().value('--runtime') ?? join(ROOT, 'bin', 'runtime.js');

interface Workload {
  name: string;
  up: string[];
  bench: string[];
}

const WORKLOADS: Workload[] = [
  { name: 'multi-turn', up: ['--num-gpu-blocks', '96'], bench: ['--isl', '200'] },
  { name: 'agentic', up: ['--num-gpu-blocks', '256'], bench: ['--isl', '200', '--system-len', '512'] },
];
const COMMON_UP = ['--engine', 'mocker', '--model', 'tiny', '--workers', '1', '--block-size', '16', '--speedup-ratio', '4', '--http-port', '0'];
const COMMON_BENCH = ['--workload', 'multi-turn', '--sessions', '16', '--turns', '5', '--osl', '24', '--think-time', '300', '--rate', '4'];

interface RunSummary {
  workload: string;
  host: boolean;
  cachedShare: number;
  ttftMs: { mean: number; p50: number; p90: number };
  failed: number;
}

function run(args: string[], cacheDir: string, onLine?: (line: string) => void): { done: Promise<number>; stop: () => void } {
  const child = spawn(process.execPath, [RUNTIME, ...args], { env: { ...process.env, TANDEM_CACHE_DIR: cacheDir }, stdio: ['ignore', 'pipe', 'pipe'] });
  let buf = '';
  const feed = (d: Buffer) => {
    buf += d.toString();
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      onLine?.(buf.slice(0, i));
      buf = buf.slice(i + 1);
    }
  };
  child.stdout.on('data', feed);
  child.stderr.on('data', feed);
  return { done: new Promise((res) => child.on('exit', (code) => res(code ?? 1))), stop: () => child.kill('SIGINT') };
}

async function once(w: Workload, host: boolean, cacheDir: string, outDir: string): Promise<RunSummary> {
  let url: string | undefined;
  let ready: () => void = () => undefined;
  const serving = new Promise<void>((res) => (ready = res));
  const up = run(['up', ...COMMON_UP, ...w.up, ...(host ? ['--kv-host-cache-gb', '1'] : [])], cacheDir, (line) => {
    const m = /^Tandem is serving \S+ at (http:\/\/\S+)$/.exec(line);
    if (m) url = m[1];
    if (line.startsWith('Press Ctrl-C to stop')) ready();
  });
  await Promise.race([serving, up.done.then((c) => Promise.reject(new Error(`runtime up exited ${c}`)))]);
  try {
    // `--model tiny` generates the model into the cache dir, under its own name.
    const tokenizer = join(cacheDir, 'tiny-llama');
    const label = `${w.name}-${host ? 'host' : 'nohost'}`;
    const code = await run(['bench', '--url', url!, '--model', 'tiny-llama', '--tokenizer', tokenizer, ...COMMON_BENCH, ...w.bench, '--out', outDir, '--label', label], cacheDir).done;
    if (code !== 0) throw new Error(`runtime bench exited ${code}`);
    const s = (JSON.parse(readFileSync(join(outDir, `${label}.json`), 'utf8')) as { summary: Summary }).summary;
    const t = s.latency_ms.ttft;
    return { workload: w.name, host, cachedShare: s.tokens.cached_ratio, ttftMs: { mean: t.mean, p50: t.p50, p90: t.p90 }, failed: s.requests.failed };
  } finally {
    up.stop();
    await up.done;
  }
}

interface Summary {
  requests: { failed: number };
  latency_ms: { ttft: { mean: number; p50: number; p90: number } };
  tokens: { cached_ratio: number };
}

async function main(): Promise<void> {
  const args = benchArgs();
  const pairs = args.number('--pairs', args.quick ? 1 : 2);
  const cacheDir = mkdtempSync(join(tmpdir(), 'tandem-mt-tiers-'));
  const outDir = join(cacheDir, 'reports');
  const runs: RunSummary[] = [];
  try {
    const only = args.value('--workloads')?.split(',');
    for (const w of WORKLOADS.filter((x) => only === undefined || only.includes(x.name))) {
      for (let p = 0; p < pairs; p++) {
        for (const host of [false, true]) {
          const r = await once(w, host, cacheDir, outDir);
          runs.push(r);
          process.stdout.write(`${w.name} ${host ? 'host' : 'no host'}: cached ${(r.cachedShare * 100).toFixed(1)}%, TTFT p50 ${r.ttftMs.p50.toFixed(0)} p90 ${r.ttftMs.p90.toFixed(0)} ms\n`);
        }
      }
    }
  } finally {
    rmSync(cacheDir, { recursive: true, force: true });
  }
  const pairsOut = [];
  for (let i = 0; i < runs.length; i += 2) {
    const [a, b] = [runs[i]!, runs[i + 1]!];
    pairsOut.push({ workload: a.workload, cachedGain: b.cachedShare / Math.max(a.cachedShare, 1e-9), ttftP50NoHostOverHost: a.ttftMs.p50 / b.ttftMs.p50, ttftP90NoHostOverHost: a.ttftMs.p90 / b.ttftMs.p90, ttftMeanNoHostOverHost: a.ttftMs.mean / b.ttftMs.mean });
  }
  const head = '| workload | host tier | cached % | TTFT mean ms | TTFT p50 ms | TTFT p90 ms | failed |';
  const rows = runs.map((r) => `| ${r.workload} | ${r.host ? 'G2 1 GB' : 'none'} | ${(r.cachedShare * 100).toFixed(1)} | ${r.ttftMs.mean.toFixed(0)} | ${r.ttftMs.p50.toFixed(0)} | ${r.ttftMs.p90.toFixed(0)} | ${r.failed} |`);
  const lines = pairsOut.map((p) => `${p.workload}: cached x${p.cachedGain.toFixed(1)}, TTFT no-host/host p50 ${p.ttftP50NoHostOverHost.toFixed(2)}x, p90 ${p.ttftP90NoHostOverHost.toFixed(2)}x, mean ${p.ttftMeanNoHostOverHost.toFixed(2)}x`);
  const file = resolve(ROOT, 'bench', 'results', args.value('--out') ?? 'multi-turn-tiers.json');
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, `${JSON.stringify({ bench: 'multi-turn-tiers', date: new Date().toISOString(), runtime: RUNTIME, up: COMMON_UP, bench_args: COMMON_BENCH, workloads: WORKLOADS, runs, pairs: pairsOut }, null, 2)}\n`);
  process.stdout.write(`\n${[head, '|---|---|---|---|---|---|---|', ...rows].join('\n')}\n\n${lines.join('\n')}\nwrote ${file}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`multi-turn-tiers: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
