/**
 * Soak (issue 12): a `runtime up`-like fleet (one frontend, two mocker workers: bench/fleet
 * startFleet) held at a fixed number of concurrent streams for minutes, with client aborts mixed
 * in. Not part of the test command.
 *
 *   node --import tsx bench/soak.ts [--minutes 10] [--concurrency 256] [--abort-ratio 0.1]
 *     [--sample-seconds 10] [--workers 2] [--speedup-ratio 1] [--max-tokens 512]
 *
 * Each of `--concurrency` client loops sends streamed completions back to back: a random prompt
 * (20–400 words), `max_tokens` uniform in [32, --max-tokens]. A request is aborted with
 * probability `--abort-ratio`, after a random number of SSE chunks (possibly 0: before the first
 * byte), which cancels its worker stream.
 *
 * Every `--sample-seconds`, for the frontend and each worker, from its status server's /metrics
 * (prom-client default metrics under the prefix `tandem_process_`): resident memory
 * (`tandem_process_process_resident_memory_bytes`), open file descriptors
 * (`tandem_process_process_open_fds`), and the event-loop delay p99 over the interval
 * (`tandem_process_nodejs_eventloop_lag_p99_seconds`: prom-client resets its
 * `monitorEventLoopDelay` histogram at each scrape, and nothing else scrapes these). Prints a
 * row per sample and writes bench/results/soak.json.
 *
 * "Memory flat after warm-up": the first third of the run is warm-up; per process, the mean RSS
 * of the last third against the second third, as a slope (MiB per minute between the two
 * means). Flat = the last third grew by at most 5% of the second third's mean or 8 MiB.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { flagValue, metricSum, scrapeMetrics } from './disagg-common.js';
import { machineLoad } from './fleet/machine.js';
import { startFleet } from './fleet/fleet.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const num = (name: string, fallback: number): number => Number(flagValue(args, name, String(fallback)));

const PLAN = {
  minutes: num('--minutes', 10),
  concurrency: num('--concurrency', 256),
  abortRatio: num('--abort-ratio', 0.1),
  sampleSeconds: num('--sample-seconds', 10),
  workers: num('--workers', 2),
  speedupRatio: num('--speedup-ratio', 1),
  minTokens: 32,
  maxTokens: num('--max-tokens', 512),
};

/** Growth of the last third over the second third that still counts as flat. */
const FLAT_RATIO = 0.05;
const FLAT_BYTES = 8 * 1024 * 1024;
const MIB = 1024 * 1024;
const REST_MS = 6_000;

interface ProcessSample {
  rssMiB: number;
  fds: number;
  loopP99Ms: number;
}

interface Sample {
  atS: number;
  processes: Record<string, ProcessSample | null>;
  client: ClientCounts & { inflight: number };
}

interface ClientCounts {
  started: number;
  completed: number;
  aborted: number;
  errorFrames: number;
  httpErrors: number;
  /** Ended without [DONE] and without our abort: the bad case. */
  cut: number;
}

const counts: ClientCounts = { started: 0, completed: 0, aborted: 0, errorFrames: 0, httpErrors: 0, cut: 0 };
const statusCodes = new Map<number, number>();
let inflight = 0;

/** A deterministic-enough word soup; prompts differ, so the prefix cache sees churn too. */
const WORDS = 'the quick brown fox jumps over lazy dogs while seven wizards quietly judge boxing matches near old harbours'.split(' ');
function randomPrompt(): string {
  const n = 20 + Math.floor(Math.random() * 380);
  const out: string[] = new Array(n);
  for (let i = 0; i < n; i++) out[i] = WORDS[Math.floor(Math.random() * WORDS.length)]!;
  return out.join(' ');
}

const DONE = 'data: [DONE]';
const ERROR_FRAME = 'data: {"error"';

