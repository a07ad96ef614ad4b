/**
 * A serving stack of real processes for end-to-end tests: one `runtime frontend` and N
 * `runtime worker --engine mocker` processes of the BUILT CLI (bin/runtime.js → dist/), sharing
 * a temp file-discovery directory with a 2 s lease. Each process is started on its own, so a
 * test can kill -9 one worker. Workers run a status server on a free port; its URL and the
 * worker's instance id are read from the worker's JSON log lines.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeTinyModel } from '../../workers/models/index.js';
import { spawnCli, type Spawned } from '../harness/processes.js';

export const MODEL = 'tiny';

export interface E2eWorker {
  proc: Spawned;
  instanceId: string;
  /** Base URL of the worker's status server (/health, /live, /metrics). */
  statusUrl: string;
}

export interface ClusterOptions {
  workers?: number;
  /** Extra flags for every worker, e.g. ['--speedup-ratio', '100']. */
  workerArgs?: string[];
  /** Extra flags for the frontend, e.g. ['--max-inflight-requests', '2000']. */
  frontendArgs?: string[];
  /**
   * Discovery lease TTL in seconds (default 2, so a killed worker leaves quickly). Load tests use
   * a longer one: on 2 busy cores a saturated process can miss a 2 s file heartbeat.
   */
  leaseTtl?: number;
}

export class E2eCluster {
  readonly workers: E2eWorker[] = [];
  frontend!: Spawned;
  url = '';

  private constructor(
    readonly dir: string,
    readonly modelDir: string,
    private readonly options: ClusterOptions,
  ) {}

  static async start(options: ClusterOptions = {}): Promise<E2eCluster> {
    const dir = await mkdtemp(join(tmpdir(), 'tandem-e2e-'));
    const modelDir = join(dir, MODEL);
    await makeTinyModel({ arch: 'llama', outDir: modelDir, dtype: 'f32' });
    const cluster = new E2eCluster(dir, modelDir, options);
    try {
      const count = options.workers ?? 2;
      const [frontend] = await Promise.all([cluster.startFrontend(), ...Array.from({ length: count }, () => cluster.addWorker())]);
      cluster.frontend = frontend;
      await cluster.waitForRoutable(count);
    } catch (err) {
      await cluster.close();
      throw err;
    }
    return cluster;
  }

  private get common(): string[] {
    return ['--discovery', 'file', '--discovery-dir', join(this.dir, 'discovery'), '--lease-ttl', String(this.options.leaseTtl ?? 2), '--event-plane', 'direct', '--host', '127.0.0.1', '--log-level', 'info'];
  }

