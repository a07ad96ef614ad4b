/**
 * GPT-2's byte-to-unicode table: every byte maps to one printable character, so byte-level BPE
 * tokens are plain strings in tokenizer.json. Printable Latin-1 bytes map to themselves; the
 * rest (controls, space, ...) map to U+0100 onward, in byte order (space becomes 'Ġ').
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