/** One streamed request: read to the end, or abort after `abortAfterChunks` chunks. */
async function oneRequest(url: string, model: string): Promise<void> {
  const maxTokens = PLAN.minTokens + Math.floor(Math.random() * (PLAN.maxTokens - PLAN.minTokens + 1));
  const abortAfterChunks = Math.random() < PLAN.abortRatio ? Math.floor(Math.random() * (maxTokens / 2)) : -1;
  const controller = new AbortController();
  counts.started += 1;
  inflight += 1;
  let chunks = 0;
  let tail = '';
  let errorFrame = false;
  try {
    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model, prompt: randomPrompt(), max_tokens: maxTokens, ignore_eos: true, stream: true }),
      signal: controller.signal,
    });
    statusCodes.set(res.status, (statusCodes.get(res.status) ?? 0) + 1);
    if (res.status !== 200) {
      await res.arrayBuffer().catch(() => undefined);
      counts.httpErrors += 1;
      return;
    }
    if (abortAfterChunks === 0) {
      controller.abort();
      counts.aborted += 1;
      return;
    }
    const decoder = new TextDecoder();
    for await (const bytes of res.body as unknown as AsyncIterable<Uint8Array>) {
      const text = decoder.decode(bytes, { stream: true });
      if (!errorFrame && text.includes(ERROR_FRAME)) errorFrame = true;
      // Keep only the end: [DONE] is the last frame, and may straddle two reads.
      tail = (tail + text).slice(-64);
      chunks += 1;
      if (chunks === abortAfterChunks) {
        controller.abort();
        counts.aborted += 1;
        return;
      }
    }
    if (errorFrame) counts.errorFrames += 1;
    else if (tail.includes(DONE)) counts.completed += 1;
    else counts.cut += 1;
  } catch (err) {
    if (controller.signal.aborted) return; // counted where we aborted
    counts.cut += 1;
    if (counts.cut <= 5) console.error(`stream failed: ${String(err)}`);
  } finally {
    inflight -= 1;
  }
}

async function clientLoop(url: string, model: string, until: number): Promise<void> {
  while (Date.now() < until) await oneRequest(url, model);
}

async function sampleProcess(statusUrl: string): Promise<ProcessSample | null> {
  try {
    const text = await scrapeMetrics(statusUrl);
    return {
      rssMiB: round(metricSum(text, 'tandem_process_process_resident_memory_bytes') / MIB),
      fds: metricSum(text, 'tandem_process_process_open_fds'),
      loopP99Ms: round(metricSum(text, 'tandem_process_nodejs_eventloop_lag_p99_seconds') * 1000),
    };
  } catch {
    return null; // the process is gone or not answering: shown as '-'
  }
}

interface Verdict {
  secondThirdMeanMiB: number;
  lastThirdMeanMiB: number;
  slopeMiBPerMin: number;
  maxFds: number;
  /** Idle before the load, and at rest after it. */
  fdsIdle: number;
  fdsAtRest: number;
  loopP99MaxMs: number;
  loopP99MedianMs: number;
  flat: boolean;
}

function verdictOf(name: string, all: Sample[], minutes: number): Verdict | null {
  const samples = all.slice(1, -1); // under load: not the idle baseline, not the rest sample
  const series = samples.map((s) => s.processes[name]).filter((p): p is ProcessSample => p !== null && p !== undefined);
  if (series.length < 3) return null;
  const third = Math.floor(series.length / 3);
  const mean = (xs: ProcessSample[]) => xs.reduce((a, p) => a + p.rssMiB, 0) / xs.length;
  const second = mean(series.slice(third, 2 * third));
  const last = mean(series.slice(2 * third));
  // The two means sit one third of the run apart.
  const slope = (last - second) / (minutes / 3);
  const loops = series.map((p) => p.loopP99Ms).sort((a, b) => a - b);
  return {
    secondThirdMeanMiB: round(second),
    lastThirdMeanMiB: round(last),
    slopeMiBPerMin: round(slope),
    maxFds: Math.max(...series.map((p) => p.fds)),
    fdsIdle: all[0]?.processes[name]?.fds ?? -1,
    fdsAtRest: all[all.length - 1]?.processes[name]?.fds ?? -1,
    loopP99MaxMs: round(loops[loops.length - 1]!),
    loopP99MedianMs: round(loops[Math.floor(loops.length / 2)]!),
    flat: last - second <= Math.max(FLAT_RATIO * second, FLAT_BYTES / MIB),
  };
}

const round = (x: number) => Math.round(x * 10) / 10;
const pad = (s: string | number, n: number) => String(s).padStart(n);