  private async startFrontend(): Promise<Spawned> {
    const proc = spawnCli(['frontend', ...this.common, '--http-port', '0', ...(this.options.frontendArgs ?? [])]);
    const line = await proc.waitForLine(/^frontend listening on http:\/\//);
    this.url = line.slice('frontend listening on '.length).trim();
    return proc;
  }

  /** Start one more worker and wait until it has registered (not until the frontend routes to it). */
  async addWorker(extraArgs: string[] = []): Promise<E2eWorker> {
    const proc = spawnCli(['worker', ...this.common, '--engine', 'mocker', '--model', this.modelDir, '--status-port', '0', ...(this.options.workerArgs ?? []), ...extraArgs]);
    const statusLine = await proc.waitForLine(/"msg":"status server listening"/);
    const ready = await proc.waitForLine(/"msg":"worker ready"/);
    const worker: E2eWorker = {
      proc,
      statusUrl: (JSON.parse(statusLine) as { url: string }).url,
      instanceId: (JSON.parse(ready) as { instanceId: string }).instanceId,
    };
    this.workers.push(worker);
    return worker;
  }

  worker(instanceId: string): E2eWorker {
    const worker = this.workers.find((w) => w.instanceId === instanceId);
    if (!worker) throw new Error(`no worker ${instanceId} in this cluster (have ${this.workers.map((w) => w.instanceId).join(', ')})`);
    return worker;
  }

  /** Wait until the frontend's /health lists `count` routable instances of the model. */
  async waitForRoutable(count: number, timeoutMs = 15_000): Promise<void> {
    await pollUntil(`${count} routable workers`, async () => {
      const res = await fetch(`${this.url}/health`).catch(() => undefined);
      if (!res) return false;
      const body = (await res.json()) as { models: Array<{ name: string; instances: number }> };
      return body.models.find((m) => m.name === MODEL)?.instances === count;
    }, timeoutMs);
  }

  async frontendMetrics(): Promise<string> {
    return scrape(this.url);
  }

  /** SIGTERM every process still running (SIGKILL after 10 s), then delete the temp dir. */
  async close(): Promise<void> {
    const procs = [this.frontend, ...this.workers.map((w) => w.proc)].filter((p): p is Spawned => p !== undefined);
    await Promise.all(
      procs.map(async (p) => {
        if (p.child.exitCode !== null || p.child.signalCode !== null) return;
        p.kill('SIGTERM');
        const timer = setTimeout(() => p.kill('SIGKILL'), 10_000);
        await p.exited();
        clearTimeout(timer);
      }),
    );
    await rm(this.dir, { recursive: true, force: true });
  }
}

export async function scrape(baseUrl: string): Promise<string> {
  const res = await fetch(`${baseUrl}/metrics`);
  if (!res.ok) throw new Error(`GET ${baseUrl}/metrics answered ${res.status}`);
  return res.text();
}

/**
 * The value of one Prometheus sample, summed over the series whose labels include `labels`.
 * Undefined when no series matches, so a renamed metric fails the test instead of reading 0.
 */
export function metricValue(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  let total: number | undefined;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    const match = /^(?:\{([^}]*)\})? (\S+)$/.exec(rest);
    if (!match) continue;
    const have = new Map<string, string>();
    for (const pair of (match[1] ?? '').matchAll(/(\w+)="([^"]*)"/g)) have.set(pair[1]!, pair[2]!);
    if (Object.entries(labels).some(([k, v]) => have.get(k) !== v)) continue;
    total = (total ?? 0) + Number(match[2]);
  }
  return total;
}

export async function pollUntil(what: string, predicate: () => boolean | Promise<boolean>, timeoutMs = 10_000, stepMs = 50): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      if (await predicate()) return;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${lastError ? ` (last error: ${String(lastError)})` : ''}`);
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

/** One parsed SSE stream from the frontend: `data:` payloads as JSON, and whether [DONE] came. */
export interface SseResult {
  chunks: Array<Record<string, unknown>>;
  done: boolean;
}

/**
 * Read an SSE response body frame by frame, calling `onChunk` for each JSON payload (it may be
 * async, e.g. to kill a worker mid-stream). Checks the framing strictly.
 */
export async function readSse(res: Response, onChunk?: (chunk: Record<string, unknown>, index: number) => void | Promise<void>): Promise<SseResult> {
  const chunks: Array<Record<string, unknown>> = [];
  let done = false;
  let buffer = '';
  const decoder = new TextDecoder();
  for await (const bytes of res.body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(bytes, { stream: true });
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      if (!frame.startsWith('data: ')) throw new Error(`bad SSE frame: ${JSON.stringify(frame)}`);
      const data = frame.slice('data: '.length);
      if (data === '[DONE]') {
        done = true;
        continue;
      }
      if (done) throw new Error('SSE data after [DONE]');
      const chunk = JSON.parse(data) as Record<string, unknown>;
      chunks.push(chunk);
      await onChunk?.(chunk, chunks.length - 1);
    }
  }
  if (buffer.length > 0) throw new Error(`SSE body ended mid-frame: ${JSON.stringify(buffer)}`);
  return { chunks, done };
}

/** Token ids from completions chunks requested with logprobs + return_tokens_as_token_ids. */
export function tokenIdsOf(chunks: Array<Record<string, unknown>>): number[] {
  const ids: number[] = [];
  for (const chunk of chunks) {
    const choices = (chunk.choices ?? []) as Array<{ logprobs?: { tokens?: string[] } | null }>;
    for (const choice of choices) {
      for (const token of choice.logprobs?.tokens ?? []) {
        const match = /^token_id:(\d+)$/.exec(token);
        if (!match) throw new Error(`logprob token is not token_id:N: ${token}`);
        ids.push(Number(match[1]));
      }
    }
  }
  return ids;
}
