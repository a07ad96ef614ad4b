/** Mistral tool calls: `[TOOL_CALLS][{...}, {...}]`; the `[` ... `]` may be missing. */
import { skipJsonSpace } from '../stream-text.js';
import { TOOL_CALL_FORMATS } from './formats.js';
import { MarkedParser, type ToolCallParserOptions } from './parser-base.js';

const MISTRAL_OPEN = TOOL_CALL_FORMATS.mistral.open.trim();
/** `[TOOL_CALLS]`: the open text less the JSON array's bracket, which models sometimes leave out. */
export const MISTRAL_MARKER = MISTRAL_OPEN.endsWith('[') ? MISTRAL_OPEN.slice(0, -1).trimEnd() : MISTRAL_OPEN;
const MISTRAL_SEPARATOR = TOOL_CALL_FORMATS.mistral.separator.trim();
const MISTRAL_CLOSE = TOOL_CALL_FORMATS.mistral.close.trim();

export class MistralParser extends MarkedParser {
  /** Inside a list after at least one call: `buf` starts just after the last one. */
  private listOpen = false;
  private bracketed = false;

  constructor(options: ToolCallParserOptions) {
    super(MISTRAL_MARKER, options);
  }

  protected override inBlock(): boolean {
    return this.listOpen;
  }

  protected readBlock(final: boolean): number | 'wait' | 'bad' | 'cut' {
    return this.listOpen ? this.readNext(final) : this.readFirst(final);
  }

  private readFirst(final: boolean): number | 'wait' | 'bad' | 'cut' {
    let at = skipJsonSpace(this.buf, MISTRAL_MARKER.length);
    if (at >= this.buf.length) return final ? 'cut' : 'wait';
    const bracketed = this.buf.startsWith('[', at);
    if (bracketed) at = skipJsonSpace(this.buf, at + 1);
    const found = this.callAt(at, final, false);
    if (typeof found === 'string') return found;
    if (found.call) this.emitCall(found.call);
    this.listOpen = true;
    this.bracketed = bracketed;
    return found.end;
  }

  /** After a call: a separator and the next call, the closing bracket, or the list ends here. */
  private readNext(final: boolean): number | 'wait' {
    const at = skipJsonSpace(this.buf, 0);
    if (at >= this.buf.length) return final ? this.endList(this.buf.length) : 'wait';
    if (this.bracketed && this.buf.startsWith(MISTRAL_CLOSE, at)) return this.endList(at + MISTRAL_CLOSE.length);
    if (!this.buf.startsWith(MISTRAL_SEPARATOR, at)) return this.endList(0);
    const next = skipJsonSpace(this.buf, at + MISTRAL_SEPARATOR.length);
    if (next >= this.buf.length && final) return this.endList(this.buf.length);
    const found = this.callAt(next, final, false);
    if (found === 'wait') return 'wait';
    if (found === 'bad') return this.endList(0);
    // Cut inside the next call before its name was known: the rest of the list is markup.
    if (found === 'cut') return this.endList(this.buf.length);
    if (found.call) this.emitCall(found.call);
    return found.end;
  }

  /** The list is over; `used` characters belong to it and the rest is text again. */
  private endList(used: number): number {
    this.listOpen = false;
    return used;
  }
}
