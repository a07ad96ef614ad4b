/**
 * One run of one child process: spawn it, route its output lines to its sinks, wait for a
 * start-up record, stop it (SIGTERM, drain up to a grace period, then SIGKILL) and report how
 * it exited. Every live child is SIGKILLed synchronously when this process exits, so nothing
 * outlives a crashed parent (a test run, a bench, `runtime up`).
 *
 * Restarts are not this class's business: `Supervisor` spawns a new run.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { ChildExitedError, ChildStartTimeoutError } from './errors.js';
import { FileLog, MemoryLog, PrefixedLog, type LogSink } from './log-sink.js';
import { parentLinkEnv } from './parent-link.js';

/** After 'exit', how long to wait for the pipes to close (a grandchild may hold them). */
const PIPE_CLOSE_GRACE_MS = 1000;
export const DEFAULT_STOP_GRACE_MS = 10_000;

export interface LogRouting {
  /** Append every line to this file. */
  file?: string;
  /** Lines kept in memory for `output()`, for waiting on lines already printed, and for error messages (default 1000). */
  memoryLines?: number;
  /** Write `[name] line` to the parent's stderr. */
  stderrPrefix?: boolean;
  /**
   * With `stderrPrefix`: leave out JSON log lines below this pino level (30 info, 40 warn, ...).
   * The child itself still logs its start-up records, which `waitFor` needs.
   */
  stderrMinLevel?: number;
  /** Called with every line (after the sinks). */
  onLine?: (line: string) => void;
}

export interface ProcessSpec {
  /** Stable name: log prefix, file names, error messages (`frontend`, `agg-0`). */
  name: string;
  /** Executable; default this Node binary. */
  command?: string;
  args: string[];
  /** Merged over this process's environment. */
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** Own process group: a terminal's Ctrl-C then reaches only the parent, which stops each child once. */
  detached?: boolean;
  log?: LogRouting;
  /** SIGTERM → SIGKILL grace of `stop()` (default 10 s). */
  stopGraceMs?: number;
}

export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
}

type Waiter = { match: (line: string) => unknown; resolve: (value: unknown) => void; reject: (err: Error) => void; what: string };

const live = new Set<SupervisedProcess>();
let exitHookInstalled = false;

/** SIGKILL every live child now (synchronous): for a parent's 'exit' or fatal-signal handler. */
export function killAllNow(): void {
  for (const p of live) p.killNow();
}

export class SupervisedProcess {
  readonly name: string;
  readonly startedAtMs: number;
  readonly logFile: string | undefined;
  /** Its lines already went to the parent's stderr: errors point there instead of repeating them. */
  private readonly echoed: boolean;
  private readonly proc: ChildProcess;
  private readonly memory: MemoryLog;
  private readonly sinks: LogSink[] = [];
  private readonly waiters = new Set<Waiter>();
  private readonly onLineHook: ((line: string) => void) | undefined;
  private exit: ExitInfo | undefined;
  private closed = false;
  private readonly closedPromise: Promise<ExitInfo>;
  private stopping: Promise<ExitInfo> | undefined;
  private readonly stopGraceMs: number;

  constructor(spec: ProcessSpec, now: () => number = Date.now) {
    if (!exitHookInstalled) {
      exitHookInstalled = true;
      process.once('exit', killAllNow);
    }
    this.name = spec.name;
    this.startedAtMs = now();
    this.stopGraceMs = spec.stopGraceMs ?? DEFAULT_STOP_GRACE_MS;
    this.memory = new MemoryLog(spec.log?.memoryLines ?? 1000);
    this.sinks.push(this.memory);
    this.logFile = spec.log?.file;
    if (spec.log?.file) this.sinks.push(new FileLog(spec.log.file));
    if (spec.log?.stderrPrefix) this.sinks.push(new PrefixedLog(spec.name, process.stderr, spec.log.stderrMinLevel));
    this.onLineHook = spec.log?.onLine;
    this.echoed = spec.log?.stderrPrefix ?? false;
    this.proc = spawn(spec.command ?? process.execPath, spec.args, {
      cwd: spec.cwd,
      detached: spec.detached ?? false,
      // fd 3: the parent link (parent-link.ts); it closes when this process dies, even by SIGKILL.
      stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
      env: { ...process.env, ...spec.env, ...parentLinkEnv() },
    });
    live.add(this);
    for (const stream of [this.proc.stdout, this.proc.stderr]) {
      if (stream) createInterface({ input: stream, crlfDelay: Infinity }).on('line', (line) => this.onLine(line));
    }
    // A spawn failure (ENOENT) comes as 'error' with no 'exit'.
    this.proc.once('error', (err) => {
      this.onLine(`spawn failed: ${err.message}`);
      this.onExit(null, null);
    });
    this.proc.once('exit', (code, signal) => this.onExit(code, signal));
    this.closedPromise = new Promise((resolve) => {
      const finish = () => {
        if (this.closed) return;
        this.closed = true;
        const info = this.exit ?? { code: null, signal: null };
        for (const w of this.waiters) w.reject(new ChildExitedError(this.name, info.code, info.signal, w.what, this.logHint()));
        this.waiters.clear();
        void Promise.all(this.sinks.map((s) => s.close())).then(() => resolve(info));
      };
      this.proc.once('close', finish);
      this.proc.once('exit', () => setTimeout(finish, PIPE_CLOSE_GRACE_MS).unref());
      this.proc.once('error', () => setTimeout(finish, 0));
    });
  }

