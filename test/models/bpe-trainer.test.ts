/**
 * The incremental BPE trainer against the naive one it replaced: recount every adjacent pair on
 * every merge, take the most frequent (ties: the smaller "left right" key), merge it everywhere.
 * Same vocab, same merges in the same order, same error when the corpus runs out of pairs.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BYTE_TO_CHAR, BYTE_VOCAB_ORDER, toByteLevel } from '../../grammar/byte-level.js';
import { trainByteLevelBpe, type BpeModel, type BpeTrainOptions } from '../../workers/models/bpe-trainer.js';
import { TINY_CORPUS } from '../../workers/models/corpus.js';

function referenceTrain(corpus: string, options: BpeTrainOptions): BpeModel {
  const vocab = BYTE_VOCAB_ORDER.map((b) => BYTE_TO_CHAR[b]!);
  const known = new Set(vocab);
  const merges: Array<[string, string]> = [];
  const counts = new Map<string, number>();
  for (const match of corpus.matchAll(options.pattern)) {
    const word = toByteLevel(match[0]);
    counts.set(word, (counts.get(word) ?? 0) + 1);
  }
  const words = [...counts.entries()].map(([word, count]) => ({ symbols: [...word], count }));
  while (vocab.length < options.vocabSize) {
    const pairCounts = new Map<string, number>();
    for (const { symbols, count } of words) {
      for (let i = 0; i + 1 < symbols.length; i++) {
        const key = `${symbols[i]} ${symbols[i + 1]}`;
        pairCounts.set(key, (pairCounts.get(key) ?? 0) + count);
      }
    }
    let bestKey: string | undefined;
    let bestCount = 0;
    for (const [key, count] of pairCounts) {
      if (count > bestCount || (count === bestCount && bestKey !== undefined && key < bestKey)) {
        bestKey = key;
        bestCount = count;
      }
    }
    if (bestKey === undefined) {
      throw new Error(`BPE corpus too small: ${vocab.length} tokens, wanted ${options.vocabSize}`);
    }
    const [left, right] = bestKey.split(' ') as [string, string];
    const merged = left + right;
    merges.push([left, right]);
    if (!known.has(merged)) {
      known.add(merged);
      vocab.push(merged);
    }
    for (const word of words) {
      const out: string[] = [];
      for (let i = 0; i < word.symbols.length; i++) {
        if (i + 1 < word.symbols.length && word.symbols[i] === left && word.symbols[i + 1] === right) {
          out.push(merged);
          i++;
        } else {
          out.push(word.symbols[i]!);
        }
      }
      word.symbols = out;
    }
  }
  return { vocab, merges };
}

/** The result, or the error message: both trainers must agree on either. */
function outcome(train: (corpus: string, options: BpeTrainOptions) => BpeModel, corpus: string, options: BpeTrainOptions): BpeModel | string {
  try {
    return train(corpus, options);
  } catch (err) {
    return (err as Error).message;
  }
}

// The tiny qwen2 pre-tokenizer (workers/models/tiny-tokenizer.ts), and one that keeps spaces
// inside words so that long words with repeats ("a a a", overlapping pairs) are common.
const QWEN_PATTERN =
  /'(?:[sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+/gu;
const LINE_PATTERN = /[^\n]+|\n/gu;

describe("trainByteLevelBpe: incremental counts give the naive trainer's merges", () => {
  it.each([257, 300, 512, 800, 1200])('tiny corpus, qwen2 pre-tokenizer, vocab %i', (vocabSize) => {
    const options = { pattern: QWEN_PATTERN, vocabSize };
    expect(outcome(trainByteLevelBpe, TINY_CORPUS, options)).toEqual(outcome(referenceTrain, TINY_CORPUS, options));
  });

  it('tiny corpus: both run out of pairs at the same size with the same error', () => {
    const options = { pattern: QWEN_PATTERN, vocabSize: 1_000_000 };
    const expected = outcome(referenceTrain, TINY_CORPUS, options);
    expect(expected).toMatch(/^BPE corpus too small: \d+ tokens, wanted 1000000$/);
    expect(outcome(trainByteLevelBpe, TINY_CORPUS, options)).toBe(expected);
  });

  it('a vocabulary no larger than the 256 bytes needs no corpus', () => {
    expect(trainByteLevelBpe('', { pattern: QWEN_PATTERN, vocabSize: 256 }).merges).toEqual([]);
    expect(() => trainByteLevelBpe('', { pattern: QWEN_PATTERN, vocabSize: 257 })).toThrow('BPE corpus too small: 256 tokens, wanted 257');
  });

  it('"aaaaa": a a counts 4 (overlaps), merges to aa aa a; then "aa a" beats "aa aa" on the key tie: aa aaa, aaaaa', () => {
    const model = trainByteLevelBpe('aaaaa', { pattern: LINE_PATTERN, vocabSize: 259 });
    expect(model.merges).toEqual([
      ['a', 'a'],
      ['aa', 'a'],
      ['aa', 'aaa'],
    ]);
  });

  it('random corpora over a small alphabet (ties, repeats, multi-byte characters)', () => {
    const alphabet = ['a', 'b', 'c', ' ', 'é', '中', '😀', '1', '\n'];
    const corpus = fc.array(fc.constantFrom(...alphabet), { minLength: 0, maxLength: 300 }).map((chars) => chars.join(''));
    fc.assert(
      fc.property(corpus, fc.integer({ min: 257, max: 420 }), fc.boolean(), (text, vocabSize, lines) => {
        const options = { pattern: lines ? LINE_PATTERN : QWEN_PATTERN, vocabSize };
        expect(outcome(trainByteLevelBpe, text, options)).toEqual(outcome(referenceTrain, text, options));
      }),
      { numRuns: 200, seed: 16 },
    );
  });

  // Words over two or three letters repeat pairs inside a word ("abab": b a sits between two
  // merged a b) and across words with different counts, where a miscount changes the order.
  it('random word lists with repeated, periodic words', () => {
    const word = fc.tuple(fc.array(fc.constantFrom('a', 'b', 'c'), { minLength: 1, maxLength: 12 }), fc.integer({ min: 1, max: 6 }));
    const corpus = fc
      .array(word, { minLength: 1, maxLength: 40 })
      .map((words) => words.flatMap(([chars, n]) => Array<string>(n).fill(chars.join(''))).join(' '));
    fc.assert(
      fc.property(corpus, fc.integer({ min: 257, max: 330 }), (text, vocabSize) => {
        const options = { pattern: QWEN_PATTERN, vocabSize };
        expect(outcome(trainByteLevelBpe, text, options)).toEqual(outcome(referenceTrain, text, options));
      }),
      { numRuns: 300, seed: 16 },
    );
  });
});
