/**
 * One pass over a JSON body's bytes, resumable so a large body can be scanned in time slices:
 * - the faults JSON.parse lets through but the frontend refuses: nesting deeper than a limit,
 *   and a `\uD800`–`\uDFFF` escape that is not half of a high-then-low pair;
 * - optionally, the body's large containers (at least `pieceBytes`) cut into pieces at element
 *   boundaries, and its large string values, so that json-sliced-parse.ts can JSON.parse a large
 *   body a piece at a time.
 *
 * Brackets, quotes, commas and escapes are ASCII, and UTF-8 continuation bytes never equal
 * them, so bytes are scanned directly. Malformed JSON is mostly left to JSON.parse; the scan only
 * refuses what the piecewise parse could otherwise let through (brackets that do not match, text
 * after the value).
 */

export type JsonFault = { kind: 'too_deep' } | { kind: 'lone_surrogate'; offset: number } | { kind: 'malformed'; offset: number };

/** A run of whole elements, [from, to) bytes, the commas between them included. */
export interface RunPiece {
  kind: 'run';
  from: number;
  to: number;
}

/** One element holding a large container: [from, to) is the element, `node` the container. */
export interface BigPiece {
  kind: 'big';
  from: number;
  to: number;
  node: ContainerNode;
}

/** A large array or object, as the pieces its elements were cut into; or a large string value (no pieces). */
export interface ContainerNode {
  kind: 'array' | 'object' | 'string';
  start: number;
  end: number;
  pieces: Array<RunPiece | BigPiece>;
}

interface Frame {
  kind: 'array' | 'object';
  start: number;
  elemStart: number;
  runStart: number;
  pieces: Array<RunPiece | BigPiece>;
  /** A large value that ended inside the element now being read. */
  big: ContainerNode | undefined;
  /** In an object, before the element's `:` (a string here is a key). */
  key: boolean;
}

export class JsonScanner {
  /** Bytes scanned so far. */
  pos = 0;
  fault: JsonFault | undefined;
  /** The root value, when it is a container of at least `pieceBytes` (recording only). */
  root: ContainerNode | undefined;
  private depth = 0;
  private inString = false;
  private rootEnded = false;
  private stringStart = 0;
  private readonly frames: Frame[] = [];

  /** `pieceBytes`: record containers at least this large, cut into runs about this large; 0: record nothing. */
  constructor(
    private readonly bytes: Uint8Array,
    private readonly depthLimit: number,
    private readonly pieceBytes = 0,
  ) {}

  get done(): boolean {
    return this.fault !== undefined || this.pos >= this.bytes.length;
  }

  /** Scan up to `count` more bytes (a little more to finish an escape). */
  step(count: number): void {
    const bytes = this.bytes;
    const stop = Math.min(bytes.length, this.pos + count);
    const record = this.pieceBytes > 0;
    let i = this.pos;
    for (; i < stop && this.fault === undefined; i++) {
      const b = bytes[i]!;
      if (this.inString) {
        if (b === 0x22) {
          this.inString = false;
          if (record && i + 1 - this.stringStart >= this.pieceBytes) this.bigString(i + 1);
        } else if (b !== 0x5c) continue;
        else if (bytes[i + 1] !== 0x75) i++; // backslash: skip the escaped byte
        else {
          const unit = hex4(bytes, i + 2);
          if (unit >= 0xd800 && unit <= 0xdbff) {
            const low = bytes[i + 6] === 0x5c && bytes[i + 7] === 0x75 ? hex4(bytes, i + 8) : -1;
            if (low < 0xdc00 || low > 0xdfff) this.fault = { kind: 'lone_surrogate', offset: i };
            else i += 11;
          } else if (unit >= 0xdc00 && unit <= 0xdfff) this.fault = { kind: 'lone_surrogate', offset: i };
          else i += 5;
        }
        continue;
      }
      if (b === 0x22) {
        this.inString = true;
        this.stringStart = i;
        if (record) this.atValue(i);
      } else if (b === 0x5b || b === 0x7b) {
        if (++this.depth > this.depthLimit) this.fault = { kind: 'too_deep' };
        else if (record) {
          this.atValue(i);
          this.frames.push({ kind: b === 0x5b ? 'array' : 'object', start: i, elemStart: i + 1, runStart: i + 1, pieces: [], big: undefined, key: b === 0x7b });
        }
      } else if (b === 0x5d || b === 0x7d) {
        this.depth--;
        if (record) this.close(i, b === 0x5d ? 'array' : 'object');
      } else if (record) {
        if (b === 0x2c) {
          const frame = this.frames.at(-1);
          if (frame) this.endElement(frame, i);
        } else if (b === 0x3a) {
          const frame = this.frames.at(-1);
          if (frame) frame.key = false;
        } else if (b !== 0x20 && b !== 0x0a && b !== 0x0d && b !== 0x09) this.atValue(i);
      }
    }
    this.pos = i;
  }

