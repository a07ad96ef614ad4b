/**
 * GPT-2's byte↔unicode table, the repository's one copy: every byte maps to one printable
 * character, so byte-level BPE tokens (GPT-2, Llama 3, Qwen) are plain strings in
 * tokenizer.json. Printable Latin-1 bytes map to themselves; the rest (controls, space, ...)
 * map to U+0100 onward, in byte order (space becomes 'Ġ').
 *
 * A second public surface of grammar/ beside index.ts (docs/design.md, "Public surfaces"): the
 * frontend's preprocessing threads and the tiny-model tokenizer need the table without loading
 * the grammar engine. It imports nothing.
 */
export const BYTE_TO_CHAR: readonly string[] = (() => {
  const printable: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) printable.push(b);
  for (let b = 0xa1; b <= 0xac; b++) printable.push(b);
  for (let b = 0xae; b <= 0xff; b++) printable.push(b);
  const table = new Array<string>(256);
  for (const b of printable) table[b] = String.fromCharCode(b);
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (table[b] === undefined) table[b] = String.fromCharCode(256 + n++);
  }
  return table;
})();

/** The inverse, by char code: byte + 1, or 0 for a code outside the table (codes stop at U+0143). */
const CODE_TO_BYTE_PLUS_1: Uint16Array = (() => {
  const t = new Uint16Array(0x144);
  for (let b = 0; b < 256; b++) t[BYTE_TO_CHAR[b]!.charCodeAt(0)] = b + 1;
  return t;
})();

/** The byte a char code stands for, or undefined when it is outside the table. */
export function charCodeToByte(code: number): number | undefined {
  const v = code < CODE_TO_BYTE_PLUS_1.length ? CODE_TO_BYTE_PLUS_1[code]! : 0;
  return v === 0 ? undefined : v - 1;
}

/**
 * Byte order of the first 256 vocabulary ids, as in GPT-2/Qwen/Llama 3 vocabularies: the
 * printable bytes first, then the remapped ones.
 */
export const BYTE_VOCAB_ORDER: readonly number[] = (() => {
  const order: number[] = [];
  for (let b = 0; b < 256; b++) if (BYTE_TO_CHAR[b]!.charCodeAt(0) < 256) order.push(b);
  for (let b = 0; b < 256; b++) if (BYTE_TO_CHAR[b]!.charCodeAt(0) >= 256) order.push(b);
  return order;
})();

const encoder = new TextEncoder();

/** Text to its byte-level token string ("Hello world" -> "HelloĠworld"). */
export function toByteLevel(text: string): string {
  let out = '';
  for (const b of encoder.encode(text)) out += BYTE_TO_CHAR[b];
  return out;
}

/** Bytes of a byte-level token string, or undefined if a character is outside the table. */
export function byteLevelToBytes(token: string): number[] | undefined {
  const out: number[] = [];
  for (let i = 0; i < token.length; i++) {
    const b = charCodeToByte(token.charCodeAt(i));
    if (b === undefined) return undefined;
    out.push(b);
  }
  return out;
}
