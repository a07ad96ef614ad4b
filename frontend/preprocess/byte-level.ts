/**
 * Inverse of GPT-2's byte-to-unicode table, for turning byte-level BPE token strings back into
 * bytes without going through the tokenizer library. (workers/models holds the forward table
 * for the tiny tokenizer; the layering rules keep frontend/ from importing it, and the table
 * is a fixed published mapping, not shared logic.)
 */
export const CHAR_TO_BYTE: ReadonlyMap<string, number> = (() => {
  const map = new Map<string, number>();
  const isPrintable = (b: number) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  let n = 0;
  for (let b = 0; b < 256; b++) {
    map.set(String.fromCharCode(isPrintable(b) ? b : 256 + n++), b);
  }
  return map;
})();

/** Bytes of a byte-level token string, or undefined if a character is outside the table. */
export function byteLevelToBytes(token: string): number[] | undefined {
  const out: number[] = [];
  for (const ch of token) {
    const b = CHAR_TO_BYTE.get(ch);
    if (b === undefined) return undefined;
    out.push(b);
  }
  return out;
}
