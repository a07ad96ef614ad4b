/**
 * Picking a worker from a cost table. Pure: no booking, no state, randomness only from the
 * `Rng` passed in. Callers filter out overloaded workers first (see overload.ts).
 *
 *   temperature = 0  lowest cost wins; exact ties are broken uniformly at random
 *   temperature > 0  costs are normalized to [0, 1] ((c − min) / (max − min)) and a worker is
 *                    drawn with probability ∝ exp(−normalized / temperature); low temperature
 *                    approaches argmin, high temperature approaches uniform
 */
import type { Rng } from '../runtime/random.js';

/** Relative tolerance under which two costs count as tied (float noise from the weights). */
const TIE_EPSILON = 1e-9;

/** Index of the chosen cost; `costs` must be non-empty. */
export function selectIndex(costs: readonly number[], temperature: number, rng: Rng): number {
  if (costs.length === 1) return 0;
  return temperature > 0 ? softmaxIndex(costs, temperature, rng) : lowestCostIndex(costs, rng);
}

export function lowestCostIndex(costs: readonly number[], rng: Rng): number {
  let min = Infinity;
  for (const c of costs) if (c < min) min = c;
  const tol = TIE_EPSILON * Math.max(1, Math.abs(min));
  let ties = 0;
  for (const c of costs) if (c - min <= tol) ties++;
  let pick = Math.floor(rng.next() * ties);
  for (let i = 0; i < costs.length; i++) {
    if (costs[i]! - min <= tol && pick-- === 0) return i;
  }
  return costs.length - 1; // unreachable: pick < ties
}

/** Selection probabilities at `temperature` (exported so tests and logs can show them). */
export function softmaxProbabilities(costs: readonly number[], temperature: number): number[] {
  let min = Infinity;
  let max = -Infinity;
  for (const c of costs) {
    if (c < min) min = c;
    if (c > max) max = c;
  }
  const range = max - min;
  if (range <= 0) return costs.map(() => 1 / costs.length);
  // exp(−x/T) with x ∈ [0, 1]: the best worker's weight is exp(0) = 1, so no overflow.
  const weights = costs.map((c) => Math.exp(-((c - min) / range) / temperature));
  let sum = 0;
  for (const w of weights) sum += w;
  return weights.map((w) => w / sum);
}

export function softmaxIndex(costs: readonly number[], temperature: number, rng: Rng): number {
  const p = softmaxProbabilities(costs, temperature);
  let r = rng.next();
  for (let i = 0; i < p.length; i++) {
    r -= p[i]!;
    if (r < 0) return i;
  }
  return p.length - 1;
}
