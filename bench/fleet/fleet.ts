/**
 * startFleet: a mocker (or native) fleet on this machine for benchmarks. A frontend plus N
 * worker processes, as real `runtime` processes that find each other through file discovery in
 * a private temp directory (or etcd/NATS when given), on ports the processes pick themselves.
 * The fleet baseline, the frontend overhead bench and the KV-router and disaggregation benches
 * all start their servers through here, so their numbers come from the same set-up.
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO_ROOT, RUNTIME_BIN, Supervisor, killAllNow, recordWithMsg, runtimeCommand, type SupervisedProcess } from '../../runtime/supervisor/index.js';
import { resolveModel } from '../../workers/models/index.js';

/** Longer than file discovery's watcher poll (300 ms), so the frontend has every card. */
const CARD_SETTLE_MS = 1000;
/** The compiled CLI; `npm run build` makes it. */
export { RUNTIME_BIN };

export type FleetMode = 'agg' | 'disagg';
export type WorkerRoleName = 'agg' | 'prefill' | 'decode';

export interface FleetOptions {
  /** Aggregated workers (mode `agg`, default 4). */
  workers?: number;
  /** `agg`: `workers` aggregated workers. `disagg`: `prefill` + `decode` workers. */
  mode?: FleetMode;
  prefill?: number;
  decode?: number;
  /** Frontend `--router-mode` (round-robin | random | kv | direct). */
  routerMode?: string;
  /** Mocker: divide simulated step time by this. */
  speedupRatio?: number;
  /**
   * Mocker, a heterogeneous fleet: worker i (per role) runs at `speedupRatios[i % length]`
   * instead of `speedupRatio`, e.g. [1, 1, 0.5, 0.5] = two fast and two half-speed workers.
   */
  speedupRatios?: number[];
  /** KV blocks per worker. */
  numGpuBlocks?: number;
  blockSize?: number;
  maxNumSeqs?: number;
  maxNumBatchedTokens?: number;
  engine?: 'mocker' | 'native';
  /** Model directory, or `tiny` (default) for the generated tiny Llama. */
  model?: string;
  /** Appended to the frontend command line. */
  extraFrontendArgs?: string[];
  /** Appended to every worker's command line; a function gets the role and index. */
  extraWorkerArgs?: string[] | ((role: WorkerRoleName, index: number) => string[]);
  /** `file` (default, private temp dir) or `etcd` (needs `etcdEndpoints`). */
  discovery?: 'file' | 'etcd';
  etcdEndpoints?: string;
  /** `direct` (default) or `nats` (needs `natsServer`). */
  eventPlane?: 'direct' | 'nats';
  natsServer?: string;
  /** Children's log level (default info: start-up lines carry the ports we read). */
  logLevel?: string;
  /** Where child logs go (default: the fleet's temp dir, removed on stop unless `keepLogs`). */
  logDir?: string;
  keepLogs?: boolean;
  startTimeoutMs?: number;
  /** The `runtime` launcher to run (default RUNTIME_BIN): e.g. another checkout's build, to compare builds. */
  runtimeBin?: string;
}

export interface FleetWorker {
  label: string;
  role: WorkerRoleName;
  instanceId: string;
  /** host:port of the worker's gRPC server. */
  address: string;
  statusUrl: string;
  logFile: string;
  pid: number | undefined;
}

export interface Fleet {
  /** Frontend base URL, e.g. http://127.0.0.1:41234. */
  url: string;
  /** Served model name (what `/v1/models` lists). */
  model: string;
  /** Model directory: the bench's `--tokenizer`. */
  modelDir: string;
  namespace: string;
  discovery: 'file' | 'etcd';
  /** File discovery directory (undefined with etcd). */
  discoveryDir: string | undefined;
  frontendStatusUrl: string;
  workerStatusUrls: string[];
  workers: FleetWorker[];
  frontendLogFile: string;
  /** The frontend process (its CPU time is what frontend benchmarks charge per request). */
  frontendPid: number | undefined;
  /** Stop every process (SIGTERM, SIGKILL after a grace period) and remove temp files. Idempotent. */
  stop(): Promise<void>;
}

function workerPlan(o: FleetOptions): Array<{ role: WorkerRoleName; index: number }> {
  const plan: Array<{ role: WorkerRoleName; index: number }> = [];
  const add = (role: WorkerRoleName, n: number) => {
    for (let i = 0; i < n; i++) plan.push({ role, index: i });
  };
  if ((o.mode ?? 'agg') === 'agg') add('agg', o.workers ?? 4);
  else {
    add('prefill', o.prefill ?? 1);
    add('decode', o.decode ?? 1);
  }
  if (plan.length === 0) throw new Error('startFleet: no workers asked for');
  return plan;
}

let signalHookInstalled = false;
function installSignalHook(): void {
  if (signalHookInstalled) return;
  signalHookInstalled = true;
  // An interrupted bench must not leave a fleet running on a shared machine (the supervisor
  // already kills its children when this process exits normally or crashes).
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      killAllNow();
      process.exit(130);
    });
  }
}

