/**
 * Seeded prompts of plain words the tiny tokenizer knows (about 4 tokens each), for e2e tests
 * that need distinct prompts of a known size: the same `seed` gives the same text, so block
 * counts a test was tuned to stay exact.
 */
const VOCAB = ['alpha', 'bravo', 'cargo', 'delta', 'ember', 'fable', 'gamma', 'harbor', 'ivory', 'jolly', 'karma', 'lemon', 'mango', 'noble', 'olive', 'piano'];

/** `n` words drawn by a multiplicative hash of `seed`. */
export function seededWords(seed: number, n: number): string {
  let x = seed * 2654435761;
  return Array.from({ length: n }, () => {
    x = (Math.imul(x ^ (x >>> 13), 0x5bd1e995) + 7) >>> 0;
    return VOCAB[x % VOCAB.length];
  }).join(' ');
}
