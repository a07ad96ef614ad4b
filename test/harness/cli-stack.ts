/**
 * A serving stack of real processes: `runtime frontend` and `runtime worker` processes of the
 * BUILT CLI (bin/runtime.js → dist/), sharing a temp file-discovery directory and the direct
 * event plane, over a tiny model generated into the same temp dir. Each process is started on
 * its own, so a test can kill -9 one. Workers run a status server on a free port; its URL and
 * the worker's instance id are read from the worker's JSON log lines. Processes are started
 * through `spawnCli` (processes.ts), a thin wrapper over the shipped supervisor.
 *
 * The suites build on it: test/e2e/cluster.ts (mocker workers), test/disagg-e2e/cluster.ts
 * (prefill/decode pools), and single-stack tests such as test/bench/against-stack.test.ts.
 */
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ModelCard } from '../../proto/model-card.js';
import type { WorkerRole } from '../../proto/wire.js';
import { makeTinyModel, type MakeTinyModelOptions } from '../../workers/models/index.js';
import { pollUntil } from './http.js';
import { spawnCli, type Spawned } from './processes.js';

export interface CliStackOptions {
  /** Temp dir prefix, e.g. 'tandem-e2e-'. */
  tmpPrefix: string;
  /** The model directory's name, which is the served model name (default 'tiny'). */
  model?: string;
  /** How to make the tiny model (default llama, f32). */
  tiny?: Partial<Omit<MakeTinyModelOptions, 'outDir'>>;
  /** Discovery lease TTL in seconds (default 2, so a killed worker leaves quickly). */
  leaseTtl?: number;
  /** Flags for every worker, after the stack's own. */
  workerArgs?: string[];
  /** Environment of the worker processes (UCX_TLS, ...). */
  workerEnv?: NodeJS.ProcessEnv;
  /** How long a worker may take to print each start-up line (default 30 s). */
  workerStartMs?: number;
  /** Default bound of `waitForRoutable` (15 s). */
  routableMs?: number;
}

export interface CliWorker {
  proc: Spawned;
  role: WorkerRole;
  instanceId: string;
  /** Base URL of the worker's status server (/health, /live, /metrics). */
  statusUrl: string;
}

export class CliStack {
  readonly workers: CliWorker[] = [];
  /** The first frontend started; `url` is its base URL. */
  frontend!: Spawned;
  url = '';
  private readonly extraFrontends: Spawned[] = [];

  protected constructor(
    readonly dir: string,
    readonly modelDir: string,
    readonly model: string,
    protected readonly options: CliStackOptions,
  ) {}

  /** Make the temp dir and the tiny model; start nothing yet. */
  protected static async prepare(options: CliStackOptions): Promise<{ dir: string; modelDir: string; model: string }> {
    const dir = await mkdtemp(join(tmpdir(), options.tmpPrefix));
    const model = options.model ?? 'tiny';
    const modelDir = join(dir, model);
    await makeTinyModel({ arch: 'llama', dtype: 'f32', ...options.tiny, outDir: modelDir });
    return { dir, modelDir, model };
  }

  /** A stack with nothing running; call `close()` even if starting processes fails. */
  static async create(options: CliStackOptions): Promise<CliStack> {
    const { dir, modelDir, model } = await CliStack.prepare(options);
    return new CliStack(dir, modelDir, model, options);
  }

  /** Flags every process of the stack shares. */
  get common(): string[] {
    return ['--discovery', 'file', '--discovery-dir', join(this.dir, 'discovery'), '--lease-ttl', String(this.options.leaseTtl ?? 2), '--event-plane', 'direct', '--host', '127.0.0.1', '--log-level', 'info'];
  }

  /** Start a frontend on a free port; the first one is `this.frontend`, the rest close with the stack. */
  async startFrontend(args: string[] = []): Promise<Spawned> {
    const proc = spawnCli(['frontend', ...this.common, '--http-port', '0', ...args]);
    const line = await proc.waitForLine(/^frontend listening on http:\/\//);
    if (this.url === '') {
      this.frontend = proc;
      this.url = line.slice('frontend listening on '.length).trim();
    } else {
      this.extraFrontends.push(proc);
    }
    return proc;
  }

  /**
   * Start one worker (`engineArgs` such as ['--engine', 'mocker']) and wait until it has
   * registered, not until a frontend routes to it.
   */
  async startWorker(role: WorkerRole, engineArgs: string[], extraArgs: string[] = []): Promise<CliWorker> {
    const proc = spawnCli(
      ['worker', ...this.common, ...engineArgs, '--model', this.modelDir, '--mode', role, '--status-port', '0', ...(this.options.workerArgs ?? []), ...extraArgs],
      this.options.workerEnv ?? {},
    );
    const timeoutMs = this.options.workerStartMs ?? 30_000;
    const statusLine = await proc.waitForLine(/"msg":"status server listening"/, timeoutMs);
    const ready = await proc.waitForLine(/"msg":"worker ready"/, timeoutMs);
    const worker: CliWorker = {
      proc,
      role,
      statusUrl: (JSON.parse(statusLine) as { url: string }).url,
      instanceId: (JSON.parse(ready) as { instanceId: string }).instanceId,
    };
    this.workers.push(worker);
    return worker;
  }

  worker(instanceId: string): CliWorker {
    const worker = this.workers.find((w) => w.instanceId === instanceId);
    if (!worker) throw new Error(`no worker ${instanceId} in this stack (have ${this.workers.map((w) => w.instanceId).join(', ')})`);
    return worker;
  }

  byRole(role: WorkerRole): CliWorker[] {
    return this.workers.filter((w) => w.role === role);
  }

  /** Workers whose process has not exited. */
  live(): CliWorker[] {
    return this.workers.filter((w) => w.proc.running);
  }

  /** A worker's model card as file discovery stores it (one envelope per key, `{key, value, ...}`); throws when it has none. */
  async cardOf(worker: CliWorker): Promise<ModelCard> {
    const dir = join(this.dir, 'discovery');
    for (const name of await readdir(dir)) {
      if (decodeURIComponent(name).startsWith(`v1/models/tandem/${this.model}/${worker.instanceId}`)) return (JSON.parse(await readFile(join(dir, name), 'utf8')) as { value: ModelCard }).value;
    }
    throw new Error(`no card for ${worker.instanceId}`);
  }

  async kill9(worker: CliWorker): Promise<void> {
    worker.proc.kill('SIGKILL');
    await worker.proc.exited();
  }

  /**
   * Wait until a frontend's /health (default the first one's) lists `count` routable instances
   * of the model, for at most `timeoutMs` (default the stack's `routableMs`, else 15 s).
   */
  async waitForRoutable(count: number, { url = this.url, timeoutMs = this.options.routableMs ?? 15_000 }: { url?: string; timeoutMs?: number } = {}): Promise<void> {
    await pollUntil(`${count} routable workers`, async () => {
      const res = await fetch(`${url}/health`).catch(() => undefined);
      if (!res) return false;
      const body = (await res.json()) as { models: Array<{ name: string; instances: number }> };
      return body.models.find((m) => m.name === this.model)?.instances === count;
    }, timeoutMs);
  }

  /** SIGTERM every process still running (SIGKILL after 10 s), then delete the temp dir. */
  async close(): Promise<void> {
    const procs = [this.frontend, ...this.extraFrontends, ...this.workers.map((w) => w.proc)].filter((p): p is Spawned => p !== undefined);
    await Promise.all(procs.map((p) => p.stop(10_000)));
    await rm(this.dir, { recursive: true, force: true });
  }
}
