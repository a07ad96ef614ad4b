/**
 * Two small helpers the output parsers (tool calls, reasoning) share so that a streamed
 * response and a unary one split the same text the same way, wherever the chunks break.
 */

/**
 * Passes streamed text on with the whitespace at both ends of the whole stream removed, as
 * `String.prototype.trim` would remove it from the concatenation: leading whitespace is dropped,
 * trailing whitespace is held until more text follows it (and dropped if none does).
 */
export class TrimmedStream {
  private started = false;
  private held = '';

  push(text: string): string {
    if (!this.started) {
      text = text.trimStart();
      if (text.length === 0) return '';
      this.started = true;
    }
    const end = text.trimEnd().length;
    if (end === 0) {
      this.held += text;
      return '';
    }
    const out = this.held.length > 0 ? this.held + text.slice(0, end) : end === text.length ? text : text.slice(0, end);
    this.held = text.slice(end);
    return out;
  }
}

/**
 * The length of the longest end of `text` that is the beginning of `marker` (and shorter than
 * it): what a stream must hold back because the next chunk may complete the marker.
 */
export function partialMarkerLength(text: string, marker: string): number {
  // Per streamed token: compare in place rather than slicing out candidate prefixes.
  for (let k = Math.min(text.length, marker.length - 1); k > 0; k--) {
    const from = text.length - k;
    let i = 0;
    while (i < k && text.charCodeAt(from + i) === marker.charCodeAt(i)) i++;
    if (i === k) return k;
  }
  return 0;
}

/** Index of the first non-JSON-whitespace character at or after `from` (text.length if none). */
export function skipJsonSpace(text: string, from: number): number {
  let i = from;
  while (i < text.length) {
    const c = text.charCodeAt(i);
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break;
    i++;
  }
  return i;
}
