/**
 * A real single-member etcd for integration tests: `/usr/bin/etcd` on free loopback client and
 * peer ports with a temp data dir. `restart()` reuses the same ports and data dir, so leases and
 * keys survive it the way they survive a crash of a real member.
 *
 *   const etcd = await startEtcd();
 *   ... new Etcd3({ hosts: etcd.endpoint }) ...
 *   await etcd.kill();      // SIGKILL, data kept
 *   await etcd.restart();   // same ports + data dir, resolves once healthy
 *   await etcd.stop();      // SIGTERM and delete the data dir (use in afterAll)
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SupervisedProcess } from '../../runtime/supervisor/index.js';
import { freePorts } from './ports.js';

export interface EtcdServer {
  /** Client URL, e.g. `http://127.0.0.1:41234`. */
  readonly endpoint: string;
  readonly clientPort: number;
  readonly peerPort: number;
  readonly dataDir: string;
  /** Pid of the running etcd, or undefined while it is down. */
  readonly pid: number | undefined;
  /** SIGTERM, wait for exit, delete the data dir. Idempotent; the server cannot restart after. */
  stop(): Promise<void>;
  /** SIGKILL and wait for exit; keeps the data dir so `restart()` can bring the member back. */
  kill(): Promise<void>;
  /** Start again (killing first if running) on the same ports and data dir; resolves when healthy. */
  restart(): Promise<void>;
  /** SIGSTOP: the process keeps its sockets but answers nothing, like a hung member. */
  pause(): void;
  /** SIGCONT after `pause()`. */
  resume(): void;
  /** Last lines etcd wrote, for failure messages. */
  logTail(): string;
}

export interface StartEtcdOptions {
  /** How long to wait for `/health` (default 15 s). */
  readyTimeoutMs?: number;
}

const ETCD_BIN = process.env.ETCD_BIN ?? '/usr/bin/etcd';
const LOG_LINES = 60;

/** One member across its runs; each run is a supervised process (SIGKILLed if the test process exits). */
class EtcdProcess implements EtcdServer {
  readonly endpoint: string;
  private proc: SupervisedProcess | undefined;
  private stopped = false;

  constructor(
    readonly clientPort: number,
    readonly peerPort: number,
    readonly dataDir: string,
    private readonly readyTimeoutMs: number,
  ) {
    this.endpoint = `http://127.0.0.1:${clientPort}`;
  }

  get pid(): number | undefined {
    return this.proc?.running ? this.proc.pid : undefined;
  }

  async start(): Promise<void> {
    const peer = `http://127.0.0.1:${this.peerPort}`;
    const args = [
      '--name', 'tandem-test',
      '--data-dir', this.dataDir,
      '--listen-client-urls', this.endpoint,
      '--advertise-client-urls', this.endpoint,
      '--listen-peer-urls', peer,
      '--initial-advertise-peer-urls', peer,
      '--initial-cluster', `tandem-test=${peer}`,
      '--initial-cluster-state', 'new',
      // Fast election so a restarted member serves again in well under a second.
      '--heartbeat-interval', '50',
      '--election-timeout', '300',
      '--logger', 'zap',
      '--log-level', 'warn',
    ];
    this.proc = new SupervisedProcess({ name: `etcd :${this.clientPort}`, command: ETCD_BIN, args, log: { memoryLines: LOG_LINES } });
    await this.waitHealthy(this.proc);
  }

  private async waitHealthy(proc: SupervisedProcess): Promise<void> {
    const deadline = Date.now() + this.readyTimeoutMs;
    while (Date.now() < deadline) {
      if (!proc.running) {
        const exit = proc.exitInfo!;
        throw new Error(`etcd exited during start (code ${exit.code}, signal ${exit.signal}):\n${this.logTail()}`);
      }
      try {
        const res = await fetch(`${this.endpoint}/health`, { signal: AbortSignal.timeout(500) });
        const body = (await res.json()) as { health?: string };
        if (res.ok && body.health === 'true') return;
      } catch {
        // not listening yet
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    proc.killNow();
    await proc.exited();
    throw new Error(`etcd not healthy after ${this.readyTimeoutMs} ms:\n${this.logTail()}`);
  }

  async kill(): Promise<void> {
    const proc = this.proc;
    if (proc === undefined) return;
    proc.kill('SIGCONT'); // a paused process still dies on SIGKILL, but be explicit
    proc.killNow();
    await proc.exited();
  }

  async restart(): Promise<void> {
    if (this.stopped) throw new Error('etcd harness: restart() after stop()');
    await this.kill();
    await this.start();
  }

  pause(): void {
    this.proc?.kill('SIGSTOP');
  }

  resume(): void {
    this.proc?.kill('SIGCONT');
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    const proc = this.proc;
    if (proc !== undefined) {
      proc.kill('SIGCONT');
      await proc.stop(3000);
    }
    await rm(this.dataDir, { recursive: true, force: true });
  }

  /** The last lines etcd wrote in its current (or last) run. */
  logTail(): string {
    return this.proc?.output().trimEnd() ?? '';
  }
}

/** Start a fresh etcd member. Retries on new ports if another process grabbed one first. */
export async function startEtcd(options: StartEtcdOptions = {}): Promise<EtcdServer> {
  const readyTimeoutMs = options.readyTimeoutMs ?? 15_000;
  let lastError: unknown;
  for (let attempt = 0; attempt < 3; attempt++) {
    const [clientPort, peerPort] = await freePorts(2);
    const dataDir = await mkdtemp(join(tmpdir(), 'tandem-etcd-'));
    const server = new EtcdProcess(clientPort!, peerPort!, dataDir, readyTimeoutMs);
    try {
      await server.start();
      return server;
    } catch (err) {
      lastError = err;
      await server.stop();
    }
  }
  throw lastError;
}
