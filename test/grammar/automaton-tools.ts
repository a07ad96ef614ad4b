/**
 * Test vocabularies for the automaton: all 256 single bytes (so any text is tokenizable, as
 * in byte-level BPE) plus multi-byte pieces cut at random from texts of the grammars under
 * test, many of them ending or starting inside a UTF-8 character. Last two ids: a special
 * token (never text) and EOS.
 */
import type { GrammarMatcher, Vocabulary } from '../../grammar/index.js';
import { bitmaskWords } from '../../grammar/index.js';

export function testVocabulary(texts: readonly string[], rand: () => number, maxPieces = 3000): Vocabulary {
  const seen = new Set<string>();
  const tokenBytes: Array<Uint8Array | null> = [];
  for (let b = 0; b < 256; b++) {
    tokenBytes.push(new Uint8Array([b]));
    seen.add(String.fromCharCode(b));
  }
  for (const text of texts) {
    const bytes = Buffer.from(text, 'utf8');
    for (let i = 0; i < bytes.length && tokenBytes.length < 256 + maxPieces; ) {
      const n = 2 + Math.floor(rand() * 6);
      const piece = bytes.subarray(i, i + n);
      const key = piece.toString('latin1');
      if (piece.length > 1 && !seen.has(key)) {
        seen.add(key);
        tokenBytes.push(new Uint8Array(piece));
      }
      i += 1 + Math.floor(rand() * n);
    }
  }
  tokenBytes.push(null, null);
  const size = tokenBytes.length;
  return { id: `test-vocab-${size}-${texts.length}-${texts[0]?.length ?? 0}`, size, tokenBytes, eosTokenIds: [size - 1] };
}

/** Greedy longest-match tokenization (every byte is a token, so it always succeeds). */
export function tokenize(vocab: Vocabulary, text: string): number[] {
  const byKey = new Map<string, number>();
  let longest = 1;
  vocab.tokenBytes.forEach((b, id) => {
    if (b === null || vocab.eosTokenIds.includes(id)) return;
    const key = Buffer.from(b).toString('latin1');
    if (!byKey.has(key)) byKey.set(key, id);
    longest = Math.max(longest, b.length);
  });
  const bytes = Buffer.from(text, 'utf8').toString('latin1');
  const out: number[] = [];
  for (let i = 0; i < bytes.length; ) {
    for (let n = Math.min(longest, bytes.length - i); n >= 1; n--) {
      const id = byKey.get(bytes.slice(i, i + n));
      if (id !== undefined) {
        out.push(id);
        i += n;
        break;
      }
    }
  }
  return out;
}

export function allowedIds(mask: Uint32Array, size: number): number[] {
  const out: number[] = [];
  for (let id = 0; id < size; id++) if ((mask[id >>> 5]! >>> (id & 31)) & 1) out.push(id);
  return out;
}

export function isAllowed(mask: Uint32Array, id: number): boolean {
  return ((mask[id >>> 5]! >>> (id & 31)) & 1) === 1;
}

export interface Generated {
  text: string;
  tokens: number;
  ended: 'eos' | 'terminated' | 'budget';
}

/**
 * Sample uniformly among the allowed tokens (a random model under the grammar), switching to
 * closing mode as the engine loop does (tokens left <= the costliest alternative's bytes to
 * finish + 1 + slack); `start: 'min'` is the older rule (the cheapest alternative's).
 */
export function generate(m: GrammarMatcher, vocab: Vocabulary, rand: () => number, budget: number, slack = 16, start: 'max' | 'min' = 'max'): Generated {
  const mask = new Uint32Array(bitmaskWords(vocab.size));
  const bytes: number[] = [];
  let closing = false;
  for (let i = 0; i < budget; i++) {
    if (!closing) closing = budget - i <= (start === 'max' ? m.maxBytesToAccept() : m.minBytesToAccept()) + 1 + slack;
    m.fillNextTokenBitmask(mask, closing ? { closing: true } : undefined);
    const ids = allowedIds(mask, vocab.size);
    if (ids.length === 0) throw new Error(`empty mask after ${JSON.stringify(Buffer.from(bytes).toString('utf8'))}`);
    const id = ids[Math.floor(rand() * ids.length)]!;
    if (!m.acceptToken(id)) throw new Error(`masked token ${id} rejected`);
    if (vocab.eosTokenIds.includes(id)) return { text: Buffer.from(bytes).toString('utf8'), tokens: i + 1, ended: 'eos' };
    bytes.push(...vocab.tokenBytes[id]!);
    if (m.isTerminated()) return { text: Buffer.from(bytes).toString('utf8'), tokens: i + 1, ended: 'terminated' };
  }
  return { text: Buffer.from(bytes).toString('utf8'), tokens: budget, ended: 'budget' };
}
