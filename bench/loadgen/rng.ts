/**
 * Seeded randomness for workloads and arrivals. Every random choice in a run flows from
 * `--seed`, so two runs with the same flags send the same prompts at the same offsets. The
 * generator is the repository's one (runtime/random.ts); streams are forked by a salt so that,
 * for example, adding warm-up requests does not shift the prompts of the measured requests.
 */
import { SeededRandom } from '../../runtime/random.js';

export { SeededRandom as Rng };
type Rng = SeededRandom;

/** A length drawn from Normal(mean, std), rounded and clamped to [min, max]. */
export function sampleLength(rng: Rng, mean: number, std: number, min = 1, max = Number.MAX_SAFE_INTEGER): number {
  const v = Math.round(rng.normal(mean, std));
  return Math.min(max, Math.max(min, v));
}
