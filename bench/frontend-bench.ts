/**
 * Frontend overhead benchmark: the HTTP frontend in front of an in-process worker that costs
 * nothing (one token per event-loop turn), driven by a load generator in a second process so
 * client parsing does not share the frontend's core.
 * Run: node --import tsx bench/frontend-bench.ts [--quick]
 * Prints a table and writes bench/results/frontend.json.
 *
 * Measures: streamed tokens/s (64 streams x 512 tokens), sustained requests/s (short unary
 * requests at concurrency 64), and TTFT p50/p99 at concurrency 1 with the worker's own time to
 * first token being ~0, so TTFT is the frontend's added latency (HTTP parse, validate,
 * tokenize, route, first SSE frame).
 */
import { fork } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setImmediate as turn } from 'node:timers/promises';
import { Registry } from 'prom-client';
import { startFrontend } from '../frontend/frontend.js';
import { tokenizeSync, type ModelCodec, type SyncPromptCodec, type TextDetokenizer } from '../frontend/codec.js';
import type { WorkerClient } from '../frontend/worker-client.js';
import type { PreprocessedRequest, TokenDelta } from '../proto/wire.js';
import { MemoryDiscovery } from '../runtime/discovery/memory-discovery.js';
import { modelKey } from '../runtime/discovery/keys.js';

const QUICK = process.argv.includes('--quick');

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

// ------------------------------------------------------------------ client (child process)
interface ClientJob {
  url: string;
  concurrency: number;
  requests: number;
  maxTokens: number;
  stream: boolean;
}
interface ClientResult {
  seconds: number;
  requests: number;
  frames: number;
  ttftMs: number[];
  errors: number;
}

async function runClient(job: ClientJob): Promise<ClientResult> {
  const agent = new Agent({ keepAlive: true, maxSockets: job.concurrency });
  const body = JSON.stringify({ model: 'bench', prompt: 'benchmark prompt text', max_tokens: job.maxTokens, stream: job.stream, ignore_eos: true });
  const target = new URL('/v1/completions', job.url);
  let next = 0;
  let frames = 0;
  let errors = 0;
  const ttftMs: number[] = [];
  const one = () =>
    new Promise<void>((resolve) => {
      const start = performance.now();
      let first = true;
      const req = request(target, { method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
        if (res.statusCode !== 200) errors++;
        res.on('data', (chunk: Buffer) => {
          if (first) {
            first = false;
            ttftMs.push(performance.now() - start);
          }
          // Count frames by their separator; good enough for a throughput number.
          for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, i + 1)) if (chunk[i + 1] === 10) frames++;
        });
        res.on('end', resolve);
      });
      req.on('error', () => {
        errors++;
        resolve();
      });
      req.end(body);
    });
  const started = performance.now();
  await Promise.all(
    Array.from({ length: job.concurrency }, async () => {
      while (next < job.requests) {
        next++;
        await one();
      }
    }),
  );
  agent.destroy();
  return { seconds: (performance.now() - started) / 1000, requests: job.requests, frames, ttftMs, errors };
}


// ------------------------------------------------------------------ server (this process)
class NoCostWorker implements WorkerClient {
  constructor(private readonly id: string) {}
  instanceIds() {
    return [this.id];
  }
  async *generate(request: PreprocessedRequest, _id: string, signal: AbortSignal): AsyncGenerator<TokenDelta> {
    const max = request.stop.maxTokens;
    for (let n = 1; n <= max; n++) {
      await turn();
      if (signal.aborted) return;
      yield n === max ? { tokenIds: [97 + (n % 26)], finishReason: 'length', usage: { promptTokens: request.tokenIds.length, completionTokens: n, cachedTokens: 0 } } : { tokenIds: [97 + (n % 26)] };
    }
  }
  call<Req, Resp>(_request: Req): AsyncIterable<Resp> {
    throw new Error('the bench worker serves only generate');
  }
  close() {}
}

