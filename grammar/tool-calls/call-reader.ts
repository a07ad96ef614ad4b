/**
 * Reads one call object, `{"name": ..., "arguments": {...}}`, out of text that grows, and streams
 * it as OpenAI does: the call's id and name as soon as the name is complete and the arguments
 * object has begun, then the arguments text piece by piece as it arrives. A call cut off by
 * `max_tokens` has therefore already reached the client as a partial `tool_calls` entry.
 *
 * The streamed arguments are the model's text less the whitespace outside strings (compact
 * JSON, as JSON.stringify writes it for the usual values), so their concatenation is the same
 * whatever the chunking. An object in any other shape (keys in another order, double-encoded
 * arguments, no arguments key) is read whole once it closes, as `readCall` decides.
 */
import { skipJsonSpace } from '../stream-text.js';

export interface CallValue {
  name: string;
  arguments: string;
}

/** Where the reader reports what it read: a call's start (id and name), then argument text. */
export interface CallSink {
  beginCall(name: string): void;
  appendArguments(text: string): void;
}

/**
 * A call in a stream: `end` is the index just past the object (the text's end for a streamed
 * call cut short); `call` is set when the object was read whole and not emitted yet (the format
 * still decides whether what follows makes it a call). 'wait': more text may decide. 'bad': not
 * a call (nothing was emitted). 'cut': the text ended inside an object that was never a call
 * yet (nothing was emitted; it is markup, not content).
 */
export type CallRead = { end: number; call?: CallValue } | 'wait' | 'bad' | 'cut';

/**
 * Finds where a JSON object (or array) ends, resumably: the text only grows while a call is
 * pending, so each step scans only the new characters.
 */
export class ObjectScan {
  private pos = 0;
  private depth = 0;
  private inString = false;
  private escaped = false;
  private closedAt = -1;

  reset(start: number): void {
    this.pos = start;
    this.closedAt = -1;
    this.depth = 0;
    this.inString = false;
    this.escaped = false;
  }

  /** Index just past the bracket that closes the value at `start`, or -1 if the text ends first. */
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

/** Drops JSON whitespace outside strings, across chunks. */
class CompactJson {
  private inString = false;
  private escaped = false;

  push(text: string): string {
    let out = '';
    let from = 0;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (this.inString) {
        if (this.escaped) this.escaped = false;
        else if (c === 0x5c) this.escaped = true;
        else if (c === 0x22) this.inString = false;
      } else if (c === 0x22) this.inString = true;
      else if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) {
        out += text.slice(from, i);
        from = i + 1;
      }
    }
    return from === 0 ? text : out + text.slice(from);
  }
}

/** The head of a streamable call: `{ "name" : "<name>" , "arguments"|"parameters" : ` then `{`. */
type Head = { kind: 'match'; name: string; argsAt: number } | 'wait' | 'other';

/**
 * A head longer than this is not a tool call's (names are short); it is read whole instead.
 * The cap also keeps re-reading the head on every push linear in the output.
 */
const MAX_HEAD_CHARS = 1024;

function readHead(text: string, start: number): Head {
  // Decided on the first MAX_HEAD_CHARS only, so the answer does not depend on the chunking.
  const capped = text.length - start > MAX_HEAD_CHARS;
  const head = readHeadIn(capped ? text.slice(0, start + MAX_HEAD_CHARS) : text, start);
  return head === 'wait' && capped ? 'other' : head;
}

function readHeadIn(text: string, start: number): Head {
  let i = start + 1; // past '{'
  const key = readString(text, skipJsonSpace(text, i));
  if (key === 'wait' || key === 'other') return key;
  if (key.value !== 'name') return 'other';
  i = skipJsonSpace(text, key.end);
  if (i >= text.length) return 'wait';
  if (text[i] !== ':') return 'other';
  const name = readString(text, skipJsonSpace(text, i + 1));
  if (name === 'wait' || name === 'other') return name;
  if (name.value.length === 0) return 'other';
  i = skipJsonSpace(text, name.end);
  if (i >= text.length) return 'wait';
  if (text[i] !== ',') return 'other';
  const args = readString(text, skipJsonSpace(text, i + 1));
  if (args === 'wait' || args === 'other') return args;
  if (args.value !== 'arguments' && args.value !== 'parameters') return 'other';
  i = skipJsonSpace(text, args.end);
  if (i >= text.length) return 'wait';
  if (text[i] !== ':') return 'other';
  i = skipJsonSpace(text, i + 1);
  if (i >= text.length) return 'wait';
  return text[i] === '{' ? { kind: 'match', name: name.value, argsAt: i } : 'other';
}

/** A complete JSON string at `at`: its value and the index past its closing quote. */
function readString(text: string, at: number): { value: string; end: number } | 'wait' | 'other' {
  if (at >= text.length) return 'wait';
  if (text[at] !== '"') return 'other';
  for (let i = at + 1; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x5c) i++;
    else if (c === 0x22) {
      try {
        return { value: JSON.parse(text.slice(at, i + 1)) as string, end: i + 1 };
      } catch {
        return 'other';
      }
    }
  }
  return 'wait';
}

/**
 * A call object read whole: {"name": string, <arguments key>: object}. Either key name is
 * accepted for the arguments; a string holding a JSON object (some models double-encode) is
 * unwrapped. `needArguments`: the object must carry the arguments key (bare Llama JSON, where a
 * plain JSON answer with a "name" field must not read as a call).
 */
export function readCall(json: string, needArguments: boolean): CallValue | undefined {
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

/** One call object at a fixed start in a growing text. */
export class CallReader {
  /** Index of the object's `{` in the text, -1 when unused. */
  start = -1;
  private phase: 'head' | 'args' | 'after-args' | 'whole' = 'head';
  private readonly object = new ObjectScan();
  private readonly argsScan = new ObjectScan();
  private compact = new CompactJson();
  private argsSent = 0;
  private whole: CallValue | undefined;

  reset(start: number): void {
    this.start = start;
    this.phase = 'head';
    this.object.reset(start);
    this.whole = undefined;
  }

  /** Whether the call's id and name went out (it is a call now, whatever follows). */
  get streamed(): boolean {
    return this.phase === 'args' || this.phase === 'after-args';
  }

  /** Read on in `text`; `final`: no more text will come. */
  read(text: string, final: boolean, needArguments: boolean, sink: CallSink): CallRead {
    const end = this.object.end(text);
    if (this.phase === 'head') {
      const head = readHead(text, this.start);
      if (head === 'wait' && end < 0) return final ? 'cut' : 'wait';
      if (typeof head === 'object') {
        sink.beginCall(head.name);
        this.phase = 'args';
        this.argsScan.reset(head.argsAt);
        this.argsSent = head.argsAt;
        this.compact = new CompactJson();
      } else this.phase = 'whole';
    }
    if (this.phase === 'args') {
      const argsEnd = this.argsScan.end(text);
      const upTo = argsEnd >= 0 ? argsEnd : text.length;
      if (upTo > this.argsSent) {
        const piece = this.compact.push(text.slice(this.argsSent, upTo));
        if (piece.length > 0) sink.appendArguments(piece);
        this.argsSent = upTo;
      }
      if (argsEnd >= 0) this.phase = 'after-args';
    }
    if (this.phase !== 'whole') {
      if (end >= 0) return { end };
      return final ? { end: text.length } : 'wait';
    }
    if (end < 0) return final ? 'cut' : 'wait';
    this.whole ??= readCall(text.slice(this.start, end), needArguments);
    return this.whole ? { end, call: this.whole } : 'bad';
  }
}
