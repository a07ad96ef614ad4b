/**
 * `random`: independent prompts whose input and output lengths are drawn from
 * Normal(mean, std), with random token content so requests share no prefix.
 */
import { Rng, sampleLength } from '../rng.js';
import type { TokenSpace } from '../token-space.js';
import { singleTurn, type SessionSpec, type Workload } from './workload.js';

export interface RandomWorkloadOptions {
  /** Requests; undefined = unbounded (the run is bounded by duration). */
  requests: number | undefined;
  islMean: number;
  islStd: number;
  oslMean: number;
  oslStd: number;
  seed: number;
}

export class RandomWorkload implements Workload {
  readonly name = 'random';
  private produced = 0;
  private readonly lengths: Rng;
  private readonly content: Rng;

  constructor(
    private readonly options: RandomWorkloadOptions,
    private readonly tokens: TokenSpace,
  ) {
    const root = new Rng(options.seed, 0x52414e44);
    this.lengths = root.fork(1);
    this.content = root.fork(2);
  }

  get sessionCount(): number | undefined {
    return this.options.requests;
  }

  get requestCount(): number | undefined {
    return this.options.requests;
  }

  nextSession(): SessionSpec | undefined {
    if (this.options.requests !== undefined && this.produced >= this.options.requests) return undefined;
    const isl = sampleLength(this.lengths, this.options.islMean, this.options.islStd);
    const osl = sampleLength(this.lengths, this.options.oslMean, this.options.oslStd);
    const ids = this.tokens.sample(isl, this.content);
    return singleTurn(this.produced++, { messages: [{ role: 'user', ids }], inputTokens: isl, outputTokens: osl });
  }

  describe(): Record<string, unknown> {
    const o = this.options;
    return { name: this.name, requests: o.requests ?? null, isl_mean: o.islMean, isl_std: o.islStd, osl_mean: o.oslMean, osl_std: o.oslStd };
  }
}
