/**
 * Reads tool calls back out of a model's text, in the framing of grammar/tool-calls/formats.ts
 * (the table the forcing grammar reads too), streamed or whole.
 *
 * One state machine per format serves both: `parseToolCalls` is the stream parser fed the whole
 * text at once, so a streamed response and a unary one agree wherever the chunks break.
 * Every decision waits until the text that decides it has arrived (a marker split across
 * chunks, a JSON object not yet closed), so the result never depends on chunk boundaries.
 *
 * A call is emitted whole once its JSON object is complete and valid: two deltas, the first
 * with id and name (and empty arguments, as OpenAI streams them), the second with the compact
 * arguments JSON. Text that looked like a call but is not one (malformed JSON, no name, an
 * unclosed object at the end) stays content. Content is the text outside calls, trimmed.
 */
import { randomBytes } from 'node:crypto';
import type { ToolCallFormatName } from '../../proto/wire.js';
import { TrimmedStream, partialMarkerLength, skipJsonSpace } from '../stream-text.js';
import { TOOL_CALL_FORMATS } from './formats.js';

export interface ToolCallDelta {
  index: number;
  id?: string;
  name?: string;
  arguments?: string;
}

export interface ParsedToolCall {
  id: string;
  name: string;
  /** JSON text of the arguments object. */
  arguments: string;
}

export interface ToolCallStreamParser {
  /** Feed the next decoded text. Returns text that is plain content (safe to stream now) and call deltas. */
  push(text: string): { content: string; toolCalls: ToolCallDelta[] };
  /** End of output: flush held-back text (an unfinished call that never parsed becomes content). */
  finish(): { content: string; toolCalls: ToolCallDelta[] };
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

/** Llama 3.1's token before a tool call; the JSON format may or may not put it first. */
export const LLAMA_PYTHON_TAG = '<|python_tag|>';

/** The framing each parser looks for, derived from the shared table. */
const HERMES_START = TOOL_CALL_FORMATS.hermes.callPrefix.trim();
const HERMES_END = TOOL_CALL_FORMATS.hermes.callSuffix.trim();
const MISTRAL_OPEN = TOOL_CALL_FORMATS.mistral.open.trim();
/** `[TOOL_CALLS]`: the open text less the JSON array's bracket, which models sometimes leave out. */
const MISTRAL_MARKER = MISTRAL_OPEN.endsWith('[') ? MISTRAL_OPEN.slice(0, -1).trimEnd() : MISTRAL_OPEN;
const MISTRAL_SEPARATOR = TOOL_CALL_FORMATS.mistral.separator.trim();
const MISTRAL_CLOSE = TOOL_CALL_FORMATS.mistral.close.trim();
const LLAMA_SEPARATOR = TOOL_CALL_FORMATS.llama3_json.separator.trim();

/** The text that starts a call (or a list of calls) in each format; none for Llama's bare JSON. */
export function toolCallMarker(format: ToolCallFormatName): string | undefined {
  return format === 'hermes' ? HERMES_START : format === 'mistral' ? MISTRAL_MARKER : undefined;
}

/**
 * Finds where a JSON object ends, resumably: the text only grows while a call is pending, so
 * each push scans only the new characters.
 */
class ObjectScan {
  start = -1;
  private pos = 0;
  private depth = 0;
  private inString = false;
  private escaped = false;
  private closedAt = -1;
  /** The call read from the closed object, kept so waiting for what follows does not parse it again. */
  call: CallValue | undefined;

  reset(start: number): void {
    this.start = start;
    this.pos = start;
    this.closedAt = -1;
    this.call = undefined;
    this.depth = 0;
    this.inString = false;
    this.escaped = false;
  }