async function main(): Promise<void> {
  const machineBefore = machineLoad();
  console.log(`soak: ${PLAN.minutes} min, ${PLAN.concurrency} concurrent streams, ${PLAN.abortRatio * 100}% aborted, ${PLAN.workers} mocker workers (speedup ${PLAN.speedupRatio}), sample every ${PLAN.sampleSeconds} s`);
  const fleet = await startFleet({ workers: PLAN.workers, speedupRatio: PLAN.speedupRatio });
  const procs: Array<[string, string]> = [['frontend', fleet.frontendStatusUrl], ...fleet.workers.map((w): [string, string] => [w.label, w.statusUrl])];
  const samples: Sample[] = [];
  const started = Date.now();
  const until = started + PLAN.minutes * 60_000;

  const header = ['t(s)', ...procs.map(([name]) => `${name} rss/fd/p99ms`), 'done', 'abort', 'err', 'cut', 'infl'];
  console.log(header.map((h, i) => pad(h, i === 0 ? 5 : i <= procs.length ? 24 : 7)).join(' '));
  const takeSample = async () => {
    const results = await Promise.all(procs.map(([, url]) => sampleProcess(url)));
    const sample: Sample = { atS: Math.round((Date.now() - started) / 1000), processes: {}, client: { ...counts, inflight } };
    procs.forEach(([name], i) => (sample.processes[name] = results[i]!));
    samples.push(sample);
    const cells = results.map((p) => (p === null ? '-' : `${p.rssMiB.toFixed(0)}M/${p.fds}/${p.loopP99Ms.toFixed(1)}`));
    const c = sample.client;
    console.log([pad(sample.atS, 5), ...cells.map((x) => pad(x, 24)), pad(c.completed, 7), pad(c.aborted, 7), pad(c.errorFrames + c.httpErrors, 7), pad(c.cut, 7), pad(c.inflight, 7)].join(' '));
  };

  try {
    await takeSample(); // idle baseline (also resets each event-loop histogram)
    const timer = setInterval(() => void takeSample(), PLAN.sampleSeconds * 1000);
    await Promise.all(Array.from({ length: PLAN.concurrency }, () => clientLoop(fleet.url, fleet.model, until)));
    clearInterval(timer);
    // At rest: past the keep-alive timeouts of both ends (undici 4 s, Node's server 5 s), so the
    // frontend's descriptors are back to what it holds for itself, unless something leaked.
    await new Promise((r) => setTimeout(r, REST_MS));
    await takeSample();
  } finally {
    await fleet.stop();
  }

  const verdicts: Record<string, Verdict | null> = {};
  for (const [name] of procs) verdicts[name] = verdictOf(name, samples, PLAN.minutes);
  console.log('\nmemory after warm-up (mean RSS, second third → last third):');
  for (const [name, v] of Object.entries(verdicts)) {
    if (v === null) console.log(`  ${name}: too few samples`);
    else
      console.log(
        `  ${name.padEnd(9)} ${v.secondThirdMeanMiB} → ${v.lastThirdMeanMiB} MiB (${v.slopeMiBPerMin >= 0 ? '+' : ''}${v.slopeMiBPerMin} MiB/min): ${v.flat ? 'FLAT' : 'GROWING'}; fds idle ${v.fdsIdle}, max ${v.maxFds}, at rest ${v.fdsAtRest}; loop p99 median ${v.loopP99MedianMs} ms, max ${v.loopP99MaxMs} ms`,
      );
  }
  const elapsedS = (Date.now() - started) / 1000;
  console.log(`\nclient: ${counts.started} streams in ${elapsedS.toFixed(0)} s; completed ${counts.completed}, aborted ${counts.aborted}, error frames ${counts.errorFrames}, HTTP errors ${counts.httpErrors} (${JSON.stringify(Object.fromEntries(statusCodes))}), cut ${counts.cut}`);

  const out = join(ROOT, 'bench', 'results', 'soak.json');
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(
    out,
    `${JSON.stringify({ plan: PLAN, machine: { before: machineBefore, after: machineLoad() }, elapsedS: round(elapsedS), client: { ...counts, statusCodes: Object.fromEntries(statusCodes) }, verdicts, samples }, null, 1)}\n`,
  );
  console.log(`wrote ${out}`);
  const flat = Object.values(verdicts).every((v) => v === null || v.flat);
  process.exitCode = flat && counts.cut === 0 ? 0 : 1;
}

void main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
