/**
 * A small byte-level BPE trainer (the classic algorithm of Sennrich et al. as GPT-2 uses it):
 * split the corpus into pre-tokens with the family's regex, spell each pre-token in byte-level
 * characters, then repeatedly merge the most frequent adjacent pair. Pure and deterministic:
 * ties go to the lexicographically smaller "left right" key.
 *
 * Incremental, so that a 150k-token vocabulary trains in minutes rather than hours: pair counts
 * are kept across merges and only the words holding the merged pair are revisited (each pair
 * lists the words it may occur in), and the next pair comes off a max-heap whose out-of-date
 * entries are skipped when popped. The result is exactly what recounting every pair on every
 * merge gives (test/models/bpe-trainer.test.ts keeps that naive trainer as the reference).
 */
import { BYTE_TO_CHAR, BYTE_VOCAB_ORDER, toByteLevel } from '../../grammar/byte-level.js';

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
  /** Called with the vocabulary size after every 1,024th new token (long trainings report progress). */
  onProgress?: (vocabSize: number) => void;
}

/** An adjacent symbol pair, counted over the corpus (overlapping occurrences included, as in "a a a"). */
interface Pair {
  left: number;
  right: number;
  /** "left right" in token strings: the tie-break order. Byte-level characters never include ' '. */
  key: string;
  count: number;
  /** Words that may hold the pair: appended when a word gains it, never pruned (checked on use). */
  words: number[];
}

/** Pair ids are left * SYMBOL_SPACE + right: exact in a double while symbol ids stay below 2^26. */
const SYMBOL_SPACE = 2 ** 26;

export function trainByteLevelBpe(corpus: string, options: BpeTrainOptions): BpeModel {
  const vocab = BYTE_VOCAB_ORDER.map((b) => BYTE_TO_CHAR[b]!);
  const known = new Set(vocab);
  const merges: Array<[string, string]> = [];
  if (vocab.length >= options.vocabSize) return { vocab, merges };

  const wordCounts = new Map<string, number>();
  for (const match of corpus.matchAll(options.pattern)) {
    const word = toByteLevel(match[0]);
    wordCounts.set(word, (wordCounts.get(word) ?? 0) + 1);
  }

  // Symbols are interned: a merge can produce a string some other split already made, and
  // both must then be the same symbol, as they are when symbols are compared as strings.
  const symbolText: string[] = [];
  const symbolId = new Map<string, number>();
  const intern = (text: string): number => {
    let id = symbolId.get(text);
    if (id === undefined) {
      id = symbolText.length;
      if (id >= SYMBOL_SPACE) throw new Error(`BPE trainer: more than ${SYMBOL_SPACE} distinct symbols`);
      symbolText.push(text);
      symbolId.set(text, id);
    }
    return id;
  };

  const words: number[][] = [];
  const counts: number[] = [];
  for (const [word, count] of wordCounts) {
    words.push([...word].map(intern));
    counts.push(count);
  }

  const pairs = new Map<number, Pair>();
  const pairOf = (left: number, right: number): Pair => {
    const id = left * SYMBOL_SPACE + right;
    let pair = pairs.get(id);
    if (pair === undefined) {
      pair = { left, right, key: `${symbolText[left]} ${symbolText[right]}`, count: 0, words: [] };
      pairs.set(id, pair);
    }
    return pair;
  };
  words.forEach((symbols, w) => {
    for (let i = 0; i + 1 < symbols.length; i++) {
      const pair = pairOf(symbols[i]!, symbols[i + 1]!);
      pair.count += counts[w]!;
      if (pair.words[pair.words.length - 1] !== w) pair.words.push(w);
    }
  });

  const heap = new PairHeap();
  for (const pair of pairs.values()) heap.push(pair);

  // Which merge last visited each word, so a word listed twice under a pair is merged once.
  const visited = new Int32Array(words.length).fill(-1);
  const gained = new Set<Pair>();
  for (let step = 0; vocab.length < options.vocabSize; step++) {
    const best = heap.popBest();
    if (best === undefined) {
      throw new Error(`BPE corpus too small: ${vocab.length} tokens, wanted ${options.vocabSize}`);
    }
    const left = symbolText[best.left]!;
    const right = symbolText[best.right]!;
    const mergedText = left + right;
    merges.push([left, right]);
    if (!known.has(mergedText)) {
      known.add(mergedText);
      vocab.push(mergedText);
      if (vocab.length % 1024 === 0) options.onProgress?.(vocab.length);
    }
    const merged = intern(mergedText);

    const candidates = best.words;
    best.words = [];
    gained.clear();
    for (const w of candidates) {
      if (visited[w] === step) continue;
      visited[w] = step;
      mergeInWord(w, best.left, best.right, merged);
    }
    for (const pair of gained) if (pair.count > 0) heap.push(pair);
  }
  return { vocab, merges };

  /**
   * Replaces each non-overlapping (left, right), scanning left to right, and moves the counts:
   * every old pair touching a merged position loses this word's count, every new pair touching
   * a new symbol gains it. Pairs between two untouched symbols stay adjacent, so stay counted.
   */
  function mergeInWord(w: number, left: number, right: number, merged: number): void {
    const symbols = words[w]!;
    const count = counts[w]!;
    const out: number[] = [];
    const isNew: boolean[] = [];
    let changed = false;
    for (let i = 0; i < symbols.length; i++) {
      if (i + 1 < symbols.length && symbols[i] === left && symbols[i + 1] === right) {
        // The pairs this occurrence breaks: (before, left), (left, right), (right, after). The
        // one before is skipped when it was itself a merged occurrence, already counted off.
        if (i > 0 && !isNew[out.length - 1]) pairOf(symbols[i - 1]!, left).count -= count;
        pairOf(left, right).count -= count;
        if (i + 2 < symbols.length) pairOf(right, symbols[i + 2]!).count -= count;
        out.push(merged);
        isNew.push(true);
        changed = true;
        i++;
      } else {
        out.push(symbols[i]!);
        isNew.push(false);
      }
    }
    if (!changed) return;
    for (let j = 0; j + 1 < out.length; j++) {
      if (!isNew[j] && !isNew[j + 1]) continue;
      const pair = pairOf(out[j]!, out[j + 1]!);
      pair.count += count;
      if (pair.words[pair.words.length - 1] !== w) pair.words.push(w);
      gained.add(pair);
    }
    words[w] = out;
  }
}