  /** Index just past the brace that closes the object at `start`, or -1 if the text ends first. */
  end(text: string): number {
    if (this.closedAt >= 0) return this.closedAt;
    for (let i = this.pos; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (this.inString) {
        if (this.escaped) this.escaped = false;
        else if (c === 0x5c) this.escaped = true;
        else if (c === 0x22) this.inString = false;
        continue;
      }
      if (c === 0x22) this.inString = true;
      else if (c === 0x7b || c === 0x5b) this.depth++;
      else if (c === 0x7d || c === 0x5d) {
        this.depth--;
        if (this.depth === 0) {
          this.closedAt = i + 1;
          return i + 1;
        }
      }
    }
    this.pos = text.length;
    return -1;
  }
}

interface CallValue {
  name: string;
  arguments: string;
}

/**
 * A call object: {"name": string, <arguments key>: object}. Either key name is accepted for
 * the arguments; a string holding a JSON object (some models double-encode) is unwrapped.
 * `needArguments`: the object must carry the arguments key (bare Llama JSON, where a plain JSON
 * answer with a "name" field must not read as a call).
 */
function readCall(json: string, needArguments: boolean): CallValue | undefined {
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch {
    return undefined;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const obj = value as Record<string, unknown>;
  if (typeof obj.name !== 'string' || obj.name.length === 0) return undefined;
  const key = 'arguments' in obj ? 'arguments' : 'parameters' in obj ? 'parameters' : undefined;
  if (key === undefined) return needArguments ? undefined : { name: obj.name, arguments: '{}' };
  let args = obj[key];
  if (typeof args === 'string') {
    try {
      args = JSON.parse(args);
    } catch {
      return undefined;
    }
  }
  if (args === null) return { name: obj.name, arguments: '{}' };
  if (typeof args !== 'object' || Array.isArray(args)) return undefined;
  return { name: obj.name, arguments: JSON.stringify(args) };
}

type Step = { content: string; toolCalls: ToolCallDelta[] };

/** What the format parsers share: the pending text, trimmed content out, numbered call deltas out. */
abstract class CallParserBase implements ToolCallStreamParser {
  protected buf = '';
  protected readonly scan = new ObjectScan();
  private readonly trimmed = new TrimmedStream();
  private content = '';
  private deltas: ToolCallDelta[] = [];
  private calls = 0;

  constructor(private readonly newId: () => string) {}

  push(text: string): Step {
    this.buf += text;
    this.drain(false);
    return this.take();
  }

  finish(): Step {
    this.drain(true);
    return this.take();
  }

  /** Consume as much of `buf` as can be decided; `final`: no more text will come. */
  protected abstract drain(final: boolean): void;

  protected emitContent(text: string): void {
    if (text.length > 0) this.content += this.trimmed.push(text);
  }

  protected emitCall(call: CallValue): void {
    const index = this.calls++;
    this.deltas.push({ index, id: this.newId(), name: call.name, arguments: '' }, { index, arguments: call.arguments });
  }

  /** Drop the first `n` characters of the pending text (the scan's positions no longer hold). */
  protected consume(n: number): void {
    this.buf = this.buf.slice(n);
    this.scan.start = -1;
  }

  /**
   * The object that starts at `at`: a call, 'wait' (not closed yet and more text may come) or
   * 'bad' (not an object, not a call, or never closed). Returns the end index with a call.
   */
  protected objectAt(at: number, final: boolean, needArguments: boolean): { call: CallValue; end: number } | 'wait' | 'bad' {
    if (at >= this.buf.length) return final ? 'bad' : 'wait';
    if (this.buf.charCodeAt(at) !== 0x7b) return 'bad';
    if (this.scan.start !== at) this.scan.reset(at);
    const end = this.scan.end(this.buf);
    if (end < 0) return final ? 'bad' : 'wait';
    this.scan.call ??= readCall(this.buf.slice(at, end), needArguments);
    return this.scan.call ? { call: this.scan.call, end } : 'bad';
  }

  private take(): Step {
    const out = { content: this.content, toolCalls: this.deltas };
    this.content = '';
    this.deltas = [];
    return out;
  }
}

/** Text in which calls appear as `marker ... end` blocks wherever they start. */
abstract class MarkedParser extends CallParserBase {
  private inCall = false;
  /** Whitespace right after a call separates it from what follows; it is not content. */
  private afterCall = false;

  constructor(
    private readonly marker: string,
    newId: () => string,
  ) {
    super(newId);
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
          const hold = final ? 0 : partialMarkerLength(this.buf, this.marker);
          this.emitContent(this.buf.slice(0, this.buf.length - hold));
          this.consume(this.buf.length - hold);
          return;
        }
        this.emitContent(this.buf.slice(0, at));
        this.consume(at);
        this.inCall = true;
      }
      const step = this.readBlock(final);
      if (step === 'wait') return;
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
   * With `buf` at a block: the number of characters it used (its calls emitted), 'wait', or
   * 'bad' when nothing in it was a call.
   */
  protected abstract readBlock(final: boolean): number | 'wait' | 'bad';

  /** After `readBlock` consumed text: is `buf` still inside a block? */
  protected inBlock(): boolean {
    return false;
  }
}

/** Hermes / Qwen: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, any spacing. */
class HermesParser extends MarkedParser {
  constructor(newId: () => string) {
    super(HERMES_START, newId);
  }

