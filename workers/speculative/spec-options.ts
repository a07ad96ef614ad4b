/**
 * The worker's speculative-decoding flags and their defaults (docs/speculative.md):
 *
 *   --speculative off | ngram | suffix     default off
 *   --num-speculative-tokens N             most drafts a sequence verifies per step, 1..32;
 *                                          default 5 for ngram (vLLM's examples), 16 for suffix
 *                                          (suffix decoding drafts an adaptive length up to it)
 *   --prompt-lookup-min / --prompt-lookup-max   ngram's n range, default 2..5 (vLLM names)
 *   --spec-acceptance P                    mocker only: the chance each draft is accepted, default 0.7
 */
import type { LoadSpeculativeOptions } from '../../native/index.js';

export const SPECULATIVE_METHODS = ['off', 'ngram', 'suffix'] as const;
export type SpeculativeMethod = (typeof SPECULATIVE_METHODS)[number];

export const MAX_SPECULATIVE_TOKENS = 32;
export const DEFAULT_SPECULATIVE_TOKENS: Record<Exclude<SpeculativeMethod, 'off'>, number> = { ngram: 5, suffix: 16 };
export const DEFAULT_PROMPT_LOOKUP = { min: 2, max: 5 } as const;
export const DEFAULT_MOCKER_SPEC_ACCEPTANCE = 0.7;

/** What a worker speculates with; undefined when --speculative off. */
export interface SpeculativeOptions extends LoadSpeculativeOptions {
  /** Mocker only: each draft's chance of being accepted. */
  mockerAcceptance: number;
}

export interface SpeculativeFlags {
  speculative: SpeculativeMethod;
  numSpeculativeTokens?: number;
  promptLookupMin?: number;
  promptLookupMax?: number;
  specAcceptance?: number;
}

/**
 * The flags as options, with defaults. Throws a one-line message (the CLI's exit 2) for
 * combinations the parsers cannot see alone.
 */
export function speculativeOptions(flags: SpeculativeFlags): SpeculativeOptions | undefined {
  if (flags.speculative === 'off') return undefined;
  const min = flags.promptLookupMin ?? Math.min(DEFAULT_PROMPT_LOOKUP.min, flags.promptLookupMax ?? DEFAULT_PROMPT_LOOKUP.min);
  const max = flags.promptLookupMax ?? Math.max(DEFAULT_PROMPT_LOOKUP.max, min);
  if (min > max) throw new RangeError(`--prompt-lookup-min (${min}) must not exceed --prompt-lookup-max (${max})`);
  return {
    method: flags.speculative,
    numSpeculativeTokens: flags.numSpeculativeTokens ?? DEFAULT_SPECULATIVE_TOKENS[flags.speculative],
    promptLookupMin: min,
    promptLookupMax: max,
    mockerAcceptance: flags.specAcceptance ?? DEFAULT_MOCKER_SPEC_ACCEPTANCE,
  };
}

/** The native engine's load options for these (the mocker's field left out). */
export function nativeSpeculative(o: SpeculativeOptions): LoadSpeculativeOptions {
  const { mockerAcceptance: _unused, ...native } = o;
  return native;
}
