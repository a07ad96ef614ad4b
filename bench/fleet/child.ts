/**
 * One `runtime` child process of a bench fleet. Its stdout/stderr go to a log file (a fleet
 * under load logs far too much to interleave on a console), and each line is also offered to
 * waiters, so the fleet learns ports and instance ids from the process's own start-up lines
 * instead of guessing free ports (other benches and tests run beside us).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, type WriteStream } from 'node:fs';
import { createInterface } from 'node:readline';

export interface FleetChildOptions {
  /** Short name used in log file names and errors, e.g. `frontend`, `agg-0`. */
  label: string;
  /** `node` arguments: the launcher script and the `runtime` subcommand with its flags. */
  args: string[];
  logFile: string;
  env?: NodeJS.ProcessEnv;
}

type LineWaiter = { match: (line: string) => unknown; resolve: (value: unknown) => void; reject: (err: Error) => void };

export class FleetChild {
  readonly label: string;
  readonly logFile: string;
  private readonly proc: ChildProcess;
  private readonly log: WriteStream;
  private readonly waiters = new Set<LineWaiter>();
  private exited: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  private readonly exitPromise: Promise<void>;

  constructor(options: FleetChildOptions) {
    this.label = options.label;
    this.logFile = options.logFile;
    this.log = createWriteStream(options.logFile);
    this.proc = spawn(process.execPath, options.args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, TANDEM_LOG_FORMAT: 'json', ...options.env },
    });
    for (const stream of [this.proc.stdout, this.proc.stderr]) {
      if (!stream) continue;
      stream.pipe(this.log, { end: false });
      createInterface({ input: stream }).on('line', (line) => this.onLine(line));
    }
    this.exitPromise = new Promise((resolve) => {
      this.proc.once('exit', (code, signal) => {
        this.exited = { code, signal };
        const err = new Error(`${this.label} exited (code ${code}, signal ${signal}) during start-up; see ${this.logFile}`);
        for (const w of this.waiters) w.reject(err);
        this.waiters.clear();
        resolve();
      });
    });
  }

  get pid(): number | undefined {
    return this.proc.pid;
  }

  get running(): boolean {
    return this.exited === undefined;
  }

  /** Resolve with the first non-undefined result of `match` on a later output line. */
  waitForLine<T>(match: (line: string) => T | undefined, timeoutMs: number, what: string): Promise<T> {
    if (this.exited) return Promise.reject(new Error(`${this.label} has exited; see ${this.logFile}`));
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters.delete(waiter);
        reject(new Error(`${this.label}: no '${what}' within ${timeoutMs} ms; see ${this.logFile}`));
      }, timeoutMs);
      const waiter: LineWaiter = {
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

  /** SIGTERM (graceful drain), then SIGKILL after `graceMs`. */
  async stop(graceMs = 10_000): Promise<void> {
    if (this.exited) return this.closeLog();
    this.proc.kill('SIGTERM');
    const timer = setTimeout(() => this.proc.kill('SIGKILL'), graceMs);
    await this.exitPromise;
    clearTimeout(timer);
    await this.closeLog();
  }

  /** Last resort from a process 'exit' handler: synchronous, no drain. */
  killNow(): void {
    if (!this.exited) this.proc.kill('SIGKILL');
  }

  private onLine(line: string): void {
    if (this.waiters.size === 0) return;
    for (const w of [...this.waiters]) {
      const value = w.match(line);
      if (value !== undefined) {
        this.waiters.delete(w);
        w.resolve(value);
      }
    }
  }

  private closeLog(): Promise<void> {
    return new Promise((resolve) => this.log.end(resolve));
  }
}

/** Parse a pino JSON line; undefined for anything else (pretty output, stack traces). */
export function jsonLine(line: string): Record<string, unknown> | undefined {
  if (!line.startsWith('{')) return undefined;
  try {
    return JSON.parse(line) as Record<string, unknown>;
  } catch {
    return undefined;
  }
}
