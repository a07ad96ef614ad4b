/**
 * Frontend overhead (issue 3, "Benchmark"): a real `runtime frontend` process in front of
 * mocker worker processes at a very high speedup (simulated compute ~0), measured in the same
 * run against calling the workers' gRPC generate endpoint directly with the same
 * PreprocessedRequest (token-id prompt, seed, max_tokens, ignore_eos).
 *
 *   TTFT      concurrency 1, requests alternate frontend / direct, so both see the same load;
 *             the difference of the p50s is the frontend's added latency (HTTP parse, validate,
 *             route, one more hop, detokenize, SSE framing).
 *   tokens/s  64 streams x 512 tokens, via frontend (SSE) vs direct.
 *   req/s     short streams (4 tokens) at concurrency 64, via frontend vs direct.
 *   dashboard the frontend phases again (TTFT, long and short streams, each for a fixed
 *             time) with the dashboard closed (no client on /dashboard/events: the frontend
 *             takes no snapshots) and open (one SSE client reading its 1 Hz snapshots), in
 *             rounds of alternating order; prints both and open / closed (issue 15: the
 *             dashboard must add nothing to the hot path).
 *
 * Aim: >= 50k streamed tokens/s per frontend process and <= 1 ms added TTFT at p50.
 * Run:  npm run build && node --import tsx bench/frontend-overhead.ts [--quick] [--workers N]
 *       [--runtime-bin DIR/bin/runtime.js] (run the fleet from another build, e.g. to try a fix)
 *       [--profile DIR] (write a V8 CPU profile of the frontend process to DIR, for
 *       chrome://inspect or `node --cpu-prof`-style tools; sampling slows the frontend)
 * Writes bench/results/frontend-overhead.json (or --out FILE) and prints a table.
 * bench/frontend-bench.ts measures the frontend alone in-process with a fake worker; this one
 * is the whole path between processes.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { machineLoad, startFleet, type Fleet } from './fleet/index.js';
import { DirectStreamClient, FrontendStreamClient, type StreamClient, type StreamJob, type StreamSample } from './fleet/stream-clients.js';

const { values: args } = (() => {
  try {
    return parseArgs({
      options: {
        workers: { type: 'string', default: '1' },
        'speedup-ratio': { type: 'string', default: '10000' },
        'prompt-len': { type: 'string', default: '128' },
        out: { type: 'string', default: 'bench/results/frontend-overhead.json' },
        'runtime-bin': { type: 'string' },
        profile: { type: 'string' },
        quick: { type: 'boolean', default: false },
      },
    });
  } catch (err) {
    // Usage errors exit 2, as `runtime` does.
    process.stderr.write(`frontend-overhead: ${(err as Error).message}\n`);
    process.exit(2);
  }
})();
const QUICK = args.quick!;
const config = {
  workers: Number(args.workers),
  speedup_ratio: Number(args['speedup-ratio']),
  prompt_len: Number(args['prompt-len']),
  ttft: { requests_per_path: QUICK ? 200 : 1000, max_tokens: 2 },
  stream: { concurrency: 64, requests: QUICK ? 128 : 512, max_tokens: 512 },
  short: { concurrency: 64, requests: QUICK ? 1000 : 5000, max_tokens: 4 },
  /** Dashboard closed vs open: rounds of fixed-time phases. */
  dashboard: { rounds: QUICK ? 2 : 4, phase_seconds: QUICK ? 3 : 8 },
  quick: QUICK,
  runtime_bin: args['runtime-bin'] ?? 'bin/runtime.js',
  /** CPU sampling slows the frontend: profiled numbers are not results. */
  profiled: args.profile !== undefined,
};

/**
 * A launcher for the fleet that profiles the frontend process with node:inspector and writes
 * the profile when it exits (the fleet's children are spawned as `node BIN ...`, and
 * --cpu-prof is not allowed in NODE_OPTIONS). Workers run unprofiled.
 */
function profilingLauncher(runtimeBin: string, outDir: string): string {
  mkdirSync(outDir, { recursive: true });
  const launcher = join(mkdtempSync(join(tmpdir(), 'tandem-frontend-prof-')), 'runtime.mjs');
  writeFileSync(
    launcher,
    `import { Session } from 'node:inspector';
import { writeFileSync } from 'node:fs';
if (process.argv[2] === 'frontend') {
  const session = new Session();
  session.connect();
  session.post('Profiler.enable');
  session.post('Profiler.start');
  process.on('exit', () => session.post('Profiler.stop', (err, res) => {
    if (!err) writeFileSync(${JSON.stringify(resolve(outDir))} + '/frontend-' + process.pid + '.cpuprofile', JSON.stringify(res.profile));
  }));
}
await import(${JSON.stringify(pathToFileURL(resolve(runtimeBin)).href)});
`,
  );
  return launcher;
}

