/**
 * What the per-format tool-call parsers share: the delta types, the pending text, trimmed
 * content out, numbered call deltas out, and the reading of call objects (call-reader.ts).
 *
 * Every decision waits until the text that decides it has arrived (a marker split across
 * chunks, a call's head not yet complete), so the result never depends on chunk boundaries: the
 * unary parse is the stream parser fed the whole text at once. A call streams from the moment
 * its name is known (call-reader.ts); from then on it is a call, and its text is never content.
 */
import { randomBytes } from 'node:crypto';
import { TrimmedStream, partialMarkerLength, skipJsonSpace } from '../stream-text.js';
import { type CallRead, CallReader, type CallSink, type CallValue } from './call-reader.js';

export interface ToolCallDelta {
  index: number;
  id?: string;
  name?: string;
  arguments?: string;
}

export interface ParsedToolCall {
  id: string;
  name: string;
  /** JSON text of the arguments object (a prefix of it when the output was cut inside the call). */
  arguments: string;
}

export interface ToolCallStreamParser {
  /** Feed the next decoded text. Returns text that is plain content (safe to stream now) and call deltas. */
  push(text: string): { content: string; toolCalls: ToolCallDelta[] };
  /** End of output: flush held-back text (text that never became a call is content, but see `forced`). */
  finish(): { content: string; toolCalls: ToolCallDelta[] };
}

export interface ToolCallParserOptions {
  /** Ids for new calls; default `newToolCallId`. */
  newId?: () => string;
  /**
   * The output is calls only (a grammar forced it: `tool_choice` "required" or a named function),
   * so what is left unfinished at the end (a cut marker, a call cut before its name was complete)
   * is dropped rather than shown as content.
   */
  forced?: boolean;
}

const ID_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** `call_` + 24 random alphanumerics, the shape OpenAI's ids have. */
export function newToolCallId(): string {
  const bytes = randomBytes(24);
  let id = 'call_';
  // 248 = 4 * 62: rejecting the bytes above it would be exact; the bias of `% 62` over 256 is
  // harmless for an id, so keep it simple.
  for (const b of bytes) id += ID_ALPHABET[b % ID_ALPHABET.length];
  return id;
}

type Step = { content: string; toolCalls: ToolCallDelta[] };

export abstract class CallParserBase implements ToolCallStreamParser, CallSink {
  protected buf = '';
  protected readonly forced: boolean;
  private readonly reader = new CallReader();
  private readonly trimmed = new TrimmedStream();
  private readonly newId: () => string;
  private content = '';
  private deltas: ToolCallDelta[] = [];
  private calls = 0;

  constructor(options: ToolCallParserOptions) {
    this.newId = options.newId ?? newToolCallId;
    this.forced = options.forced ?? false;
  }

  push(text: string): Step {
    this.buf += text;
    this.drain(false);
    return this.take();
  }

  finish(): Step {
    this.drain(true);
    return this.take();
  }

  beginCall(name: string): void {
    const index = this.calls++;
    this.deltas.push({ index, id: this.newId(), name, arguments: '' });
  }

  appendArguments(text: string): void {
    const index = this.calls - 1;
    const last = this.deltas.at(-1);
    // Pieces that arrive in one push go out as one delta.
    if (last !== undefined && last.index === index && last.id === undefined) last.arguments += text;
    else this.deltas.push({ index, arguments: text });
  }

  /** Consume as much of `buf` as can be decided; `final`: no more text will come. */
  protected abstract drain(final: boolean): void;

  protected emitContent(text: string): void {
    if (text.length > 0) this.content += this.trimmed.push(text);
  }

  /** A call read whole (not streamed): its two deltas at once. */
  protected emitCall(call: CallValue): void {
    this.beginCall(call.name);
    this.appendArguments(call.arguments);
  }

  /** Drop the first `n` characters of the pending text (the reader's positions no longer hold). */
  protected consume(n: number): void {
    this.buf = this.buf.slice(n);
    this.reader.start = -1;
  }

  /** The call object that starts at `at` (see CallRead); 'bad' when no object starts there. */
  protected callAt(at: number, final: boolean, needArguments: boolean): CallRead {
    if (at >= this.buf.length) return final ? 'cut' : 'wait';
    if (this.buf.charCodeAt(at) !== 0x7b) return 'bad';
    if (this.reader.start !== at) this.reader.reset(at);
    return this.reader.read(this.buf, final, needArguments, this);
  }

  private take(): Step {
    const out = { content: this.content, toolCalls: this.deltas };
    this.content = '';
    this.deltas = [];
    return out;
  }
}

/** Text in which calls appear as `marker ... end` blocks wherever they start. */
export abstract class MarkedParser extends CallParserBase {
  private inCall = false;
  /** Whitespace right after a call separates it from what follows; it is not content. */
  private afterCall = false;

  constructor(
    private readonly marker: string,
    options: ToolCallParserOptions,
  ) {
    super(options);
  }

  protected drain(final: boolean): void {
    for (;;) {
      if (!this.inCall) {
        if (this.afterCall) {
          this.consume(skipJsonSpace(this.buf, 0));
          if (this.buf.length === 0) return;
          this.afterCall = false;
        }
        const at = this.buf.indexOf(this.marker);
        if (at < 0) {
          // A marker's beginning at the end waits for the rest; at the end of a forced output
          // it was a marker cut short, and goes.
          const partial = final && !this.forced ? 0 : partialMarkerLength(this.buf, this.marker);
          this.emitContent(this.buf.slice(0, this.buf.length - partial));
          this.consume(final ? this.buf.length : this.buf.length - partial);
          return;
        }
        this.emitContent(this.buf.slice(0, at));
        this.consume(at);
        this.inCall = true;
      }
      const step = this.readBlock(final);
      if (step === 'wait') return;
      if (step === 'cut') {
        // The output ended inside a block before any call in it was known: markup, not content.
        this.consume(this.buf.length);
        this.inCall = false;
        return;
      }
      if (step === 'bad') {
        // Not a call after all: the marker is content, and scanning goes on after it.
        this.emitContent(this.marker);
        this.consume(this.marker.length);
      } else {
        this.consume(step);
        this.afterCall = true;
      }
      this.inCall = this.inBlock();
    }
  }

  /**
   * With `buf` at a block: the number of characters it used (its calls emitted), 'wait', 'bad'
   * when nothing in it was a call, or 'cut' when the output ended inside it.
   */
  protected abstract readBlock(final: boolean): number | 'wait' | 'bad' | 'cut';

  /** After `readBlock` consumed text: is `buf` still inside a block? */
  protected inBlock(): boolean {
    return false;
  }
}