  get pid(): number | undefined {
    return this.proc.pid;
  }

  /** True until the process has exited. */
  get running(): boolean {
    return this.exit === undefined;
  }

  get exitInfo(): ExitInfo | undefined {
    return this.exit;
  }

  /** The lines kept in memory, newline-terminated. */
  output(): string {
    return this.memory.text();
  }

  /** Resolves once the process has exited and its output is flushed to the sinks. */
  exited(): Promise<ExitInfo> {
    return this.closedPromise;
  }

  /**
   * The first non-undefined `match` of a line this run printed (lines still in memory count),
   * or a typed error when the process exits first or `timeoutMs` passes. `what` names the
   * record in errors.
   */
  waitFor<T>(match: (line: string) => T | undefined, options: { timeoutMs: number; what: string }): Promise<T> {
    for (const line of this.memory.lines()) {
      const value = match(line);
      if (value !== undefined) return Promise.resolve(value);
    }
    if (this.closed) {
      const info = this.exit ?? { code: null, signal: null };
      return Promise.reject(new ChildExitedError(this.name, info.code, info.signal, options.what, this.logHint()));
    }
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters.delete(waiter);
        reject(new ChildStartTimeoutError(this.name, options.what, options.timeoutMs, this.logHint()));
      }, options.timeoutMs);
      const waiter: Waiter = {
        what: options.what,
        match,
        resolve: (v) => {
          clearTimeout(timer);
          resolve(v as T);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      };
      this.waiters.add(waiter);
    });
  }

  /** The first line matching `pattern` (see `waitFor`). */
  waitForLine(pattern: RegExp, timeoutMs = 30_000): Promise<string> {
    return this.waitFor((line) => (pattern.test(line) ? line : undefined), { timeoutMs, what: String(pattern) });
  }

  /** Send a signal now (no-op once exited). */
  kill(signal: NodeJS.Signals = 'SIGTERM'): void {
    if (this.running) this.proc.kill(signal);
  }

  /** SIGTERM (graceful drain), SIGKILL after `graceMs`; resolves with how it exited. Idempotent. */
  stop(graceMs = this.stopGraceMs): Promise<ExitInfo> {
    if (this.stopping) return this.stopping;
    if (!this.running) return (this.stopping = this.closedPromise);
    this.proc.kill('SIGTERM');
    const timer = setTimeout(() => this.kill('SIGKILL'), graceMs);
    this.stopping = this.closedPromise.finally(() => clearTimeout(timer));
    return this.stopping;
  }

  /** Last resort, synchronous, no drain. */
  killNow(): void {
    if (this.running) this.proc.kill('SIGKILL');
  }

  /** Where to look when this child fails: its log file, else its last lines. */
  logHint(): string {
    if (this.logFile) return `see its log ${this.logFile}`;
    if (this.echoed) return `see its output above ([${this.name}] lines)`;
    const tail = this.memory.lines().slice(-40).join('\n');
    return tail === '' ? 'it printed nothing' : `its last output:\n${tail}`;
  }

  private onLine(line: string): void {
    // Lines a grandchild writes after we gave up on the pipes go to memory only: the other sinks are closed.
    if (this.closed) return this.memory.write(line);
    for (const sink of this.sinks) sink.write(line);
    this.onLineHook?.(line);
    if (this.waiters.size === 0) return;
    for (const w of [...this.waiters]) {
      const value = w.match(line);
      if (value !== undefined) {
        this.waiters.delete(w);
        w.resolve(value);
      }
    }
  }

  private onExit(code: number | null, signal: NodeJS.Signals | null): void {
    if (this.exit) return;
    this.exit = { code, signal };
    live.delete(this);
  }
}
