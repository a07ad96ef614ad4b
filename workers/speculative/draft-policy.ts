/**
 * How many drafts each decoding sequence verifies in the next step (pure: numbers in, lengths
 * out). The step's expected output is one token per decoding sequence plus, for each draft it
 * verifies, the probability that this draft and every one before it are accepted; its cost is
 * the step time at its token count. The plan that maximizes expected tokens per millisecond
 * wins, and only when it beats plain decoding by `margin`: so at low acceptance, or where an
 * extra token costs as much as it returns (large batches), speculation is shortened or off.
 *
 * Because a sequence's gains fall with depth (each is a product of probabilities), the best
 * plan of X extra tokens takes the X largest gains over all sequences; it remains to pick X,
 * which is one pass over the sorted gains with the cost at each X.
 *
 * Worked example (the test's): step cost T(t) = 10 + 0.5 (t - 1) ms, every draft accepted with
 * probability 0.8 (gains 0.8, 0.64, 0.512, 0.4096 by depth).
 *   batch 1: plain 1 token / 10 ms = 0.1; four drafts 3.3616 / 12 ms = 0.280 -> k = 4.
 *   batch 64: plain 64 / 41.5 ms = 1.542; one draft each 115.2 / 73.5 = 1.567 (+1.6%), a second
 *   layer only lowers it -> k = 1 without a margin, and with margin 0.05 nothing: off.
 */

export interface DraftOffer {
  /** Drafts available to this sequence (already capped by its token budget). */
  numDrafts: number;
  /** P(draft i is accepted | drafts 0..i-1 were), for i < numDrafts. */
  accept: ArrayLike<number>;
}

export interface DraftPlanInput {
  offers: readonly DraftOffer[];
  /** Tokens the step computes without any drafts (its decodes plus prefill chunk tokens). */
  baseTokens: number;
  /** Decoding sequences in the step: each returns one token without drafts. */
  numDecodes: number;
  /** Milliseconds of a step that computes `tokens` tokens. */
  stepMs(tokens: number): number;
  /** Required relative gain in tokens per millisecond over plain decoding (0.05 = 5 %). */
  margin: number;
}

export interface DraftPlan {
  /** Drafts to verify, per offer. */
  lengths: Int32Array;
  /** Expected tokens returned and the step's predicted milliseconds, with these lengths. */
  expectedTokens: number;
  expectedMs: number;
  /** The same for plain decoding (no drafts). */
  plainTokens: number;
  plainMs: number;
}

export function planDrafts(input: DraftPlanInput): DraftPlan {
  const { offers, baseTokens, numDecodes, margin } = input;
  const lengths = new Int32Array(offers.length);
  const plainMs = input.stepMs(baseTokens);
  const plain: DraftPlan = { lengths, expectedTokens: numDecodes, expectedMs: plainMs, plainTokens: numDecodes, plainMs };
  // Every (offer, depth) with its gain: the running product of acceptance probabilities.
  let n = 0;
  for (const o of offers) n += o.numDrafts;
  if (n === 0 || numDecodes <= 0 || !(plainMs > 0)) return plain;
  const gains = new Float64Array(n);
  const owner = new Int32Array(n);
  let at = 0;
  for (let s = 0; s < offers.length; s++) {
    const o = offers[s]!;
    let running = 1;
    for (let i = 0; i < o.numDrafts; i++) {
      running *= clamp01(o.accept[i] ?? 0);
      gains[at] = running;
      owner[at++] = s;
    }
  }
  // Largest gains first; a sequence's own gains never rise with depth, so its drafts stay in order.
  const order = Array.from({ length: n }, (_, i) => i).sort((a, b) => gains[b]! - gains[a]! || a - b);
  let bestX = 0;
  let bestRate = numDecodes / plainMs;
  let bestMs = plainMs;
  let tokens = numDecodes;
  for (let x = 1; x <= n; x++) {
    tokens += gains[order[x - 1]!]!;
    const ms = input.stepMs(baseTokens + x);
    const rate = tokens / ms;
    if (rate > bestRate) {
      bestRate = rate;
      bestX = x;
      bestMs = ms;
    }
  }
  if (bestX === 0 || bestRate < (numDecodes / plainMs) * (1 + margin)) return plain;
  let expected = numDecodes;
  for (let x = 0; x < bestX; x++) {
    const i = order[x]!;
    lengths[owner[i]!]!++;
    expected += gains[i]!;
  }
  return { lengths, expectedTokens: expected, expectedMs: bestMs, plainTokens: numDecodes, plainMs };
}

/**
 * Whether drafts could pay at all in a step of `numDecodes` sequences: every one verifying
 * `maxDrafts` drafts that are all accepted must beat plain decoding by `margin`. When not even
 * that pays (a large batch), asking the drafter for proposals is wasted time.
 */
export function draftsCanPay(numDecodes: number, baseTokens: number, maxDrafts: number, stepMs: (tokens: number) => number, margin: number): boolean {
  if (numDecodes <= 0 || maxDrafts <= 0) return false;
  const plain = numDecodes / stepMs(baseTokens);
  for (let k = 1; k <= maxDrafts; k++) {
    if ((numDecodes * (1 + k)) / stepMs(baseTokens + numDecodes * k) > plain * (1 + margin)) return true;
  }
  return false;
}

function clamp01(p: number): number {
  return p > 0 ? (p < 1 ? p : 1) : 0;
}
