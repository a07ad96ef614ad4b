/**
 * TTFT breakdown of a disaggregated request (issue 8 "Benchmarks"): for 1k, 4k and 16k-token
 * prompts on a 1 prefill + 1 decode mocker fleet whose host KV pools are 8B-shaped
 * (--kv-bytes-per-token 131072, so a 16k prompt moves 2 GiB), one request at a time:
 *
 *   prefill     frontend → prefill worker → first token + hand-off   (frontend prefill histogram)
 *   transfer    the decode worker's UCX pull of the prompt KV          (decode worker histogram)
 *   first step  second token − first token − transfer: the decode leg's RPC, admission and
 *               its first decode step
 *
 *   npm run build && node --import tsx bench/disagg-ttft.ts [--quick] [--tls sm,self|tcp] [--repeats 3] [--kv-layer-streaming]
 *
 * --kv-layer-streaming: frontend and workers stream each hand-off layer by layer (the mocker
 * models 8 layers); `transfer` is then the layer copies' time, mostly during the prefill, and
 * `hiddenShare` the mean of tandem_worker_kv_stream_hidden_ratio. Compare `secondTokenMs − ttftMs`.
 *
 * Writes bench/results/disagg-ttft.json (disagg-ttft-tcp.json with --tls tcp) and prints a table.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { flagValue, longContextModel, metricSum, scrapeMetrics as scrape } from './disagg-common.js';
import { machineLoad, startFleet, type Fleet } from './fleet/index.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const opt = (name: string, fallback: string) => flagValue(args, name, fallback);
const QUICK = args.includes('--quick');
const STREAMING = args.includes('--kv-layer-streaming');
const TLS = opt('--tls', 'sm,self');
const REPEATS = Number(opt('--repeats', QUICK ? '1' : '3'));
const SIZES = QUICK ? [1024, 4096] : [1024, 4096, 16384];
const KV_BYTES_PER_TOKEN = 131072;
const BLOCK = 16;
const OSL = 8;

interface Sample {
  ttftMs: number;
  secondTokenMs: number;
  prefillMs: number;
  transferMs: number;
  transferBytes: number;
  hiddenShare: number;
}

function prompt(n: number, seed: number): number[] {
  let s = seed >>> 0;
  return Array.from({ length: n }, () => 3 + ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) % 500));
}

/** Stream one request; times of the first and second generated token (ms from send). */
async function timedRequest(fleet: Fleet, ids: number[]): Promise<{ ttftMs: number; secondTokenMs: number; disagg: boolean }> {
  const t0 = performance.now();
  const res = await fetch(`${fleet.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: fleet.model, prompt: ids, max_tokens: OSL, ignore_eos: true, stream: true, logprobs: 0, return_tokens_as_token_ids: true }),
  });
  if (!res.ok) throw new Error(`request failed: ${res.status} ${await res.text()}`);
  const disagg = res.headers.get('x-prefill-worker-id') !== null;
  const times: number[] = [];
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const bytes of res.body as unknown as AsyncIterable<Uint8Array>) {
    const now = performance.now();
    buffer += decoder.decode(bytes, { stream: true });
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      if (!frame.startsWith('data: {')) continue;
      const chunk = JSON.parse(frame.slice(6)) as { choices: Array<{ logprobs?: { tokens?: string[] } }> };
      for (const _ of chunk.choices[0]?.logprobs?.tokens ?? []) times.push(now - t0);
    }
  }
  if (times.length < 2) throw new Error(`expected ${OSL} tokens, got ${times.length}`);
  return { ttftMs: times[0]!, secondTokenMs: times[1]!, disagg };
}

function mean(xs: number[]): number {
  return xs.reduce((a, b) => a + b, 0) / xs.length;
}

async function main(): Promise<void> {
  process.env.UCX_TLS = TLS;
  const tmp = mkdtempSync(join(tmpdir(), 'tandem-disagg-ttft-'));
  const maxTokens = Math.max(...SIZES) + OSL;
  const numBlocks = Math.ceil(maxTokens / BLOCK) + 16;
  const rows: Array<Record<string, number | string>> = [];
  let fleet: Fleet | undefined;
  try {
    const modelDir = await longContextModel(join(tmp, 'tiny-32k'));
    fleet = await startFleet({
      mode: 'disagg',
      prefill: 1,
      decode: 1,
      model: modelDir,
      speedupRatio: 1,
      numGpuBlocks: numBlocks,
      maxNumSeqs: 8,
      extraWorkerArgs: ['--kv-bytes-per-token', String(KV_BYTES_PER_TOKEN), ...(STREAMING ? ['--kv-layer-streaming'] : [])],
      extraFrontendArgs: ['--disagg-min-prefill-tokens', '512', ...(STREAMING ? ['--kv-layer-streaming'] : [])],
    });
    const decode = fleet.workers.find((w) => w.role === 'decode')!;
    // Warm-up: connections, UCX endpoints, and one prompt of the largest size so every page of
    // both host pools has been touched (first-touch page faults otherwise land in the transfer).
    await timedRequest(fleet, prompt(1024, 999));
    await timedRequest(fleet, prompt(Math.max(...SIZES), 998));
    for (const size of SIZES) {
      const samples: Sample[] = [];
      for (let r = 0; r < REPEATS; r++) {
        const [feBefore, decBefore] = await Promise.all([scrape(fleet.url), scrape(decode.statusUrl)]);
        const t = await timedRequest(fleet, prompt(size, size * 31 + r));
        if (!t.disagg) throw new Error(`a ${size}-token prompt was not disaggregated`);
        await new Promise((r2) => setTimeout(r2, 50));
        const [feAfter, decAfter] = await Promise.all([scrape(fleet.url), scrape(decode.statusUrl)]);
        const d = (name: string, a: string, b: string) => metricSum(b, name) - metricSum(a, name);
        samples.push({
          ttftMs: t.ttftMs,
          secondTokenMs: t.secondTokenMs,
          prefillMs: d('tandem_frontend_disagg_prefill_seconds_sum', feBefore, feAfter) * 1000,
          transferMs: d('tandem_worker_kv_transfer_seconds_sum', decBefore, decAfter) * 1000,
          transferBytes: d('tandem_worker_kv_transfer_bytes_total', decBefore, decAfter),
          hiddenShare: d('tandem_worker_kv_stream_hidden_ratio_sum', decBefore, decAfter) / Math.max(1, d('tandem_worker_kv_stream_hidden_ratio_count', decBefore, decAfter)),
        });
      }
      const transferMs = mean(samples.map((s) => s.transferMs));
      const gap = mean(samples.map((s) => s.secondTokenMs - s.ttftMs));
      const bytes = mean(samples.map((s) => s.transferBytes));
      rows.push({
        promptTokens: size,
        ttftMs: round(mean(samples.map((s) => s.ttftMs))),
        prefillMs: round(mean(samples.map((s) => s.prefillMs))),
        mockerPrefillModelMs: round(mockerPrefillMs(size)),
        transferMs: round(transferMs),
        transferMsMin: round(Math.min(...samples.map((s) => s.transferMs))),
        transferMsMax: round(Math.max(...samples.map((s) => s.transferMs))),
        transferMiB: round(bytes / 2 ** 20),
        transferGBps: round(transferMs > 0 ? bytes / 1e9 / (transferMs / 1000) : 0),
        firstDecodeStepMs: round(gap - transferMs),
        secondTokenMs: round(mean(samples.map((s) => s.secondTokenMs))),
        secondTokenGapMs: round(gap),
        ...(STREAMING ? { hiddenShare: round(mean(samples.map((s) => s.hiddenShare))) } : {}),
        repeats: REPEATS,
      });
      process.stderr.write(`disagg-ttft: ${size} tokens done\n`);
    }
  } finally {
    await fleet?.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
  const result = {
    bench: 'disagg-ttft',
    date: new Date().toISOString(),
    machine: machineLoad(),
    setup: { engine: 'mocker', speedupRatio: 1, prefillWorkers: 1, decodeWorkers: 1, kvBytesPerToken: KV_BYTES_PER_TOKEN, blockSize: BLOCK, ucxTls: TLS, osl: OSL, layerStreaming: STREAMING, machineCores: (await import('node:os')).cpus().length },
    rows,
  };
  mkdirSync(join(ROOT, 'bench', 'results'), { recursive: true });
  const suffix = (QUICK ? '-quick' : '') + (TLS === 'sm,self' ? '' : `-${TLS.replace(/[^a-z0-9]+/gi, '_')}`) + (STREAMING ? '-streaming' : '');
  const out = join(ROOT, 'bench', 'results', `disagg-ttft${suffix}.json`);
  writeFileSync(out, JSON.stringify(result, null, 2) + '\n');
  console.table(rows);
  process.stdout.write(`wrote ${out}\n`);
}

/** The mocker's default prefill model, chunked by the default 8192-token step budget. */
function mockerPrefillMs(tokens: number): number {
  let ms = 0;
  for (let left = tokens; left > 0; left -= 8192) {
    const t = Math.min(8192, left);
    ms += 4.209989e-7 * t * t + 1.518344e-2 * t + 16.50142;
  }
  return ms;
}

function round(x: number): number {
  return Math.round(x * 100) / 100;
}

await main();
