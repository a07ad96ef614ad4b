/**
 * Builders for the disaggregated-worker tests: runtimes on shared memory discovery, worker
 * options, an agg + prefill + decode trio in one process, a greedy request, and `disagg()` — the frontend's half of the protocol
 * (docs/disaggregation.md "What happens to a request") in a few lines, so the workers are driven over the real request
 * plane without the frontend.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { InstanceId, PreprocessedRequest, TokenDelta } from '../../proto/wire.js';
import { DistributedRuntime } from '../../runtime/distributed-runtime.js';
import type { EndpointClient } from '../../runtime/endpoint-client.js';
import { MemoryDiscoveryStore } from '../../runtime/discovery/memory-discovery.js';
import { makeTinyModel, type MakeTinyModelOptions } from '../../workers/models/index.js';
import { startWorker, type RunningWorker, type WorkerOptions } from '../../workers/process/worker-process.js';

export const NS = 'tandem';

export async function memoryRuntime(store: MemoryDiscoveryStore, name: string): Promise<DistributedRuntime> {
  return DistributedRuntime.create({ name, discovery: 'memory', eventPlane: 'direct', memoryStore: store, host: '127.0.0.1', logLevel: 'silent' });
}

export function workerOptions(modelDir: string, mode: WorkerOptions['mode'], extra: Partial<WorkerOptions> = {}): WorkerOptions {
  return {
    engine: 'native',
    modelDir,
    modelName: 'tiny',
    mode,
    namespace: NS,
    blockSize: 16,
    numGpuBlocks: 64,
    maxNumBatchedTokens: 32,
    maxNumSeqs: 16,
    speedupRatio: 1,
    device: 'cpu',
    threads: 1,
    loadMetricsIntervalMs: 1000,
    ...extra,
  };
}

/** An aggregated, a prefill and a decode worker on one memory store, plus clients for each. */
export interface WorkerTrio {
  agg: RunningWorker;
  prefill: RunningWorker;
  decode: RunningWorker;
  prefillRt: DistributedRuntime;
  decodeRt: DistributedRuntime;
  clients: Clients;
  /** Close the workers, shut the runtimes down, delete the model dir. */
  close(): Promise<void>;
}

export interface TrioOptions {
  tmpPrefix: string;
  tiny: Omit<MakeTinyModelOptions, 'outDir'>;
  /** Added to every worker's options; `prefill` and `decode` add to that worker's. */
  all?: Partial<WorkerOptions>;
  prefill?: Partial<WorkerOptions>;
  decode?: Partial<WorkerOptions>;
}

export async function startTrio(options: TrioOptions): Promise<WorkerTrio> {
  const store = new MemoryDiscoveryStore();
  const runtimes: DistributedRuntime[] = [];
  const workers: RunningWorker[] = [];
  const dir = await mkdtemp(join(tmpdir(), options.tmpPrefix));
  const rt = async (name: string) => {
    const r = await memoryRuntime(store, name);
    runtimes.push(r);
    return r;
  };
  const close = async () => {
    for (const w of workers) await w.close();
    for (const r of runtimes) await r.shutdown();
    await rm(dir, { recursive: true, force: true });
  };
  try {
    const modelDir = join(dir, 'model');
    await makeTinyModel({ ...options.tiny, outDir: modelDir });
    const start = async (runtime: DistributedRuntime, mode: WorkerOptions['mode'], extra: Partial<WorkerOptions> = {}) => {
      const worker = await startWorker(runtime, workerOptions(modelDir, mode, { ...options.all, ...extra }));
      workers.push(worker);
      return worker;
    };
    const agg = await start(await rt('agg'), 'agg');
    const prefillRt = await rt('prefill');
    const prefill = await start(prefillRt, 'prefill', options.prefill);
    const decodeRt = await rt('decode');
    const decode = await start(decodeRt, 'decode', options.decode);
    const clients = await openClients(await rt('driver'), true);
    await Promise.all([clients.agg!.waitForInstances(1, 5000), clients.prefill.waitForInstances(1, 5000), clients.decode.waitForInstances(1, 5000)]);
    return { agg, prefill, decode, prefillRt, decodeRt, clients, close };
  } catch (err) {
    await close();
    throw err;
  }
}

let nextRequest = 0;

export function greedy(tokenIds: number[], maxTokens: number): PreprocessedRequest {
  return {
    requestId: `req-${process.pid}-${nextRequest++}`,
    model: 'tiny',
    tokenIds,
    sampling: { temperature: 0 },
    stop: { maxTokens, stopTokenIds: [], ignoreEos: true },
  };
}

export async function collect(stream: AsyncIterable<TokenDelta>): Promise<{ tokens: number[]; deltas: TokenDelta[] }> {
  const deltas: TokenDelta[] = [];
  for await (const d of stream) deltas.push(d);
  return { tokens: deltas.flatMap((d) => d.tokenIds), deltas };
}

export interface Clients {
  agg?: EndpointClient;
  prefill: EndpointClient;
  decode: EndpointClient;
}

export async function openClients(rt: DistributedRuntime, withAgg: boolean): Promise<Clients> {
  const ns = rt.namespace(NS);
  const clients: Clients = {
    prefill: await ns.component('prefill').endpoint('generate').client(),
    decode: await ns.component('decode').endpoint('generate').client(),
  };
  if (withAgg) clients.agg = await ns.component('backend').endpoint('generate').client();
  return clients;
}

export interface DisaggResult {
  tokens: number[];
  prefill: TokenDelta;
  decodeDeltas: TokenDelta[];
}

/** Prefill on one worker, decode on another: what the frontend does for one request. */
export async function disagg(clients: Clients, request: PreprocessedRequest, decodeId?: InstanceId): Promise<DisaggResult> {
  const pre = await collect(clients.prefill.generate<PreprocessedRequest, TokenDelta>({ ...request, prefillOnly: true }));
  if (pre.deltas.length !== 1) throw new Error(`prefill answered ${pre.deltas.length} deltas`);
  const prefill = pre.deltas[0]!;
  if (prefill.kvTransfer === undefined) return { tokens: prefill.tokenIds, prefill, decodeDeltas: [] };
  const decodeRequest: PreprocessedRequest = {
    ...request,
    tokenIds: [...request.tokenIds, ...prefill.tokenIds],
    kvTransfer: prefill.kvTransfer,
    stop: { ...request.stop, maxTokens: request.stop.maxTokens - 1 },
    numPriorOutputTokens: 1,
  };
  const routing = decodeId !== undefined ? { routing: { mode: 'direct' as const, instanceId: decodeId } } : {};
  const dec = await collect(clients.decode.generate<PreprocessedRequest, TokenDelta>(decodeRequest, routing));
  return { tokens: [...prefill.tokenIds, ...dec.tokens], prefill, decodeDeltas: dec.deltas };
}

export async function waitFor(condition: () => boolean | Promise<boolean>, timeoutMs: number, what = 'condition'): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Deterministic pseudo-random token ids below `vocab`. */
export function tokens(n: number, seed: number, vocab = 512): number[] {
  const out: number[] = [];
  let x = seed * 2654435761 + 1;
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x ^ (x >>> 13), 0x5bd1e995) + 0x6b43a9b5) >>> 0;
    out.push(3 + (x % (vocab - 3)));
  }
  return out;
}

/** One gauge's value (first sample) from a runtime's registry. */
export async function gauge(rt: DistributedRuntime, name: string): Promise<number> {
  const metric = rt.metrics.getSingleMetric(name);
  if (metric === undefined) throw new Error(`no metric ${name}`);
  const data = await metric.get();
  return data.values[0]?.value ?? 0;
}
