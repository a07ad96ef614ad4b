/**
 * A cheap, exact-safe lower bound on a prompt's token count from its UTF-8 byte length, so a
 * prompt that cannot fit the context is refused without tokenizing it (tokenizing 10 MB costs
 * seconds of CPU and a gigabyte of garbage).
 *
 * For byte-level BPE every input byte ends up inside exactly one token, so
 *   tokens >= ceil(bytes / maxTokenBytes)
 * where maxTokenBytes is the longest token in the vocabulary. That only holds when nothing
 * between the text and the model can make bytes disappear, so the bound is offered only for
 * configurations where that is known:
 *  - the model is BPE with a byte-level pre-tokenizer and every one of the 256 bytes is a token
 *    (an unknown byte could otherwise be dropped, or fused into one long unk);
 *  - the pre-tokenizer only splits (no `Removed` split behaviour, no whitespace-eating split);
 *  - the normalizer is absent, `Prepend` (adds bytes), or a per-character rewrite (NFC/NFD/
 *    NFKC/NFKD, Lowercase). Those can shrink text, never below a quarter: a character is at
 *    most 4 bytes and maps to at least one 1-byte character, and canonical composition merges
 *    at most three 3-byte Hangul jamo into one 3-byte syllable. So they cost a factor of 4;
 *  - no added token strips whitespace around itself (lstrip/rstrip would let one token cover
 *    any amount of whitespace), and tokenizer.json does not truncate.
 * Anything else gets no bound (undefined): such prompts are always tokenized in full (off the
 * event loop) and checked exactly.
 */
import { isObject } from '../../proto/wire.js';
import type { TokenBytesTable } from './tokenizer.js';

/** Factor by which a normalizer may shrink UTF-8 text, or undefined when it may drop text. */
function normalizerShrink(normalizer: unknown): number | undefined {
  if (normalizer === null || normalizer === undefined) return 1;
  if (!isObject(normalizer)) return undefined;
  switch (normalizer.type) {
    case 'Prepend':
      return 1;
    case 'NFC':
    case 'NFD':
    case 'NFKC':
    case 'NFKD':
    case 'Lowercase':
      return 4;
    case 'Sequence': {
      if (!Array.isArray(normalizer.normalizers)) return undefined;
      let factor = 1;
      for (const n of normalizer.normalizers) {
        const f = normalizerShrink(n);
        if (f === undefined) return undefined;
        factor *= f;
      }
      return factor;
    }
    default:
      return undefined;
  }
}

/** True when the pre-tokenizer keeps every byte and includes the byte-level mapping. */
function preTokenizerKeepsBytes(pre: unknown): { keeps: boolean; byteLevel: boolean } {
  if (!isObject(pre)) return { keeps: false, byteLevel: false };
  switch (pre.type) {
    case 'ByteLevel':
      return { keeps: true, byteLevel: true };
    case 'Split':
      return { keeps: pre.behavior !== 'Removed', byteLevel: false };
    case 'Digits':
      return { keeps: true, byteLevel: false };
    case 'Sequence': {
      if (!Array.isArray(pre.pretokenizers)) return { keeps: false, byteLevel: false };
      let byteLevel = false;
      for (const p of pre.pretokenizers) {
        const r = preTokenizerKeepsBytes(p);
        if (!r.keeps) return { keeps: false, byteLevel: false };
        byteLevel ||= r.byteLevel;
      }
      return { keeps: true, byteLevel };
    }
    default:
      return { keeps: false, byteLevel: false };
  }
}

/**
 * Largest number of UTF-8 input bytes one token can stand for, or undefined when no safe
 * bound exists for this tokenizer (see the file comment).
 */
export function bytesPerTokenBound(tokenizerJson: Record<string, unknown>, table: TokenBytesTable | undefined, addedIds: ReadonlySet<number>): number | undefined {
  if (!table) return undefined;
  const model = tokenizerJson.model;
  if (!isObject(model) || model.type !== 'BPE') return undefined;
  if (tokenizerJson.truncation !== null && tokenizerJson.truncation !== undefined) return undefined;
  const shrink = normalizerShrink(tokenizerJson.normalizer);
  if (shrink === undefined) return undefined;
  const pre = preTokenizerKeepsBytes(tokenizerJson.pre_tokenizer);
  if (!pre.keeps || !pre.byteLevel) return undefined;
  const added = Array.isArray(tokenizerJson.added_tokens) ? tokenizerJson.added_tokens : [];
  for (const t of added) if (isObject(t) && (t.lstrip === true || t.rstrip === true)) return undefined;

  const { offsets } = table;
  const singleBytes = new Uint8Array(256);
  let covered = 0;
  let longest = 1;
  for (let id = 0; id + 1 < offsets.length; id++) {
    const len = offsets[id + 1]! - offsets[id]!;
    if (len > longest) longest = len;
    if (len === 1 && !addedIds.has(id)) {
      const b = table.bytes[offsets[id]!]!;
      if (singleBytes[b] === 0) covered++;
      singleBytes[b] = 1;
    }
  }
  if (covered < 256) return undefined;
  return longest * shrink;
}

/** Fewest tokens a text of `utf8Bytes` bytes can encode to, given a bytesPerTokenBound. */
export function minTokensForBytes(utf8Bytes: number, bytesPerToken: number): number {
  return Math.ceil(utf8Bytes / bytesPerToken);
}