  protected readBlock(final: boolean): number | 'wait' | 'bad' {
    const found = this.objectAt(skipJsonSpace(this.buf, HERMES_START.length), final, false);
    if (typeof found === 'string') return found;
    const after = skipJsonSpace(this.buf, found.end);
    if (this.buf.startsWith(HERMES_END, after)) {
      this.emitCall(found.call);
      return after + HERMES_END.length;
    }
    // The closing tag may still be on its way; at the end a missing or cut one is forgiven.
    if (!HERMES_END.startsWith(this.buf.slice(after))) return 'bad';
    if (!final) return 'wait';
    this.emitCall(found.call);
    return this.buf.length;
  }
}

/** Mistral: `[TOOL_CALLS][{...}, {...}]`; the `[` ... `]` may be missing. */
class MistralParser extends MarkedParser {
  /** Inside a list after at least one call: `buf` starts just after the last one. */
  private listOpen = false;
  private bracketed = false;

  constructor(newId: () => string) {
    super(MISTRAL_MARKER, newId);
  }

  protected override inBlock(): boolean {
    return this.listOpen;
  }

  protected readBlock(final: boolean): number | 'wait' | 'bad' {
    return this.listOpen ? this.readNext(final) : this.readFirst(final);
  }

  private readFirst(final: boolean): number | 'wait' | 'bad' {
    let at = skipJsonSpace(this.buf, MISTRAL_MARKER.length);
    if (at >= this.buf.length) return final ? 'bad' : 'wait';
    const bracketed = this.buf.startsWith('[', at);
    if (bracketed) at = skipJsonSpace(this.buf, at + 1);
    const found = this.objectAt(at, final, false);
    if (typeof found === 'string') return found;
    this.emitCall(found.call);
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
    const found = this.objectAt(next, final, false);
    if (found === 'wait') return 'wait';
    if (found === 'bad') return this.endList(0);
    this.emitCall(found.call);
    return found.end;
  }

  /** The list is over; `used` characters belong to it and the rest is text again. */
  private endList(used: number): number {
    this.listOpen = false;
    return used;
  }
}

/**
 * Llama 3.x JSON: the output is calls only if it starts (after whitespace and an optional
 * `<|python_tag|>`) with a call object; then calls separated by `;` (or nothing but
 * whitespace). Whatever follows the last call, and a whole output that does not start with
 * one, is content.
 */
class Llama3JsonParser extends CallParserBase {
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
    if (this.buf.startsWith(LLAMA_PYTHON_TAG, at)) at = skipJsonSpace(this.buf, at + LLAMA_PYTHON_TAG.length);
    else if (!final && this.buf.length - at < LLAMA_PYTHON_TAG.length && LLAMA_PYTHON_TAG.startsWith(this.buf.slice(at))) return 'wait';
    const found = this.objectAt(at, final, true);
    if (found === 'wait') return 'wait';
    if (found === 'bad') return 'text';
    this.emitCall(found.call);
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
    const found = this.objectAt(at, final, true);
    if (found === 'wait') return 'wait';
    if (found === 'bad') return 'text';
    this.emitCall(found.call);
    return found.end;
  }
}

export function createToolCallStreamParser(format: ToolCallFormatName, newId: () => string = newToolCallId): ToolCallStreamParser {
  switch (format) {
    case 'hermes':
      return new HermesParser(newId);
    case 'mistral':
      return new MistralParser(newId);
    case 'llama3_json':
      return new Llama3JsonParser(newId);
    default:
      throw new Error(`unknown tool-call format "${String(format)}"`);
  }
}

/** Unary: whole text in. Content = text outside calls (trimmed); calls in order. Malformed call text stays content. */
export function parseToolCalls(format: ToolCallFormatName, text: string, newId: () => string = newToolCallId): { content: string; toolCalls: ParsedToolCall[] } {
  const parser = createToolCallStreamParser(format, newId);
  const first = parser.push(text);
  const last = parser.finish();
  const toolCalls: ParsedToolCall[] = [];
  for (const delta of [...first.toolCalls, ...last.toolCalls]) {
    if (delta.id !== undefined) toolCalls[delta.index] = { id: delta.id, name: delta.name ?? '', arguments: delta.arguments ?? '' };
    else toolCalls[delta.index]!.arguments += delta.arguments ?? '';
  }
  return { content: first.content + last.content, toolCalls };
}
