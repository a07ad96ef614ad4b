/**
 * A disaggregated serving stack of real processes (the BUILT CLI, bin/runtime.js → dist/): one
 * `runtime frontend` plus prefill, decode and aggregated workers sharing a temp file-discovery
 * directory (2 s lease). Each worker is its own process so a test can kill -9 one; its status
 * URL and instance id come from its JSON log. `env` goes to the workers (e.g. UCX_TLS).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { WorkerRole } from '../../proto/wire.js';
import { makeTinyModel } from '../../workers/models/index.js';
import { metricValue, pollUntil, scrape } from '../e2e/cluster.js';
import { spawnCli, type Spawned } from '../harness/processes.js';

export const MODEL = 'tiny';

export interface DisaggWorker {
  proc: Spawned;
  role: WorkerRole;
  instanceId: string;
  statusUrl: string;
}

export interface DisaggClusterOptions {
  prefill?: number;
  decode?: number;
  agg?: number;
  engine?: 'native' | 'mocker';
  /** Flags for every worker. */
  workerArgs?: string[];
  frontendArgs?: string[];
  /** Environment of the worker processes (UCX_TLS, ...). */
  env?: NodeJS.ProcessEnv;
}

export class DisaggCluster {
  readonly workers: DisaggWorker[] = [];
  frontend!: Spawned;
  url = '';
  private readonly extraFrontends: Spawned[] = [];

  private constructor(
    readonly dir: string,
    readonly modelDir: string,
    private readonly options: DisaggClusterOptions,
  ) {}

  static async start(options: DisaggClusterOptions): Promise<DisaggCluster> {
    const dir = await mkdtemp(join(tmpdir(), 'tandem-disagg-e2e-'));
    const modelDir = join(dir, MODEL);
    await makeTinyModel({ arch: 'llama', outDir: modelDir, dtype: 'f32' });
    const cluster = new DisaggCluster(dir, modelDir, options);
    try {
      const roles: WorkerRole[] = [
        ...Array<WorkerRole>(options.prefill ?? 0).fill('prefill'),
        ...Array<WorkerRole>(options.decode ?? 0).fill('decode'),
        ...Array<WorkerRole>(options.agg ?? 0).fill('agg'),
      ];
      cluster.frontend = await cluster.startFrontend(options.frontendArgs ?? []);
      // Two at a time: the machine has 2 cores and native workers load weights on start.
      for (let i = 0; i < roles.length; i += 2) await Promise.all(roles.slice(i, i + 2).map((r) => cluster.addWorker(r)));
      await cluster.waitForRoutable((options.decode ?? 0) + (options.agg ?? 0));
    } catch (err) {
      await cluster.close();
      throw err;
    }
    return cluster;
  }

  get common(): string[] {
    return ['--discovery', 'file', '--discovery-dir', join(this.dir, 'discovery'), '--lease-ttl', '2', '--event-plane', 'direct', '--host', '127.0.0.1', '--log-level', 'info'];
  }

