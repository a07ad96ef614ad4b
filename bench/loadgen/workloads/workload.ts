/**
 * The workload contract. Everything a run sends is a session of one or more turns: random,
 * shared-prefix and trace requests are one-turn sessions, multi-turn sessions grow their
 * conversation from the answers of earlier turns. The runner decides when sessions start
 * (closed loop, Poisson, or the trace's own timestamps); the workload decides what they say.
 */

export type Role = 'system' | 'user' | 'assistant';

/** A prompt message: token ids chosen by the workload, or text (an assistant's answer). */
export interface PromptMessage {
  role: Role;
  ids?: number[];
  text?: string;
}

export interface TurnSpec {
  messages: PromptMessage[];
  /** Prompt tokens the workload asked for (the ids it generated, plus earlier answers). */
  inputTokens: number;
  /** Output tokens requested (`max_tokens`, with `ignore_eos`). */
  outputTokens: number;
}

export interface SessionSpec {
  readonly id: number;
  /** Offset from the start of the run at which this session must start (trace replay). */
  readonly arrivalMs?: number;
  readonly turns: number;
  /** Pause between receiving a turn's answer and sending the next turn. */
  readonly thinkTimeMs: number;
  /** Turn `index`, given the assistant answers of the turns before it. */
  turn(index: number, answers: readonly string[]): TurnSpec;
}

export interface Workload {
  readonly name: WorkloadName;
  /** Sessions this workload will produce; undefined when unbounded (runs until --duration). */
  readonly sessionCount: number | undefined;
  /** Requests (turns) this workload will produce when finite. */
  readonly requestCount: number | undefined;
  /** The next session, or undefined when the workload is exhausted. */
  nextSession(): SessionSpec | undefined;
  /** Parameters for the report's `config.workload`. */
  describe(): Record<string, unknown>;
}

export const WORKLOAD_NAMES = ['random', 'shared-prefix', 'multi-turn', 'trace'] as const;
export type WorkloadName = (typeof WORKLOAD_NAMES)[number];

/** A one-turn session over fixed messages. */
export function singleTurn(id: number, turn: TurnSpec, arrivalMs?: number): SessionSpec {
  return {
    id,
    arrivalMs,
    turns: 1,
    thinkTimeMs: 0,
    turn: () => turn,
  };
}