/** numpy-style linear interpolation, as runtime bench reports percentiles. */
function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const x = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(x);
  const hi = Math.min(sorted.length - 1, lo + 1);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (x - lo);
}

interface PhaseResult {
  path: string;
  requests: number;
  errors: number;
  seconds: number;
  requests_per_s: number;
  tokens_per_s: number;
  tokens_per_chunk: number;
  ttft_ms: { p50: number; p90: number; p99: number };
  first_error?: string;
}

function summarize(path: string, samples: StreamSample[], seconds: number): PhaseResult {
  const ok = samples.filter((s) => s.ok);
  const ttft = ok.map((s) => s.ttftMs).sort((a, b) => a - b);
  const tokens = ok.reduce((a, s) => a + s.tokens, 0);
  const chunks = ok.reduce((a, s) => a + s.chunks, 0);
  const firstError = samples.find((s) => !s.ok)?.error;
  return {
    path,
    requests: samples.length,
    errors: samples.length - ok.length,
    seconds,
    requests_per_s: ok.length / seconds,
    tokens_per_s: tokens / seconds,
    tokens_per_chunk: chunks > 0 ? tokens / chunks : 0,
    ttft_ms: { p50: percentile(ttft, 50), p90: percentile(ttft, 90), p99: percentile(ttft, 99) },
    ...(firstError !== undefined ? { first_error: firstError } : {}),
  };
}

/** `concurrency` loops pulling from one shared count: a closed loop, as sustained load. */
async function closedLoop(client: StreamClient, job: StreamJob, concurrency: number, requests: number): Promise<PhaseResult> {
  const samples: StreamSample[] = [];
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < requests) {
        next++;
        samples.push(await client.stream(job));
      }
    }),
  );
  return summarize(client.name, samples, (performance.now() - started) / 1000);
}

/** One request at a time, alternating paths, so slow moments of a shared machine hit both. */
async function alternatingTtft(clients: StreamClient[], job: StreamJob, perPath: number): Promise<PhaseResult[]> {
  const samples = clients.map(() => [] as StreamSample[]);
  const busy = clients.map(() => 0);
  for (let i = 0; i < perPath; i++) {
    for (let c = 0; c < clients.length; c++) {
      // Alternate which path goes first, so neither always follows the other's cache warm-up.
      const k = (c + i) % clients.length;
      const t0 = performance.now();
      samples[k]!.push(await clients[k]!.stream(job));
      busy[k]! += (performance.now() - t0) / 1000;
    }
  }
  return clients.map((client, k) => summarize(client.name, samples[k]!, busy[k]!));
}

/** An open dashboard: one SSE client on /dashboard/events that reads (and counts) every frame. */
class DashboardViewer {
  frames = 0;
  private readonly abort = new AbortController();
  private readonly done: Promise<void>;

  constructor(url: string) {
    this.done = (async () => {
      const res = await fetch(`${url}/dashboard/events`, { signal: this.abort.signal });
      if (res.status !== 200 || !res.body) throw new Error(`/dashboard/events answered ${res.status}`);
      const decoder = new TextDecoder();
      for await (const chunk of res.body) this.frames += decoder.decode(chunk as Uint8Array, { stream: true }).split('event: snapshot').length - 1;
    })().catch((err: Error) => {
      if (err.name !== 'AbortError') throw err;
    });
  }

  async close(): Promise<number> {
    this.abort.abort();
    await this.done;
    return this.frames;
  }
}

/** `concurrency` loops for `seconds`: the raw samples and the time taken. */
async function timedLoop(client: StreamClient, job: StreamJob, concurrency: number, seconds: number): Promise<{ samples: StreamSample[]; seconds: number }> {
  const samples: StreamSample[] = [];
  const started = performance.now();
  const end = started + seconds * 1000;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < end) samples.push(await client.stream(job));
    }),
  );
  return { samples, seconds: (performance.now() - started) / 1000 };
}

/**
 * The frontend phases (TTFT at concurrency 1, long streams, short streams), each run for a fixed
 * time with the dashboard closed and open, in rounds whose order alternates (closed-open,
 * open-closed, ...) so drift on a shared machine hits both sides alike.
 */
