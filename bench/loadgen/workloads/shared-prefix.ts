/**
 * `shared-prefix`: SGLang's generated-shared-prefix shape. `groups` system prompts, each
 * followed by `promptsPerGroup` distinct questions; requests are shuffled across groups so a
 * cache-aware router has something to find. Past groups x promptsPerGroup requests (a longer
 * --requests or a --duration run) new questions keep coming for the same system prompts.
 */
import { Rng } from '../rng.js';
import type { TokenSpace } from '../token-space.js';
import { singleTurn, type SessionSpec, type Workload } from './workload.js';

export interface SharedPrefixOptions {
  groups: number;
  promptsPerGroup: number;
  systemTokens: number;
  questionTokens: number;
  outputTokens: number;
  /** Requests; undefined with a duration = unbounded; default groups x promptsPerGroup. */
  requests: number | undefined;
  seed: number;
}

export class SharedPrefixWorkload implements Workload {
  readonly name = 'shared-prefix';
  private readonly systemPrompts: number[][] = [];
  private order: number[] = [];
  private cursor = 0;
  private produced = 0;
  private readonly questions: Rng;
  private readonly shuffler: Rng;

  constructor(
    private readonly options: SharedPrefixOptions,
    private readonly tokens: TokenSpace,
  ) {
    const root = new Rng(options.seed, 0x53484152);
    const systemRng = root.fork(1);
    this.questions = root.fork(2);
    this.shuffler = root.fork(3);
    for (let g = 0; g < options.groups; g++) this.systemPrompts.push(tokens.sample(options.systemTokens, systemRng));
  }

  get sessionCount(): number | undefined {
    return this.options.requests;
  }

  get requestCount(): number | undefined {
    return this.options.requests;
  }

  /** Group of each request in a fresh shuffled round of groups x promptsPerGroup. */
  private refill(): void {
    const round: number[] = [];
    for (let g = 0; g < this.options.groups; g++) for (let p = 0; p < this.options.promptsPerGroup; p++) round.push(g);
    this.order = this.shuffler.shuffle(round);
    this.cursor = 0;
  }

  nextSession(): SessionSpec | undefined {
    if (this.options.requests !== undefined && this.produced >= this.options.requests) return undefined;
    if (this.cursor >= this.order.length) this.refill();
    const group = this.order[this.cursor++] as number;
    const question = this.tokens.sample(this.options.questionTokens, this.questions);
    const o = this.options;
    return singleTurn(this.produced++, {
      messages: [
        { role: 'system', ids: this.systemPrompts[group] as number[] },
        { role: 'user', ids: question },
      ],
      inputTokens: o.systemTokens + o.questionTokens,
      outputTokens: o.outputTokens,
    });
  }

  describe(): Record<string, unknown> {
    const o = this.options;
    return {
      name: this.name,
      requests: o.requests ?? null,
      groups: o.groups,
      prompts_per_group: o.promptsPerGroup,
      system_tokens: o.systemTokens,
      question_tokens: o.questionTokens,
      output_tokens: o.outputTokens,
    };
  }
}