  /** Start a frontend; the first one is `this.frontend`, more (other flags) are closed with the cluster. */
  async startFrontend(args: string[]): Promise<Spawned> {
    const proc = spawnCli(['frontend', ...this.common, '--http-port', '0', ...args]);
    const line = await proc.waitForLine(/^frontend listening on http:\/\//);
    if (this.url === '') this.url = line.slice('frontend listening on '.length).trim();
    else this.extraFrontends.push(proc);
    return proc;
  }

  async addWorker(role: WorkerRole, extraArgs: string[] = []): Promise<DisaggWorker> {
    const engine = this.options.engine ?? 'native';
    const engineArgs = engine === 'native' ? ['--engine', 'native', '--device', 'cpu', '--threads', '1'] : ['--engine', 'mocker'];
    const proc = spawnCli(
      ['worker', ...this.common, ...engineArgs, '--model', this.modelDir, '--mode', role, '--status-port', '0', ...(this.options.workerArgs ?? []), ...extraArgs],
      this.options.env ?? {},
    );
    const statusLine = await proc.waitForLine(/"msg":"status server listening"/, 60_000);
    const ready = await proc.waitForLine(/"msg":"worker ready"/, 60_000);
    const worker: DisaggWorker = {
      proc,
      role,
      statusUrl: (JSON.parse(statusLine) as { url: string }).url,
      instanceId: (JSON.parse(ready) as { instanceId: string }).instanceId,
    };
    this.workers.push(worker);
    return worker;
  }

  byRole(role: WorkerRole): DisaggWorker[] {
    return this.workers.filter((w) => w.role === role);
  }

  worker(instanceId: string): DisaggWorker {
    const w = this.workers.find((x) => x.instanceId === instanceId);
    if (!w) throw new Error(`no worker ${instanceId}`);
    return w;
  }

  live(): DisaggWorker[] {
    return this.workers.filter((w) => w.proc.child.exitCode === null && w.proc.child.signalCode === null);
  }

  async kill9(worker: DisaggWorker): Promise<void> {
    worker.proc.kill('SIGKILL');
    await worker.proc.exited();
  }

  async waitForRoutable(count: number, url = this.url, timeoutMs = 30_000): Promise<void> {
    await pollUntil(`${count} routable workers`, async () => {
      const res = await fetch(`${url}/health`).catch(() => undefined);
      if (!res) return false;
      const body = (await res.json()) as { models: Array<{ name: string; instances: number }> };
      return body.models.find((m) => m.name === MODEL)?.instances === count;
    }, timeoutMs);
  }

  /**
   * Every live worker is idle with no KV in use or pinned, and the frontend has nothing in
   * flight. The prefix cache may keep freed blocks: only active (referenced) blocks count.
   */
  async waitForBaseline(timeoutMs = 10_000): Promise<void> {
    const labels = { model_name: MODEL };
    await pollUntil('gauges back to baseline', async () => {
      for (const w of this.live()) {
        const text = await scrape(w.statusUrl);
        if (metricValue(text, 'tandem_worker_kv_active_blocks', labels) !== 0) return false;
        if (metricValue(text, 'vllm:num_requests_running', labels) !== 0) return false;
        if (metricValue(text, 'vllm:num_requests_waiting', labels) !== 0) return false;
        if (w.role === 'prefill' && metricValue(text, 'tandem_worker_kv_pinned_blocks', labels) !== 0) return false;
        if (w.role === 'decode' && (metricValue(text, 'tandem_worker_kv_transfers_inflight', labels) ?? 0) !== 0) return false;
      }
      return metricValue(await scrape(this.url), 'tandem_frontend_inflight_requests', { model: MODEL }) === 0;
    }, timeoutMs, 100);
  }

  async close(): Promise<void> {
    const procs = [this.frontend, ...this.extraFrontends, ...this.workers.map((w) => w.proc)].filter((p): p is Spawned => p !== undefined);
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

export interface Completion {
  status: number;
  headers: Headers;
  tokenIds: number[];
  cachedTokens: number;
  nvext?: { prefill_worker_id: string | null; decode_worker_id: string | null; disagg_path: string };
  body: string;
}

/** Unary /v1/completions with token ids (logprobs as `token_id:N`). */
export async function completeTokens(url: string, body: Record<string, unknown>, headers: Record<string, string> = {}): Promise<Completion> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: MODEL, logprobs: 0, return_tokens_as_token_ids: true, ...body }),
  });
  const text = await res.text();
  if (!res.ok) return { status: res.status, headers: res.headers, tokenIds: [], cachedTokens: 0, body: text };
  const json = JSON.parse(text) as {
    choices: Array<{ logprobs: { tokens: string[] } }>;
    usage: { prompt_tokens_details?: { cached_tokens: number } };
    nvext?: Completion['nvext'];
  };
  return {
    status: res.status,
    headers: res.headers,
    tokenIds: json.choices[0]!.logprobs.tokens.map((t) => Number(t.slice('token_id:'.length))),
    cachedTokens: json.usage.prompt_tokens_details?.cached_tokens ?? 0,
    ...(json.nvext ? { nvext: json.nvext } : {}),
    body: text,
  };
}