export async function startFleet(options: FleetOptions = {}): Promise<Fleet> {
  const bin = options.runtimeBin ?? RUNTIME_BIN;
  if (options.runtimeBin === undefined && !existsSync(join(REPO_ROOT, 'dist', 'cli', 'main.js'))) throw new Error(`startFleet: ${RUNTIME_BIN} needs a build; run \`npm run build\` first`);
  installSignalHook();
  const modelDir = await resolveModel(options.model ?? 'tiny');
  const namespace = `bench-${process.pid}-${Date.now().toString(36)}`;
  const discovery = options.discovery ?? 'file';
  const eventPlane = options.eventPlane ?? 'direct';
  const root = mkdtempSync(join(tmpdir(), 'tandem-fleet-'));
  const discoveryDir = discovery === 'file' ? join(root, 'discovery') : undefined;
  const logDir = options.logDir ?? join(root, 'logs');
  mkdirSync(logDir, { recursive: true });
  const timeoutMs = options.startTimeoutMs ?? 60_000;

  const common = ['--namespace', namespace, '--discovery', discovery, '--event-plane', eventPlane, '--host', '127.0.0.1', '--status-port', '0', '--log-level', options.logLevel ?? 'info'];
  if (discoveryDir) common.push('--discovery-dir', discoveryDir);
  if (discovery === 'etcd') {
    if (!options.etcdEndpoints) throw new Error('startFleet: discovery etcd needs etcdEndpoints');
    common.push('--etcd-endpoints', options.etcdEndpoints);
  }
  if (eventPlane === 'nats') {
    if (!options.natsServer) throw new Error('startFleet: event plane nats needs natsServer');
    common.push('--nats-server', options.natsServer);
  }
  const workerFlags = ['--engine', options.engine ?? 'mocker', '--model', modelDir];
  const optional: Array<[number | undefined, string]> = [
    [options.speedupRatio, '--speedup-ratio'],
    [options.numGpuBlocks, '--num-gpu-blocks'],
    [options.blockSize, '--block-size'],
    [options.maxNumSeqs, '--max-num-seqs'],
    [options.maxNumBatchedTokens, '--max-num-batched-tokens'],
  ];
  for (const [value, flag] of optional) if (value !== undefined) workerFlags.push(flag, String(value));

  const supervisor = new Supervisor();
  const spawnChild = (name: string, args: string[]): SupervisedProcess =>
    supervisor.start({ name, ...runtimeCommand(args, bin), log: { file: join(logDir, `${name}.log`) } }).current;
  let stopping: Promise<void> | undefined;
  const stopAll = () => (stopping ??= stopChildren());
  const stopChildren = async () => {
    await supervisor.stop();
    if (!options.keepLogs && options.logDir === undefined) rmSync(root, { recursive: true, force: true });
    else if (discoveryDir) rmSync(discoveryDir, { recursive: true, force: true });
  };

  try {
    const statusUrlOf = (child: SupervisedProcess) =>
      child.waitFor((line) => {
        const url = recordWithMsg('status server listening')(line)?.url;
        return typeof url === 'string' ? url : undefined;
      }, { timeoutMs, what: 'status server listening' });

    const plan = workerPlan(options);
    const workerStarts = plan.map(async ({ role, index }): Promise<FleetWorker> => {
      const label = `${role}-${index}`;
      const extra = typeof options.extraWorkerArgs === 'function' ? options.extraWorkerArgs(role, index) : (options.extraWorkerArgs ?? []);
      // Commander keeps the last value of a repeated flag: this worker's own ratio wins.
      const speed = options.speedupRatios?.length ? ['--speedup-ratio', String(options.speedupRatios[index % options.speedupRatios.length])] : [];
      const child = spawnChild(label, ['worker', ...common, ...workerFlags, '--mode', role, ...speed, ...extra]);
      const status = statusUrlOf(child);
      const ready = child.waitFor((line) => {
        const j = recordWithMsg('worker ready')(line);
        return j ? { instanceId: String(j.instanceId), address: String(j.address) } : undefined;
      }, { timeoutMs, what: 'worker ready' });
      const [statusUrl, info] = await Promise.all([status, ready]);
      return { label, role, ...info, statusUrl, logFile: child.logFile!, pid: child.pid };
    });

    const frontendArgs = ['frontend', ...common, '--http-port', '0', ...(options.routerMode ? ['--router-mode', options.routerMode] : []), ...(options.extraFrontendArgs ?? [])];
    const frontend = spawnChild('frontend', frontendArgs);
    const frontendStatus = statusUrlOf(frontend);
    const frontendUrl = frontend.waitFor((line) => /^frontend listening on (\S+)/.exec(line)?.[1], { timeoutMs, what: 'frontend listening' });
    const [workers, url, frontendStatusUrl] = await Promise.all([Promise.all(workerStarts), frontendUrl, frontendStatus]);
    const model = await waitForRoutable(url, timeoutMs, frontend);
    return {
      url,
      model,
      modelDir,
      namespace,
      discovery,
      discoveryDir,
      frontendStatusUrl,
      workerStatusUrls: workers.map((w) => w.statusUrl),
      workers,
      frontendLogFile: frontend.logFile!,
      frontendPid: frontend.pid,
      stop: stopAll,
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
}

/**
 * Wait until the frontend lists the model, then let its watcher catch up with the last cards:
 * every worker has written its card before 'worker ready', and file discovery delivers a new
 * record within one poll (300 ms). A request sent before the last card arrives would land on
 * fewer workers and skew the first seconds of a run.
 */
async function waitForRoutable(url: string, timeoutMs: number, frontend: SupervisedProcess): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!frontend.running) throw new Error(`frontend exited during start-up; see ${frontend.logFile}`);
    try {
      const res = await fetch(`${url}/v1/models`);
      if (res.ok) {
        const body = (await res.json()) as { data: Array<{ id: string }> };
        const model = body.data[0]?.id;
        if (model !== undefined) {
          await new Promise((r) => setTimeout(r, CARD_SETTLE_MS));
          return model;
        }
      }
    } catch {
      // not answering yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`the frontend did not list a model within ${timeoutMs} ms`);
}
