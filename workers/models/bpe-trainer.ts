/**
 * A small byte-level BPE trainer (the classic algorithm of Sennrich et al. as GPT-2 uses it):
 * split the corpus into pre-tokens with the family's regex, spell each pre-token in byte-level
 * characters, then repeatedly merge the most frequent adjacent pair. Pure and deterministic:
 * ties go to the lexicographically smaller pair.
 */
import { BYTE_TO_CHAR, BYTE_VOCAB_ORDER, toByteLevel } from './byte-level.js';

export interface BpeModel {
  /** Token strings by id: the 256 byte tokens first, then one per new merged token. */
  vocab: string[];
  /** Merges in rank order, as (left, right) token strings. */
  merges: Array<[string, string]>;
}

export interface BpeTrainOptions {
  /** Pre-tokenizer regex (global, unicode). */
  pattern: RegExp;
  /** Stop when the vocabulary (bytes + merged tokens) reaches this size. */
  vocabSize: number;
}

export function trainByteLevelBpe(corpus: string, options: BpeTrainOptions): BpeModel {
  const vocab = BYTE_VOCAB_ORDER.map((b) => BYTE_TO_CHAR[b]!);
  const known = new Set(vocab);
  const merges: Array<[string, string]> = [];

  const counts = new Map<string, number>();
  for (const match of corpus.matchAll(options.pattern)) {
    const word = toByteLevel(match[0]);
    counts.set(word, (counts.get(word) ?? 0) + 1);
  }
  // Sorted so iteration order (and so tie-breaking) never depends on Map insertion history.
  const words = [...counts.entries()]
    .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
    .map(([word, count]) => ({ symbols: [...word], count }));

  while (vocab.length < options.vocabSize) {
    // Byte-level characters never include ' ', so "left right" is an unambiguous pair key.
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
    for (const word of words) word.symbols = mergePair(word.symbols, left, right, merged);
  }
  return { vocab, merges };
}

function mergePair(symbols: string[], left: string, right: string, merged: string): string[] {
  let out: string[] | undefined;
  for (let i = 0; i < symbols.length; i++) {
    if (i + 1 < symbols.length && symbols[i] === left && symbols[i + 1] === right) {
      out ??= symbols.slice(0, i);
      out.push(merged);
      i++;
    } else if (out) {
      out.push(symbols[i]!);
    }
  }
  return out ?? symbols;
}
