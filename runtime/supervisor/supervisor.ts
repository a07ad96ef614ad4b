/**
 * A set of named children, each optionally restarted when it exits on its own (backoff from
 * `RestartBackoff`). A child that `stop()` ended is never restarted. Events say what happened
 * (started, exited, restarting, gave up) so the owner can log them its own way.
 *
 * Two seams, for tests: `spawn` makes a run (default: a real `SupervisedProcess`) and `clock`
 * reads the time and schedules restarts (default: the real one). A restart test passes a fake
 * child and a fake clock and steps through crashes and backoffs without sleeping.
 */
import { RestartBackoff, type RestartPolicy } from './restart-policy.js';
import { SupervisedProcess, type ExitInfo, type ProcessSpec } from './supervised-process.js';

export interface ChildSpec extends ProcessSpec {
  /** Restart on an unexpected exit; absent: never. */
  restart?: RestartPolicy;
}

/** What the supervisor needs of one run of a child; `SupervisedProcess` is the real one. */
export interface ChildRun {
  readonly pid: number | undefined;
  readonly startedAtMs: number;
  /** Resolves once the run has exited (its output flushed). */
  exited(): Promise<ExitInfo>;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves with how it exited. */
  stop(graceMs?: number): Promise<ExitInfo>;
  /** SIGKILL now, synchronously. */
  killNow(): void;
}

/** Time as the supervisor reads it, and the one timer it sets (the restart delay). */
export interface SupervisorClock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export const SYSTEM_CLOCK: SupervisorClock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

export type SupervisorEvent =
  | { type: 'started'; name: string; pid: number | undefined; /** 0 for the first run */ restarts: number }
  | { type: 'exited'; name: string; pid: number | undefined; code: number | null; signal: NodeJS.Signals | null; /** stop() asked for it */ expected: boolean; ranMs: number }
  | { type: 'restarting'; name: string; attempt: number; delayMs: number }
  | { type: 'gave_up'; name: string; crashes: number };

export interface SupervisorOptions<R extends ChildRun = SupervisedProcess> {
  onEvent?: (event: SupervisorEvent) => void;
  /** Start one run of a child (default: spawn a real process). */
  spawn?: (spec: ChildSpec, now: () => number) => R;
  /** Run lengths and restart delays (default: the system clock). */
  clock?: SupervisorClock;
}

/** One named child across its runs. */
export class SupervisedChild<R extends ChildRun = SupervisedProcess> {
  private run: R;
  private runs = 0;
  private stopped = false;
  private restartTimer: unknown;
  private readonly backoff: RestartBackoff | undefined;
  private readonly runListeners = new Set<(run: R) => void>();
  private readonly now: () => number;

  constructor(
    readonly spec: ChildSpec,
    private readonly emit: (event: SupervisorEvent) => void,
    private readonly spawnRun: (spec: ChildSpec, now: () => number) => R,
    private readonly clock: SupervisorClock,
  ) {
    this.now = () => clock.now();
    this.backoff = spec.restart ? new RestartBackoff(spec.restart) : undefined;
    this.run = this.spawn();
  }

  get name(): string {
    return this.spec.name;
  }

  /** The current (or last) run. */
  get current(): R {
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
  onRestart(listener: (run: R) => void): () => void {
    this.runListeners.add(listener);
    return () => this.runListeners.delete(listener);
  }

  /** Stop for good: cancel a pending restart, SIGTERM, SIGKILL after the grace period. */
  stop(graceMs?: number): Promise<ExitInfo> {
    this.stopped = true;
    this.cancelRestart();
    return this.run.stop(graceMs);
  }

  killNow(): void {
    this.stopped = true;
    this.cancelRestart();
    this.run.killNow();
  }

  private cancelRestart(): void {
    if (this.restartTimer !== undefined) this.clock.clearTimeout(this.restartTimer);
    this.restartTimer = undefined;
  }

  private spawn(): R {
    const run = this.spawnRun(this.spec, this.now);
    this.runs += 1;
    this.emit({ type: 'started', name: this.name, pid: run.pid, restarts: this.runs - 1 });
    void run.exited().then((info) => this.onExit(run, info));
    return run;
  }

  private onExit(run: R, info: ExitInfo): void {
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
    this.restartTimer = this.clock.setTimeout(() => {
      this.restartTimer = undefined;
      if (this.stopped) return;
      this.run = this.spawn();
      for (const listener of this.runListeners) listener(this.run);
    }, decision.delayMs);
  }
}

export class Supervisor<R extends ChildRun = SupervisedProcess> {
  private readonly byName = new Map<string, SupervisedChild<R>>();
  private readonly onEvent: (event: SupervisorEvent) => void;
  private readonly spawnRun: (spec: ChildSpec, now: () => number) => R;
  private readonly clock: SupervisorClock;

  constructor(options: SupervisorOptions<R> = {}) {
    this.onEvent = options.onEvent ?? (() => {});
    // Without a spawn seam R is its default, SupervisedProcess.
    this.spawnRun = options.spawn ?? ((spec, now) => new SupervisedProcess(spec, now) as unknown as R);
    this.clock = options.clock ?? SYSTEM_CLOCK;
  }

  /** Spawn a child now. Names are unique within a supervisor. */
  start(spec: ChildSpec): SupervisedChild<R> {
    if (this.byName.has(spec.name)) throw new Error(`supervisor: a child named '${spec.name}' already exists`);
    const child = new SupervisedChild(spec, (e) => this.onEvent(e), this.spawnRun, this.clock);
    this.byName.set(spec.name, child);
    return child;
  }

  child(name: string): SupervisedChild<R> | undefined {
    return this.byName.get(name);
  }

  children(): Array<SupervisedChild<R>> {
    return [...this.byName.values()];
  }

  /** Stop the named children (default all) at once; resolves when every one has exited. */
  async stop(names?: string[], graceMs?: number): Promise<void> {
    const targets = names === undefined ? this.children() : names.map((n) => this.byName.get(n)).filter((c): c is SupervisedChild<R> => c !== undefined);
    await Promise.all(targets.map((c) => c.stop(graceMs)));
  }

  /** SIGKILL everything now, synchronously. */
  killNow(): void {
    for (const c of this.byName.values()) c.killNow();
  }
}
