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
