/**
 * A compile's budget: wall time and memory, per request. The compile loops (automaton
 * construction, token classification) call `tick()` per unit of work and `charge(bytes)` for
 * what they keep; past either limit the compile stops with a GrammarError (HTTP 400) that names
 * the budget, and a set cancel flag (the client went away) stops it with CancelledError.
 *
 * Memory is counted (STATE_BYTES per automaton state, plus the bytes of every token class the
 * compile computes) and, where a `memoryProbe` is given (a compile thread: its isolate's heap
 * plus external memory), also measured at every check against the probe's value at the start:
 * counting alone misses the transient lists and stack tables, ~10x of what is kept.
 * The cancel flag is an Int32Array, shared with the thread that compiles, so a thread busy in
 * a loop still sees it.
 */
import { CancelledError } from '../runtime/errors.js';
import { GrammarError } from './contract.js';

export interface CompileLimits {
  /** Wall-clock milliseconds one compile may take. */
  timeoutMs: number;
  /** Bytes one compile may hold (automaton states and token classes, counted). */
  memoryBytes: number;
}

export const DEFAULT_COMPILE_TIMEOUT_MS = 10_000;
export const DEFAULT_COMPILE_MEMORY_MB = 512;
export const DEFAULT_COMPILE_LIMITS: CompileLimits = { timeoutMs: DEFAULT_COMPILE_TIMEOUT_MS, memoryBytes: DEFAULT_COMPILE_MEMORY_MB * 1024 * 1024 };

/** What one automaton state is counted as (typed-array rows plus the builder's edge lists). */
export const STATE_BYTES = 128;

/** Work units between clock reads: a tick is a state built or a node classified. */
const TICKS_PER_CHECK = 64;

export class CompileBudget {
  private readonly deadline: number;
  private ticks = 0;
  /** Bytes charged so far. */
  used = 0;

  private readonly base: number;

  constructor(
    readonly limits: CompileLimits,
    private readonly cancelFlag?: Int32Array,
    private readonly memoryProbe?: () => number,
  ) {
    this.deadline = performance.now() + limits.timeoutMs;
    this.base = memoryProbe?.() ?? 0;
  }

  /** One unit of work done; every TICKS_PER_CHECK units the clock and the cancel flag are read. */
  tick(): void {
    if (++this.ticks % TICKS_PER_CHECK === 0) this.check();
  }

  check(): void {
    if (this.cancelFlag !== undefined && Atomics.load(this.cancelFlag, 0) !== 0) throw new CancelledError('grammar compile cancelled: the request went away');
    if (performance.now() > this.deadline) throw compileTimeExceeded(this.limits.timeoutMs);
    if (this.memoryProbe !== undefined) {
      const held = this.memoryProbe() - this.base;
      if (held > this.used) this.used = held;
      if (this.used > this.limits.memoryBytes) throw compileMemoryExceeded(this.limits.memoryBytes);
    }
  }

  charge(bytes: number): void {
    this.used += bytes;
    if (this.used > this.limits.memoryBytes) throw compileMemoryExceeded(this.limits.memoryBytes);
  }
}

export function compileTimeExceeded(timeoutMs: number): GrammarError {
  return new GrammarError('budget_exceeded', `the output grammar did not compile within its time budget of ${timeoutMs} ms (--grammar-compile-timeout-ms): use a smaller schema, regex, choice list or grammar`);
}

export function compileMemoryExceeded(memoryBytes: number): GrammarError {
  const mb = Math.round((memoryBytes / (1024 * 1024)) * 10) / 10;
  return new GrammarError('budget_exceeded', `the output grammar needs more than its memory budget of ${mb} MB (--grammar-compile-memory-mb): use a smaller schema, regex, choice list or grammar`);
}

/** Flag values: `--grammar-compile-timeout-ms` and `--grammar-compile-memory-mb` → limits. */
export function compileLimits(timeoutMs: number | undefined, memoryMb: number | undefined): CompileLimits {
  return {
    timeoutMs: timeoutMs ?? DEFAULT_COMPILE_TIMEOUT_MS,
    memoryBytes: Math.floor((memoryMb ?? DEFAULT_COMPILE_MEMORY_MB) * 1024 * 1024),
  };
}
