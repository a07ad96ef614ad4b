/**
 * A small serving stack for KV-router tests, in one process: real mocker workers
 * (workers/process startWorker) on their own runtimes, shared memory discovery, the direct
 * event plane and the gRPC request plane. Requests can go straight to a worker's `generate`
 * endpoint (direct routing), so a test controls which worker caches what.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { InstanceId, PreprocessedRequest, TokenDelta } from '../../proto/wire.js';
import { DistributedRuntime } from '../../runtime/distributed-runtime.js';
import type { EndpointClient } from '../../runtime/endpoint-client.js';
import { MemoryDiscoveryStore } from '../../runtime/discovery/memory-discovery.js';
import { makeTinyModel, type TinyArch } from '../../workers/models/index.js';
import { startWorker, type RunningWorker, type WorkerOptions } from '../../workers/process/worker-process.js';

export const MODEL = 'tiny';
export const BLOCK = 16;

export interface StackWorker {
  rt: DistributedRuntime;
  worker: RunningWorker;
  id: InstanceId;
}

export class Stack {
  readonly store = new MemoryDiscoveryStore();
  readonly workers: StackWorker[] = [];
  private readonly runtimes: DistributedRuntime[] = [];
  private client: EndpointClient | undefined;
  private seq = 0;

  private constructor(readonly dir: string) {}

  /** `arch`: the tiny model's architecture (a make-tiny arch; default llama). */
  static async start(workers: number, options: Partial<WorkerOptions> = {}, arch: TinyArch = 'llama'): Promise<Stack> {
    const dir = await mkdtemp(join(tmpdir(), 'tandem-router-e2e-'));
    await makeTinyModel({ arch, outDir: join(dir, MODEL) });
    const stack = new Stack(dir);
    for (let i = 0; i < workers; i++) await stack.addWorker(options);
    return stack;
  }

  get modelDir(): string {
    return join(this.dir, MODEL);
  }

  async runtime(name: string): Promise<DistributedRuntime> {
    const rt = await DistributedRuntime.create({ name, discovery: 'memory', eventPlane: 'direct', memoryStore: this.store, host: '127.0.0.1', logLevel: 'silent' });
    this.runtimes.push(rt);
    return rt;
  }

  async addWorker(options: Partial<WorkerOptions> = {}): Promise<StackWorker> {
    const rt = await this.runtime(`worker${this.workers.length}`);
    const worker = await startWorker(rt, {
      engine: 'mocker',
      modelDir: this.modelDir,
      mode: 'agg',
      namespace: 'tandem',
      blockSize: BLOCK,
      numGpuBlocks: 1024,
      maxNumBatchedTokens: 8192,
      maxNumSeqs: 256,
      speedupRatio: 1000,
      device: 'cpu',
      loadMetricsIntervalMs: 20,
      ...options,
    });
    const w = { rt, worker, id: rt.instanceId };
    this.workers.push(w);
    return w;
  }

  /** Run one request to completion on `instanceId`; returns the deltas. */
  async generate(instanceId: InstanceId, tokenIds: number[], maxTokens = 4): Promise<TokenDelta[]> {
    if (this.client === undefined) {
      const rt = await this.runtime('client');
      this.client = await rt.namespace('tandem').component('backend').endpoint('generate').client();
    }
    await this.client.waitForInstances(this.workers.length, 10_000);
    const request: PreprocessedRequest = {
      requestId: `req-${this.seq++}`,
      model: MODEL,
      tokenIds,
      sampling: {},
      stop: { maxTokens, stopTokenIds: [], ignoreEos: true },
    };
    const out: TokenDelta[] = [];
    for await (const d of this.client.generate<PreprocessedRequest, TokenDelta>(request, { routing: { mode: 'direct', instanceId } })) out.push(d);
    return out;
  }

  /** The worker's real cached-block set (sequence hashes), from its KV event log mirror. */
  blockSet(id: InstanceId): string[] {
    const w = this.workers.find((x) => x.id === id);
    if (!w) throw new Error(`no worker ${id}`);
    return [...w.worker.loop.kvEventLog.blockHashes()].sort();
  }

  async close(): Promise<void> {
    this.client?.close();
    for (const w of this.workers) await w.worker.close().catch(() => undefined);
    for (const rt of this.runtimes.reverse()) await rt.shutdown().catch(() => undefined);
    await rm(this.dir, { recursive: true, force: true });
  }
}

/** `n` token ids in the tiny model's vocabulary derived from `seed` (same seed, same tokens). */
export function tokens(seed: number, n: number, vocab = 200): number[] {
  const out = new Array<number>(n);
  let x = (seed * 2654435761 + 1) >>> 0;
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x ^ (x >>> 13), 0x5bd1e995) + i + 1) >>> 0;
    out[i] = 3 + (x % vocab);
  }
  return out;
}

export async function waitFor<T>(what: string, predicate: () => T | Promise<T>, timeoutMs = 10_000, stepMs = 20): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await predicate();
      if (v) return v as NonNullable<T>;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? ` (last error: ${String(last)})` : ''}`);
    await new Promise((r) => setTimeout(r, stepMs));
  }
}