const asciiPrompt: SyncPromptCodec = {
  renderChat: (messages) => messages.map((m) => m.content).join('\n'),
  encode: (text) => Array.from(Buffer.from(text)),
};
const asciiCodec: ModelCodec = {
  tokenize: (prompt) => tokenizeSync(asciiPrompt, prompt),
  tokenText: (id) => String.fromCharCode(id),
  createDetokenizer(): TextDetokenizer {
    return { push: (ids) => ({ text: String.fromCharCode(...ids), stopped: false }), flush: () => '' };
  },
};

async function clientRun(job: ClientJob): Promise<ClientResult> {
  const child = fork(fileURLToPath(import.meta.url), ['--client'], { execArgv: ['--import', 'tsx'] });
  const result = new Promise<ClientResult>((resolve, reject) => {
    child.once('message', (m) => resolve(m as ClientResult));
    child.once('error', reject);
  });
  child.send(job);
  return result;
}

async function main(): Promise<void> {
  const discovery = new MemoryDiscovery();
  const worker = new NoCostWorker(discovery.instanceId);
  await discovery.put(modelKey('tandem', 'bench', discovery.instanceId), {
    name: 'bench', modelPath: '', tokenizerSource: '', chatTemplateSource: '', contextLength: 1 << 20, kvBlockSize: 16, totalKvBlocks: 1 << 16,
    maxNumBatchedTokens: 8192, role: 'agg', engine: 'mocker', component: 'backend', endpoint: 'generate', instanceId: discovery.instanceId, eosTokenIds: [0],
  });
  const frontend = await startFrontend({
    discovery,
    connector: { connect: async () => worker },
    host: '127.0.0.1',
    httpPort: 0,
    codecLoader: async () => asciiCodec,
    registry: new Registry(),
    maxInflightRequests: 100_000,
  });
  while (frontend.models.model('bench')?.candidates().length !== 1) await new Promise((r) => setTimeout(r, 5));

  const rows: Array<Record<string, string | number>> = [];
  const streamJob: ClientJob = { url: frontend.url, concurrency: 64, requests: QUICK ? 128 : 512, maxTokens: 512, stream: true };
  const s = await clientRun(streamJob);
  const tokens = s.requests * streamJob.maxTokens;
  rows.push({ metric: 'streamed tokens/s (64 streams x 512 tok)', value: Math.round(tokens / s.seconds), errors: s.errors });

  const unaryJob: ClientJob = { url: frontend.url, concurrency: 64, requests: QUICK ? 2000 : 10_000, maxTokens: 8, stream: false };
  const u = await clientRun(unaryJob);
  rows.push({ metric: 'requests/s (unary, 8 tok, conc 64)', value: Math.round(u.requests / u.seconds), errors: u.errors });

  const ttftJob: ClientJob = { url: frontend.url, concurrency: 1, requests: QUICK ? 300 : 2000, maxTokens: 4, stream: true };
  const t = await clientRun(ttftJob);
  const sorted = t.ttftMs.sort((a, b) => a - b);
  rows.push({ metric: 'TTFT p50 ms (conc 1, worker ~0)', value: Number(percentile(sorted, 50).toFixed(3)), errors: t.errors });
  rows.push({ metric: 'TTFT p99 ms (conc 1, worker ~0)', value: Number(percentile(sorted, 99).toFixed(3)), errors: t.errors });

  await frontend.close();
  await discovery.close();
  console.table(rows);
  const out = join(dirname(fileURLToPath(import.meta.url)), 'results', 'frontend.json');
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, JSON.stringify({ date: new Date().toISOString(), cpus: os.cpus().length, node: process.version, quick: QUICK, rows }, null, 2));
}

if (process.argv.includes('--client')) {
  process.on('message', async (job: ClientJob) => {
    process.send!(await runClient(job));
    process.exit(0);
  });
} else {
  await main();
}
