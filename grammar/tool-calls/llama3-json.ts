/**
 * Llama 3.x JSON tool calls: the output is calls only if it starts (after whitespace and an
 * optional `<|python_tag|>`) with a call object; then calls separated by `;` (or nothing but
 * whitespace). Whatever follows the last call, and a whole output that does not start with one,
 * is content.
 */
import { skipJsonSpace } from '../stream-text.js';
import { TOOL_CALL_FORMATS } from './formats.js';
import { CallParserBase } from './parser-base.js';

/** Llama 3.1's token before a tool call; the JSON format may or may not put it first. */
export const LLAMA_PYTHON_TAG = '<|python_tag|>';
const LLAMA_SEPARATOR = TOOL_CALL_FORMATS.llama3_json.separator.trim();

export class Llama3JsonParser extends CallParserBase {
  private state: 'start' | 'calls' | 'text' = 'start';

  protected drain(final: boolean): void {
    for (;;) {
      if (this.state === 'text') {
        this.emitContent(this.buf);
        this.consume(this.buf.length);
        return;
      }
      const step = this.state === 'start' ? this.readFirst(final) : this.readNext(final);
      if (step === 'wait') return;
      if (step === 'text') {
        this.state = 'text';
        continue;
      }
      this.consume(step);
      this.state = 'calls';
    }
  }

  private readFirst(final: boolean): number | 'wait' | 'text' {
    let at = skipJsonSpace(this.buf, 0);
    const tagged = this.buf.startsWith(LLAMA_PYTHON_TAG, at);
    if (tagged) at = skipJsonSpace(this.buf, at + LLAMA_PYTHON_TAG.length);
    else if (this.buf.length - at < LLAMA_PYTHON_TAG.length && LLAMA_PYTHON_TAG.startsWith(this.buf.slice(at))) {
      if (!final) return 'wait';
      if (this.forced) return this.buf.length; // a tag cut short
    }
    const found = this.callAt(at, final, true);
    if (found === 'wait') return 'wait';
    if (found === 'bad') return 'text';
    // Cut before the call's name was known: after the python tag, or when calls were forced, it
    // is markup; otherwise it may be a plain JSON answer, which is content.
    if (found === 'cut') return tagged || this.forced ? this.buf.length : 'text';
    if (found.call) this.emitCall(found.call);
    return found.end;
  }

  private readNext(final: boolean): number | 'wait' | 'text' {
    let at = skipJsonSpace(this.buf, 0);
    if (at >= this.buf.length) return final ? 'text' : 'wait';
    if (this.buf.startsWith(LLAMA_SEPARATOR, at)) {
      at = skipJsonSpace(this.buf, at + LLAMA_SEPARATOR.length);
      // A separator with nothing after it at the end is the list's tail, not content.
      if (at >= this.buf.length && final) return at;
    }
    const found = this.callAt(at, final, true);
    if (found === 'wait') return 'wait';
    if (found === 'bad') return 'text';
    if (found === 'cut') return this.buf.length; // inside the list of calls: markup
    if (found.call) this.emitCall(found.call);
    return found.end;
  }
}