async function dashboardPhases(client: StreamClient, url: string, job: (maxTokens: number) => StreamJob): Promise<{ closed: PhaseResult[]; open: PhaseResult[]; frames: number }> {
  const phases = [
    { name: 'ttft', job: job(config.ttft.max_tokens), concurrency: 1 },
    { name: 'stream', job: job(config.stream.max_tokens), concurrency: config.stream.concurrency },
    { name: 'short', job: job(config.short.max_tokens), concurrency: config.short.concurrency },
  ];
  const acc = { closed: phases.map(() => ({ samples: [] as StreamSample[], seconds: 0 })), open: phases.map(() => ({ samples: [] as StreamSample[], seconds: 0 })) };
  let frames = 0;
  for (let round = 0; round < config.dashboard.rounds; round++) {
    const sides: Array<'closed' | 'open'> = round % 2 === 0 ? ['closed', 'open'] : ['open', 'closed'];
    for (const side of sides) {
      const viewer = side === 'open' ? new DashboardViewer(url) : undefined;
      for (const [i, phase] of phases.entries()) {
        const r = await timedLoop(client, phase.job, phase.concurrency, config.dashboard.phase_seconds);
        acc[side][i]!.samples.push(...r.samples);
        acc[side][i]!.seconds += r.seconds;
      }
      if (viewer) frames += await viewer.close();
    }
  }
  if (frames === 0) throw new Error('the dashboard client got no snapshot: /dashboard/events is not streaming');
  const summary = (side: 'closed' | 'open') => phases.map((p, i) => summarize(p.name, acc[side][i]!.samples, acc[side][i]!.seconds));
  return { closed: summary('closed'), open: summary('open'), frames };
}