  /** Run to the end (small bodies). */
  finish(): JsonFault | undefined {
    while (!this.done) this.step(this.bytes.length);
    return this.fault;
  }

  /** A value starts (or goes on) at `i` outside any container: only one root value is allowed. */
  private atValue(i: number): void {
    if (this.frames.length === 0 && this.rootEnded) this.fault = { kind: 'malformed', offset: i };
  }

  /** A string value of at least `pieceBytes` ended at `end` (keys stay in their runs). */
  private bigString(end: number): void {
    const frame = this.frames.at(-1);
    if (frame?.key) return;
    this.attach(frame, { kind: 'string', start: this.stringStart, end, pieces: [] });
  }

  private attach(parent: Frame | undefined, node: ContainerNode | undefined): void {
    if (parent === undefined) {
      this.rootEnded = true;
      this.root = node;
    } else if (node) {
      // Two values in one element is malformed; the element's text check will say so.
      if (parent.big) this.fault = { kind: 'malformed', offset: node.start };
      parent.big = node;
    }
  }

  private close(i: number, kind: 'array' | 'object'): void {
    const frame = this.frames.pop();
    if (frame === undefined || frame.kind !== kind) {
      this.fault = { kind: 'malformed', offset: i };
      return;
    }
    const end = i + 1;
    const large = end - frame.start >= this.pieceBytes;
    if (large) this.endElement(frame, i, true);
    const node: ContainerNode | undefined = large ? { kind, start: frame.start, end, pieces: frame.pieces } : undefined;
    this.attach(this.frames.at(-1), node);
  }

  /** The element of `frame` that began at `frame.elemStart` ends at `at` (a comma, or the closer). */
  private endElement(frame: Frame, at: number, last = false): void {
    if (frame.big) {
      if (frame.elemStart > frame.runStart) frame.pieces.push({ kind: 'run', from: frame.runStart, to: frame.elemStart - 1 });
      frame.pieces.push({ kind: 'big', from: frame.elemStart, to: at, node: frame.big });
      frame.big = undefined;
      frame.runStart = at + 1;
    } else if (last || at - frame.runStart >= this.pieceBytes) {
      // At the closer the last run always goes in, blank or not: a blank one is an empty
      // container when alone, a trailing comma otherwise (refused when the pieces are parsed).
      frame.pieces.push({ kind: 'run', from: frame.runStart, to: at });
      frame.runStart = at + 1;
    }
    frame.elemStart = at + 1;
    frame.key = frame.kind === 'object';
  }
}

/** The value of four hex digits at `at`, or -1 (bad digits are JSON.parse's to report). */
function hex4(bytes: Uint8Array, at: number): number {
  let value = 0;
  for (let k = at; k < at + 4; k++) {
    const c = bytes[k];
    const digit = c === undefined ? -1 : c >= 0x30 && c <= 0x39 ? c - 0x30 : c >= 0x61 && c <= 0x66 ? c - 0x57 : c >= 0x41 && c <= 0x46 ? c - 0x37 : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}
