/**
 * A set of named children, each optionally restarted when it exits on its own (backoff from
 * `RestartBackoff`). A child that `stop()` ended is never restarted. Events say what happened
 * (started, exited, restarting, gave up) so the owner can log them its own way.
 */
import { RestartBackoff, type RestartPolicy } from './restart-policy.js';
import { SupervisedProcess, type ExitInfo, type ProcessSpec } from './supervised-process.js';

export interface ChildSpec extends ProcessSpec {
  /** Restart on an unexpected exit; absent: never. */
  restart?: RestartPolicy;
}

export type SupervisorEvent =
  | { type: 'started'; name: string; pid: number | undefined; /** 0 for the first run */ restarts: number }
  | { type: 'exited'; name: string; pid: number | undefined; code: number | null; signal: NodeJS.Signals | null; /** stop() asked for it */ expected: boolean; ranMs: number }
  | { type: 'restarting'; name: string; attempt: number; delayMs: number }
  | { type: 'gave_up'; name: string; crashes: number };

export interface SupervisorOptions {
  onEvent?: (event: SupervisorEvent) => void;
  /** Clock for run lengths (tests). */
  now?: () => number;
}

/** One named child across its runs. */
export class SupervisedChild {
  private run: SupervisedProcess;
  private runs = 0;
  private stopped = false;
  private restartTimer: NodeJS.Timeout | undefined;
  private readonly backoff: RestartBackoff | undefined;
  private readonly runListeners = new Set<(run: SupervisedProcess) => void>();

  constructor(
    readonly spec: ChildSpec,
    private readonly emit: (event: SupervisorEvent) => void,
    private readonly now: () => number,
  ) {
    this.backoff = spec.restart ? new RestartBackoff(spec.restart) : undefined;
    this.run = this.spawn();
  }

  get name(): string {
    return this.spec.name;
  }

  /** The current (or last) run. */
  get current(): SupervisedProcess {
    return this.run;
  }

  /** How many times this child was restarted. */
  get restarts(): number {
    return this.runs - 1;
  }

  get pid(): number | undefined {
    return this.run.pid;
  }

  /** Neither stopped nor given up: it runs, or will again after a backoff. */
  get supervised(): boolean {
    return !this.stopped;
  }

  /** Called with each new run after a restart. */
  onRestart(listener: (run: SupervisedProcess) => void): () => void {
    this.runListeners.add(listener);
    return () => this.runListeners.delete(listener);
  }

  /** Stop for good: cancel a pending restart, SIGTERM, SIGKILL after the grace period. */
  stop(graceMs?: number): Promise<ExitInfo> {
    this.stopped = true;
    if (this.restartTimer) clearTimeout(this.restartTimer);
    this.restartTimer = undefined;
    return this.run.stop(graceMs);
  }

  killNow(): void {
    this.stopped = true;
    if (this.restartTimer) clearTimeout(this.restartTimer);
    this.run.killNow();
  }

  private spawn(): SupervisedProcess {
    const run = new SupervisedProcess(this.spec, this.now);
    this.runs += 1;
    this.emit({ type: 'started', name: this.name, pid: run.pid, restarts: this.runs - 1 });
    void run.exited().then((info) => this.onExit(run, info));
    return run;
  }

  private onExit(run: SupervisedProcess, info: ExitInfo): void {
    const exitedAt = this.now();
    this.emit({ type: 'exited', name: this.name, pid: run.pid, code: info.code, signal: info.signal, expected: this.stopped, ranMs: exitedAt - run.startedAtMs });
    if (this.stopped || !this.backoff) {
      this.stopped = true;
      return;
    }
    const decision = this.backoff.onUnexpectedExit(run.startedAtMs, exitedAt);
    if (decision.kind === 'give_up') {
      this.stopped = true;
      this.emit({ type: 'gave_up', name: this.name, crashes: decision.crashes });
      return;
    }
    this.emit({ type: 'restarting', name: this.name, attempt: decision.attempt, delayMs: decision.delayMs });
    this.restartTimer = setTimeout(() => {
      this.restartTimer = undefined;
      if (this.stopped) return;
      this.run = this.spawn();
      for (const listener of this.runListeners) listener(this.run);
    }, decision.delayMs);
  }
}

export class Supervisor {
  private readonly byName = new Map<string, SupervisedChild>();
  private readonly onEvent: (event: SupervisorEvent) => void;
  private readonly now: () => number;

  constructor(options: SupervisorOptions = {}) {
    this.onEvent = options.onEvent ?? (() => {});
    this.now = options.now ?? Date.now;
  }

  /** Spawn a child now. Names are unique within a supervisor. */
  start(spec: ChildSpec): SupervisedChild {
    if (this.byName.has(spec.name)) throw new Error(`supervisor: a child named '${spec.name}' already exists`);
    const child = new SupervisedChild(spec, (e) => this.onEvent(e), this.now);
    this.byName.set(spec.name, child);
    return child;
  }

  child(name: string): SupervisedChild | undefined {
    return this.byName.get(name);
  }

  children(): SupervisedChild[] {
    return [...this.byName.values()];
  }

  /** Stop the named children (default all) at once; resolves when every one has exited. */
  async stop(names?: string[], graceMs?: number): Promise<void> {
    const targets = names === undefined ? this.children() : names.map((n) => this.byName.get(n)).filter((c): c is SupervisedChild => c !== undefined);
    await Promise.all(targets.map((c) => c.stop(graceMs)));
  }

  /** SIGKILL everything now, synchronously. */
  killNow(): void {
    for (const c of this.byName.values()) c.killNow();
  }
}