/**
 * Max-heap of (count, pair) by count, then by smaller key. Entries are snapshots: a pair whose
 * count has since changed is re-pushed at its current count when popped (counts only fall
 * between pushes, so the highest live count always surfaces first), and dropped at zero.
 */
class PairHeap {
  private readonly counts: number[] = [];
  private readonly pairs: Pair[] = [];

  push(pair: Pair): void {
    this.counts.push(pair.count);
    this.pairs.push(pair);
    this.up(this.counts.length - 1);
  }

  popBest(): Pair | undefined {
    while (this.counts.length > 0) {
      const count = this.counts[0]!;
      const pair = this.pairs[0]!;
      this.removeTop();
      if (count === pair.count) return pair;
      if (pair.count > 0 && pair.count < count) this.push(pair);
    }
    return undefined;
  }

  private removeTop(): void {
    const lastCount = this.counts.pop()!;
    const lastPair = this.pairs.pop()!;
    if (this.counts.length === 0) return;
    this.counts[0] = lastCount;
    this.pairs[0] = lastPair;
    this.down(0);
  }

  private before(a: number, b: number): boolean {
    const ca = this.counts[a]!;
    const cb = this.counts[b]!;
    return ca > cb || (ca === cb && this.pairs[a]!.key < this.pairs[b]!.key);
  }

  private swap(a: number, b: number): void {
    const c = this.counts[a]!;
    this.counts[a] = this.counts[b]!;
    this.counts[b] = c;
    const p = this.pairs[a]!;
    this.pairs[a] = this.pairs[b]!;
    this.pairs[b] = p;
  }

  private up(i: number): void {
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.before(i, parent)) return;
      this.swap(i, parent);
      i = parent;
    }
  }

  private down(i: number): void {
    const n = this.counts.length;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let top = i;
      if (l < n && this.before(l, top)) top = l;
      if (r < n && this.before(r, top)) top = r;
      if (top === i) return;
      this.swap(i, top);
      i = top;
    }
  }
}
