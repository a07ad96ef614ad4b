/**
 * `multi-turn`: chat sessions whose conversation grows turn by turn. Each turn sends the
 * whole history (optional system prompt, every earlier user message and the server's own
 * answers) plus a new user message, after a think time drawn around `thinkTimeMs`.
 * Prefix caching should make later turns cheap; that is what this workload measures.
 */
import { Rng, sampleLength } from '../rng.js';
import type { TokenSpace } from '../token-space.js';
import type { PromptMessage, SessionSpec, TurnSpec, Workload } from './workload.js';

export interface MultiTurnOptions {
  sessions: number;
  turns: number;
  /** New user tokens per turn. */
  islMean: number;
  islStd: number;
  oslMean: number;
  oslStd: number;
  /** Optional system prompt shared by every session (0 = none). */
  systemTokens: number;
  thinkTimeMs: number;
  seed: number;
}

export class MultiTurnWorkload implements Workload {
  readonly name = 'multi-turn';
  private produced = 0;
  private readonly root: Rng;
  private readonly system: number[] | undefined;

  constructor(
    private readonly options: MultiTurnOptions,
    private readonly tokens: TokenSpace,
  ) {
    this.root = new Rng(options.seed, 0x4d545552);
    this.system = options.systemTokens > 0 ? tokens.sample(options.systemTokens, this.root.fork(1)) : undefined;
  }

  get sessionCount(): number {
    return this.options.sessions;
  }

  get requestCount(): number {
    return this.options.sessions * this.options.turns;
  }

  nextSession(): SessionSpec | undefined {
    if (this.produced >= this.options.sessions) return undefined;
    const id = this.produced++;
    const o = this.options;
    // Per-session stream: a session's prompts do not depend on how sessions interleave.
    const rng = new Rng(o.seed, 0x10000 + id);
    const users: number[][] = [];
    const osls: number[] = [];
    for (let t = 0; t < o.turns; t++) {
      users.push(this.tokens.sample(sampleLength(rng, o.islMean, o.islStd), rng));
      osls.push(sampleLength(rng, o.oslMean, o.oslStd));
    }
    // Think time varies +/-50% so sessions do not move in lock step.
    const thinkTimeMs = o.thinkTimeMs * (0.5 + rng.next());
    const system = this.system;
    return {
      id,
      turns: o.turns,
      thinkTimeMs,
      turn(index: number, answers: readonly string[]): TurnSpec {
        const messages: PromptMessage[] = system ? [{ role: 'system', ids: system }] : [];
        let inputTokens = system?.length ?? 0;
        for (let t = 0; t <= index; t++) {
          const user = users[t] as number[];
          messages.push({ role: 'user', ids: user });
          inputTokens += user.length;
          if (t < index) {
            messages.push({ role: 'assistant', text: answers[t] ?? '' });
            inputTokens += osls[t] as number;
          }
        }
        return { messages, inputTokens, outputTokens: osls[index] as number };
      },
    };
  }

  describe(): Record<string, unknown> {
    const o = this.options;
    return {
      name: this.name,
      sessions: o.sessions,
      turns: o.turns,
      isl_mean: o.islMean,
      isl_std: o.islStd,
      osl_mean: o.oslMean,
      osl_std: o.oslStd,
      system_tokens: o.systemTokens,
      think_time_ms: o.thinkTimeMs,
    };
  }
}
