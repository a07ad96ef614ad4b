/**
 * The per-request disaggregation decision, pure: given the pool sizes, the prompt and what the
 * chosen decode/agg worker already caches, run the prompt on a prefill worker, run the whole
 * request aggregated, or refuse it (`--enforce-disagg` with no prefill pool). No I/O, no clock.
 */

export interface DisaggPolicyConfig {
  /** `--disagg-min-prefill-tokens`: uncached prompt tokens below this run aggregated. */
  minPrefillTokens: number;
  /** `--enforce-disagg`: with no prefill pool answer 503 instead of running aggregated. */
  enforce: boolean;
}

export const DEFAULT_DISAGG_POLICY: DisaggPolicyConfig = { minPrefillTokens: 512, enforce: false };

export interface DisaggInputs {
  promptTokens: number;
  /** Leading prompt tokens the chosen decode/agg worker already holds (0 when unknown). */
  cachedTokens: number;
  /** Live prefill workers for the model (after health filtering). */
  prefillWorkers: number;
  /** Live decode-role workers for the model: only they can pull KV from a prefill worker. */
  decodeWorkers: number;
}

export type DisaggReason = 'no_prefill_workers' | 'no_decode_workers' | 'short_prompt';

export type DisaggDecision =
  | { kind: 'disagg'; uncachedTokens: number }
  | { kind: 'agg'; reason: DisaggReason; uncachedTokens: number }
  | { kind: 'reject'; reason: 'no_prefill_workers' | 'no_decode_workers' };

/** The part of the prompt a prefill would have to compute. */
export function uncachedTokens(promptTokens: number, cachedTokens: number): number {
  return Math.max(0, promptTokens - Math.max(0, Math.min(cachedTokens, promptTokens)));
}

/**
 * Worked example (threshold 512): a 2000-token prompt whose first 1600 tokens the decode worker
 * caches leaves 400 uncached → aggregated ('short_prompt'); with 1400 cached, 600 → disagg.
 */
export function decideDisagg(inputs: DisaggInputs, config: DisaggPolicyConfig): DisaggDecision {
  const uncached = uncachedTokens(inputs.promptTokens, inputs.cachedTokens);
  // A short prompt never needs a prefill worker, so --enforce-disagg does not refuse it.
  if (uncached < config.minPrefillTokens) return { kind: 'agg', reason: 'short_prompt', uncachedTokens: uncached };
  if (inputs.prefillWorkers === 0) {
    return config.enforce ? { kind: 'reject', reason: 'no_prefill_workers' } : { kind: 'agg', reason: 'no_prefill_workers', uncachedTokens: uncached };
  }
  if (inputs.decodeWorkers === 0) {
    return config.enforce ? { kind: 'reject', reason: 'no_decode_workers' } : { kind: 'agg', reason: 'no_decode_workers', uncachedTokens: uncached };
  }
  return { kind: 'disagg', uncachedTokens: uncached };
}
