/**
 * A disaggregated serving stack of real processes (test/harness/cli-stack.ts): one `runtime
 * frontend` plus prefill, decode and aggregated workers, 2 s lease. Each worker is its own
 * process so a test can kill -9 one. `env` goes to the workers (e.g. UCX_TLS).
 */
import type { WorkerRole } from '../../proto/wire.js';
import { CliStack, type CliWorker } from '../harness/cli-stack.js';
import { metricValue, pollUntil, scrape } from '../harness/http.js';
import type { Spawned } from '../harness/processes.js';

export const MODEL = 'tiny';

export type DisaggWorker = CliWorker;

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

export class DisaggCluster extends CliStack {
  private readonly engineArgs: string[];

  private constructor(dir: string, modelDir: string, options: DisaggClusterOptions) {
    super(dir, modelDir, MODEL, DisaggCluster.stackOptions(options));
    this.engineArgs = (options.engine ?? 'native') === 'native' ? ['--engine', 'native', '--device', 'cpu', '--threads', '1'] : ['--engine', 'mocker'];
  }

  private static stackOptions(options: DisaggClusterOptions) {
    return {
      tmpPrefix: 'tandem-disagg-e2e-',
      model: MODEL,
      workerStartMs: 60_000,
      routableMs: 30_000,
      ...(options.workerArgs !== undefined && { workerArgs: options.workerArgs }),
      ...(options.env !== undefined && { workerEnv: options.env }),
    };
  }

  static async start(options: DisaggClusterOptions): Promise<DisaggCluster> {
    const { dir, modelDir } = await CliStack.prepare(DisaggCluster.stackOptions(options));
    const cluster = new DisaggCluster(dir, modelDir, options);
    try {
      const roles: WorkerRole[] = [
        ...Array<WorkerRole>(options.prefill ?? 0).fill('prefill'),
        ...Array<WorkerRole>(options.decode ?? 0).fill('decode'),
        ...Array<WorkerRole>(options.agg ?? 0).fill('agg'),
      ];
      await cluster.startFrontend(options.frontendArgs ?? []);
      // Two at a time: the machine has 2 cores and native workers load weights on start.
      for (let i = 0; i < roles.length; i += 2) await Promise.all(roles.slice(i, i + 2).map((r) => cluster.addWorker(r)));
      await cluster.waitForRoutable((options.decode ?? 0) + (options.agg ?? 0));
      // /health counts only the workers a request lands on; the prefill pool is a separate feed
      // that may lag it, and a request sent before it arrives runs aggregated.
      if ((options.prefill ?? 0) > 0) await cluster.waitForPrefillPool(options.prefill ?? 0);
    } catch (err) {
      await cluster.close();
      throw err;
    }
    return cluster;
  }

  addWorker(role: WorkerRole, extraArgs: string[] = []): Promise<DisaggWorker> {
    return this.startWorker(role, this.engineArgs, extraArgs);
  }

  /** The frontend sees `count` ready prefill workers of the model (its dashboard's fleet view, fed by discovery as the prefill pool is). */
  async waitForPrefillPool(count: number, timeoutMs = 15_000): Promise<void> {
    type Snapshot = { models: Array<{ name: string; pools: Array<{ role: string; workers: Array<{ state: string }> }> }> };
    await pollUntil(`${count} prefill workers seen by the frontend`, async () => {
      const res = await fetch(`${this.url}/dashboard/api/snapshot`).catch(() => undefined);
      if (!res?.ok) return false;
      const snapshot = (await res.json()) as Snapshot;
      const pool = snapshot.models.find((m) => m.name === MODEL)?.pools.find((p) => p.role === 'prefill');
      return (pool?.workers.filter((w) => w.state === 'ready').length ?? 0) >= count;
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

/** The JSON log records of a worker process whose line matches `pattern` (e.g. /"msg":"KV streamed/). */
export function logRecords(proc: Spawned, pattern: RegExp): Array<Record<string, unknown>> {
  return proc
    .output()
    .split('\n')
    .filter((l) => pattern.test(l))
    .map((l) => JSON.parse(l.slice(l.indexOf('{'))) as Record<string, unknown>);
}

/** Waits until the process has logged `n` records matching `pattern`. */
export async function waitForRecords(proc: Spawned, pattern: RegExp, n: number, timeoutMs = 20_000): Promise<void> {
  await pollUntil(`${n}× ${pattern}`, () => logRecords(proc, pattern).length >= n, timeoutMs, 20);
}
