/**
 * The mocker's deterministic tokens (pure). The token at a position depends only on
 * (engine seed, request seed, position), so a preempted-and-recomputed sequence, or one that
 * migrates to another mocker with the same seeds, continues with exactly the same tokens.
 *
 * EOS is never emitted by chance: ids in `eosTokenIds` are skipped. It is emitted only where
 * asked (see MockerEngine: `eosAfterTokens`, or a request seed at or above
 * MOCKER_EOS_SEED_BASE).
 */

/** murmur3's 32-bit finalizer: a cheap, well-mixed integer hash. */
export function mix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** 32-bit hash of (seed, requestSeed, position); requestSeed may use up to 53 bits. */
export function tokenHash(seed: number, requestSeed: number, position: number): number {
  const lo = requestSeed >>> 0;
  const hi = Math.floor(requestSeed / 4294967296) >>> 0;
  let h = mix32((seed >>> 0) ^ 0x9e3779b9);
  h = mix32(h ^ lo);
  h = mix32(h ^ hi ^ 0x7f4a7c15);
  return mix32(h ^ (position >>> 0));
}

/** Token id in [0, vocabSize) at `position`, never one of `avoid` (unless the vocab is all avoided). */
export function mockTokenAt(
  seed: number,
  requestSeed: number,
  position: number,
  vocabSize: number,
  avoid: readonly number[],
): number {
  let t = tokenHash(seed, requestSeed, position) % vocabSize;
  for (let tries = 0; tries < avoid.length && avoid.includes(t); tries++) t = (t + 1) % vocabSize;
  return t;
}

/** A plausible, deterministic log-probability in (-4, 0] for a mock token. */
export function mockLogprob(seed: number, requestSeed: number, position: number): number {
  return -(mix32(tokenHash(seed, requestSeed, position) ^ 0x5bd1e995) % 4000) / 1000;
}

/**
 * The mocker's `logit_bias` (pure). The mocker has no logits, so it pretends: its own token
 * has logit MOCK_TOKEN_LEAD, every other token 0; each bias is added, then greedy argmax.
 * So, for a mock token m and a biased token t:
 *   - bias(t) > MOCK_TOKEN_LEAD + bias(m) → t wins (+100 forces t; ties go to the lower id);
 *   - bias(m) < -MOCK_TOKEN_LEAD → m loses to every unbiased token: the answer is the next
 *     deterministic token avoiding every negatively biased id (`fallback(avoid)`), so -100
 *     bans a token;
 *   - small biases (|bias| ≤ 1) change nothing, as on a peaked real distribution.
 * Ids outside [0, vocabSize) or non-finite biases are ignored.
 */
export const MOCK_TOKEN_LEAD = 1;

export function applyMockLogitBias(
  mockToken: number,
  bias: ReadonlyArray<readonly [number, number]>,
  vocabSize: number,
  fallback: (avoid: number[]) => number,
): number {
  let best = mockToken;
  let bestScore = MOCK_TOKEN_LEAD;
  for (const [id, b] of bias) {
    if (id === mockToken && Number.isFinite(b)) bestScore += b;
  }
  for (const [id, b] of bias) {
    if (id === mockToken || !Number.isInteger(id) || id < 0 || id >= vocabSize || !Number.isFinite(b)) continue;
    if (b > bestScore || (b === bestScore && id < best)) {
      best = id;
      bestScore = b;
    }
  }
  // Unbiased tokens score 0: when everything biased fell below, one of them wins.
  if (bestScore < 0) {
    const avoid: number[] = [];
    for (const [id, b] of bias) if (b < 0) avoid.push(id);
    return fallback(avoid);
  }
  return best;
}

/**
 * The mocker's pick under a grammar mask (pure): `token` itself when allowed (an EOS the mocker
 * was asked for included); else the first allowed token after it, wrapping, that is not EOS;
 * an allowed EOS only when nothing else is allowed; `token` when the mask is empty (the engine
 * loop rejects it; an empty mask is a grammar bug).
 * Cost: one pass over mask words from `token`, skipping zero words.
 */
export function nextAllowedToken(mask: Uint32Array, token: number, vocabSize: number, eosTokenIds: readonly number[]): number {
  const words = Math.min(mask.length, (vocabSize + 31) >>> 5);
  if (token < vocabSize && (token >>> 5) < words && ((mask[token >>> 5]! >>> (token & 31)) & 1) === 1) return token;
  let eos = -1;
  for (let step = 0; step <= words; step++) {
    const w = ((token >>> 5) + step) % words;
    let bits = mask[w]! >>> 0;
    // First word: drop bits below `token`; they are visited last, on the wrap (step === words).
    if (step === 0) bits = (token & 31) === 0 ? bits : bits & ~((1 << (token & 31)) - 1) >>> 0;
    else if (step === words) bits = (token & 31) === 0 ? 0 : bits & ((1 << (token & 31)) - 1);
    while (bits !== 0) {
      const low = bits & -bits;
      const id = (w << 5) + (31 - Math.clz32(low));
      bits = (bits ^ low) >>> 0;
      if (id >= vocabSize) break;
      if (eosTokenIds.includes(id)) {
        if (eos < 0) eos = id;
        continue;
      }
      return id;
    }
  }
  return eos >= 0 ? eos : token;
}

/**
 * The mocker's drafts (speculative decoding, modelled): `n` tokens for positions `from`,
 * `from + 1`, ...; each is the mocker's own token there (before any bias or mask) with
 * probability `acceptance`, decided by a hash of its position, and a different token
 * otherwise. So a verify step keeps each draft with that probability, given the ones before.
 */
export function mockDraftHits(seed: number, requestSeed: number, from: number, n: number, acceptance: number, vocabSize: number, avoid: readonly number[]): Int32Array {
  const out = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    const position = from + i;
    const right = mockTokenAt(seed, requestSeed, position, vocabSize, avoid);
    const u = mix32(tokenHash(seed, requestSeed, position) ^ 0x2545f491) / 4294967296;
    out[i] = u < acceptance ? right : (right + 1) % vocabSize;
  }
  return out;
}