/** A request seed whose first token decodes to whole characters alone, so the frontend prints it at once (no held-back UTF-8). */
async function printableSeed(fleet: Fleet, tokenIds: number[]): Promise<number> {
  for (let seed = 1; seed < 200; seed++) {
    const res = await fetch(`${fleet.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: fleet.model, prompt: tokenIds, max_tokens: 1, seed, ignore_eos: true }) });
    const body = (await res.json()) as { choices: Array<{ text: string }> };
    const text = body.choices[0]?.text ?? '';
    if (text.length > 0 && !text.includes('\uFFFD')) return seed;
  }
  throw new Error('no request seed gives a printable first token');
}

const loadStart = machineLoad();
process.stdout.write(`frontend-overhead: ${config.workers} mocker worker(s) at speedup ${config.speedup_ratio}; load ${loadStart.loadavg}\n`);
const runtimeBin = args.profile !== undefined ? profilingLauncher(config.runtime_bin, args.profile) : args['runtime-bin'];
const fleet = await startFleet({ workers: config.workers, speedupRatio: config.speedup_ratio, extraFrontendArgs: ['--max-inflight-requests', '100000'], ...(runtimeBin !== undefined ? { runtimeBin } : {}) });
const frontend = new FrontendStreamClient(fleet.url, fleet.model);
const direct = await DirectStreamClient.open(fleet);
const results: Record<string, PhaseResult[]> = {};
const loads: Record<string, string> = {};
let dashboard: Awaited<ReturnType<typeof dashboardPhases>> | undefined;
try {
  // Prompt ids from the middle of the vocabulary: ordinary tokens, never BOS/EOS (507, 508, 511).
  const tokenIds = Array.from({ length: config.prompt_len }, (_, i) => 100 + (i % 300));
  const seed = await printableSeed(fleet, tokenIds);
  const job = (maxTokens: number): StreamJob => ({ tokenIds, maxTokens, seed });
  // Warm both paths: connections, the codec, JIT.
  await closedLoop(frontend, job(16), 8, 200);
  await closedLoop(direct, job(16), 8, 200);

  results.ttft = await alternatingTtft([frontend, direct], job(config.ttft.max_tokens), config.ttft.requests_per_path);
  loads.ttft = machineLoad().loadavg;
  results.stream = [];
  for (const client of [direct, frontend]) results.stream.push(await closedLoop(client, job(config.stream.max_tokens), config.stream.concurrency, config.stream.requests));
  loads.stream = machineLoad().loadavg;
  results.short = [];
  for (const client of [direct, frontend]) results.short.push(await closedLoop(client, job(config.short.max_tokens), config.short.concurrency, config.short.requests));
  loads.short = machineLoad().loadavg;
  dashboard = await dashboardPhases(frontend, fleet.url, job);
  loads.dashboard = machineLoad().loadavg;
} finally {
  await frontend.close();
  await direct.close();
  await fleet.stop();
  if (args.profile !== undefined && runtimeBin !== undefined) rmSync(dirname(runtimeBin), { recursive: true, force: true });
}

const by = (phase: string, path: string) => results[phase]!.find((r) => r.path === path)!;
const f = (x: number, d = 2) => x.toFixed(d);
const ttftF = by('ttft', 'frontend');
const ttftD = by('ttft', 'direct');
const added = { p50: ttftF.ttft_ms.p50 - ttftD.ttft_ms.p50, p90: ttftF.ttft_ms.p90 - ttftD.ttft_ms.p90, p99: ttftF.ttft_ms.p99 - ttftD.ttft_ms.p99 };
const rows = [
  ['metric', 'via frontend', 'direct gRPC', 'frontend / direct'],
  [`TTFT p50 ms (conc 1, ${config.ttft.requests_per_path} each)`, f(ttftF.ttft_ms.p50, 3), f(ttftD.ttft_ms.p50, 3), `+${f(added.p50, 3)} ms`],
  ['TTFT p90 ms', f(ttftF.ttft_ms.p90, 3), f(ttftD.ttft_ms.p90, 3), `+${f(added.p90, 3)} ms`],
  ['TTFT p99 ms', f(ttftF.ttft_ms.p99, 3), f(ttftD.ttft_ms.p99, 3), `+${f(added.p99, 3)} ms`],
  [`streamed tok/s (${config.stream.concurrency} x ${config.stream.max_tokens} tok)`, f(by('stream', 'frontend').tokens_per_s, 0), f(by('stream', 'direct').tokens_per_s, 0), f(by('stream', 'frontend').tokens_per_s / by('stream', 'direct').tokens_per_s)],
  ['  tokens per chunk', f(by('stream', 'frontend').tokens_per_chunk), f(by('stream', 'direct').tokens_per_chunk), ''],
  [`req/s (${config.short.max_tokens}-tok streams, conc ${config.short.concurrency})`, f(by('short', 'frontend').requests_per_s, 0), f(by('short', 'direct').requests_per_s, 0), f(by('short', 'frontend').requests_per_s / by('short', 'direct').requests_per_s)],
  ['errors (ttft / stream / short)', `${ttftF.errors} / ${by('stream', 'frontend').errors} / ${by('short', 'frontend').errors}`, `${ttftD.errors} / ${by('stream', 'direct').errors} / ${by('short', 'direct').errors}`, ''],
];
const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
const table = rows.map((r, n) => `| ${r.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |` + (n === 0 ? `\n|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|` : '')).join('\n');
const aims = { streamed_tokens_per_s: { aim: 50_000, got: by('stream', 'frontend').tokens_per_s }, added_ttft_p50_ms: { aim: 1, got: added.p50 } };
process.stdout.write(`\n${table}\n\naim: >= 50k streamed tok/s per frontend (got ${f(aims.streamed_tokens_per_s.got, 0)}); <= 1 ms added TTFT p50 (got ${f(added.p50, 3)} ms)\nload: start ${loadStart.loadavg}; ttft ${loads.ttft}; stream ${loads.stream}; short ${loads.short}\n`);

const dash = (phase: string, side: 'closed' | 'open') => dashboard![side].find((r) => r.path === phase)!;
const dashRows = [
  ['frontend, dashboard', 'closed', 'open (1 SSE client)', 'open / closed'],
  ['TTFT p50 ms (conc 1)', f(dash('ttft', 'closed').ttft_ms.p50, 3), f(dash('ttft', 'open').ttft_ms.p50, 3), f(dash('ttft', 'open').ttft_ms.p50 / dash('ttft', 'closed').ttft_ms.p50, 3)],
  ['TTFT p99 ms (conc 1)', f(dash('ttft', 'closed').ttft_ms.p99, 3), f(dash('ttft', 'open').ttft_ms.p99, 3), f(dash('ttft', 'open').ttft_ms.p99 / dash('ttft', 'closed').ttft_ms.p99, 3)],
  ['streamed tok/s', f(dash('stream', 'closed').tokens_per_s, 0), f(dash('stream', 'open').tokens_per_s, 0), f(dash('stream', 'open').tokens_per_s / dash('stream', 'closed').tokens_per_s, 3)],
  ['req/s (short streams)', f(dash('short', 'closed').requests_per_s, 0), f(dash('short', 'open').requests_per_s, 0), f(dash('short', 'open').requests_per_s / dash('short', 'closed').requests_per_s, 3)],
];
const dashWidths = dashRows[0]!.map((_, i) => Math.max(...dashRows.map((r) => r[i]!.length)));
const dashTable = dashRows.map((r, n) => `| ${r.map((c, i) => c.padEnd(dashWidths[i]!)).join(' | ')} |` + (n === 0 ? `\n|${dashWidths.map((w) => '-'.repeat(w + 2)).join('|')}|` : '')).join('\n');
process.stdout.write(`\n${dashTable}\n(${dashboard!.frames} snapshots read by the open dashboard; load after ${loads.dashboard})\n`);

mkdirSync(dirname(args.out!), { recursive: true });
writeFileSync(
  args.out!,
  JSON.stringify({ schema: 'tandem.bench.frontend-overhead', version: 1, date: new Date().toISOString(), config, machine: { at_start: loadStart, after_phase: loads }, added_ttft_ms: added, aims, results, table, dashboard: { ...dashboard, table: dashTable } }, null, 2) + '\n',
);
process.stdout.write(`wrote ${args.out}\n`);
