/** Hermes / Qwen tool calls: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, any spacing. */
import { skipJsonSpace } from '../stream-text.js';
import { TOOL_CALL_FORMATS } from './formats.js';
import { MarkedParser, type ToolCallParserOptions } from './parser-base.js';

export const HERMES_START = TOOL_CALL_FORMATS.hermes.callPrefix.trim();
const HERMES_END = TOOL_CALL_FORMATS.hermes.callSuffix.trim();

export class HermesParser extends MarkedParser {
  constructor(options: ToolCallParserOptions) {
    super(HERMES_START, options);
  }

  protected readBlock(final: boolean): number | 'wait' | 'bad' | 'cut' {
    const found = this.callAt(skipJsonSpace(this.buf, HERMES_START.length), final, false);
    if (typeof found === 'string') return found;
    const after = skipJsonSpace(this.buf, found.end);
    if (this.buf.startsWith(HERMES_END, after)) {
      if (found.call) this.emitCall(found.call);
      return after + HERMES_END.length;
    }
    // The closing tag may still be on its way; at the end a missing or cut one is forgiven.
    const mayClose = HERMES_END.startsWith(this.buf.slice(after));
    if (found.call === undefined) {
      // Streamed already: a call whatever follows; other text after it is content again.
      if (mayClose) return final ? this.buf.length : 'wait';
      return found.end;
    }
    if (!mayClose) return 'bad';
    if (!final) return 'wait';
    this.emitCall(found.call);
    return this.buf.length;
  }
}
