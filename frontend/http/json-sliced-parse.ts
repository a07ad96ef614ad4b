/**
 * JSON.parse for a large request body without holding the event loop: JSON.parse of a 16 MB
 * body runs 30–100 ms in one go (and more on a loaded machine), during which `/live` and every
 * other stream wait. Handing the text to a worker thread does not help: the parsed value comes
 * back by structured clone, whose deserialization on this thread costs as much as the parse.
 *
 * Instead the body is parsed here, a slice at a time:
 *   1. json-scan.ts scans the bytes in slices, finding the faults body.ts refuses and cutting
 *      each large container into runs of whole elements (about `pieceBytes` each);
 *   2. each run is decoded and JSON.parse'd on its own (`[` run `]` or `{` run `}`), and the
 *      containers are rebuilt from the pieces, yielding to the event loop between slices.
 * The result equals JSON.parse of the whole text: the same values, keys in the same order, the
 * last of duplicate keys winning, `__proto__` an own property. A large string value (a 16 MB
 * message) is decoded in pieces too, cut between characters and never inside an escape; a
 * surrogate pair cut in two joins again when the pieces are concatenated.
 */
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import { type BigPiece, type ContainerNode, type JsonFault, JsonScanner, type RunPiece } from './json-scan.js';

export interface SlicedParseOptions {
  /** Depth limit for the scan (body.ts's MAX_JSON_DEPTH). */
  depthLimit: number;
  /** Containers at least this large are cut into runs about this large. */
  pieceBytes: number;
  /** Work per slice before yielding to the event loop, in ms. */
  sliceMs: number;
}

/** What went wrong: a fault the scan found, or JSON.parse's error. */
export type SlicedParseResult = { ok: true; value: unknown } | { ok: false; fault: JsonFault } | { ok: false; syntax: string };

/** Small scan steps: a JS loop over bytes is slower per byte than JSON.parse. */
const SCAN_STEP_BYTES = 64 * 1024;

export async function parseJsonSliced(bytes: Buffer, options: SlicedParseOptions): Promise<SlicedParseResult> {
  const scanner = new JsonScanner(bytes, options.depthLimit, options.pieceBytes);
  const clock = new SliceClock(options.sliceMs);
  while (!scanner.done) {
    scanner.step(SCAN_STEP_BYTES);
    await clock.maybeYield();
  }
  if (scanner.fault) return { ok: false, fault: scanner.fault };
  try {
    if (scanner.root === undefined) return { ok: true, value: JSON.parse(bytes.toString('utf8')) as unknown };
    if (!isJsonSpace(bytes, 0, scanner.root.start) || !isJsonSpace(bytes, scanner.root.end, bytes.length)) throw new SyntaxError('unexpected text outside the JSON value');
    return { ok: true, value: await build(bytes, scanner.root, clock, options.pieceBytes) };
  } catch (err) {
    return { ok: false, syntax: (err as Error).message };
  }
}

class SliceClock {
  private since = performance.now();
  constructor(private readonly sliceMs: number) {}

  async maybeYield(): Promise<void> {
    if (performance.now() - this.since < this.sliceMs) return;
    await yieldToLoop();
    this.since = performance.now();
  }
}

async function build(bytes: Buffer, node: ContainerNode, clock: SliceClock, pieceBytes: number): Promise<unknown> {
  if (node.kind === 'string') return buildString(bytes, node, clock, pieceBytes);
  const array: unknown[] = [];
  const object: Record<string, unknown> = {};
  const only = node.pieces.length === 1;
  for (const piece of node.pieces) {
    if (piece.kind === 'run') {
      if (isJsonSpace(bytes, piece.from, piece.to)) {
        if (only) break; // an empty container
        throw new SyntaxError(`unexpected ',' or missing value at byte ${piece.from}`);
      }
      addRun(bytes, node.kind, piece, array, object);
    } else {
      const value = await build(bytes, piece.node, clock, pieceBytes);
      if (node.kind === 'array') {
        if (!isJsonSpace(bytes, piece.from, piece.node.start) || !isJsonSpace(bytes, piece.node.end, piece.to)) throw malformedElement(piece);
        array.push(value);
      } else set(object, memberKey(bytes, piece), value);
    }
    await clock.maybeYield();
  }
  return node.kind === 'array' ? array : object;
}

function addRun(bytes: Buffer, kind: 'array' | 'object', run: RunPiece, array: unknown[], object: Record<string, unknown>): void {
  const text = bytes.toString('utf8', run.from, run.to);
  if (kind === 'array') {
    const values = JSON.parse(`[${text}]`) as unknown[];
    for (const v of values) array.push(v);
    return;
  }
  const members = JSON.parse(`{${text}}`) as Record<string, unknown>;
  for (const key of Object.keys(members)) set(object, key, members[key]);
}

/** A string value's text (inside the quotes) decoded a piece at a time. */
async function buildString(bytes: Buffer, node: ContainerNode, clock: SliceClock, pieceBytes: number): Promise<string> {
  let out = '';
  const to = node.end - 1;
  for (let from = node.start + 1; from < to; ) {
    const cut = safeCut(bytes, from, Math.min(to, from + pieceBytes), to);
    out += JSON.parse(`"${bytes.toString('utf8', from, cut)}"`) as string;
    from = cut;
    await clock.maybeYield();
  }
  return out;
}

/**
 * The cut at or before `cut` (after `from`) that falls between characters and outside escapes;
 * when none is left, the end of the first character or escape after `from`.
 */
function safeCut(bytes: Uint8Array, from: number, cut: number, to: number): number {
  if (cut >= to) return to;
  while (cut > from && (bytes[cut]! & 0xc0) === 0x80) cut--; // not inside a UTF-8 sequence
  // Only the last backslash before the cut can start an escape that runs past it (a `\uXXXX`
  // holds no backslash); it starts one when the run of backslashes it ends is odd.
  for (let p = cut - 1; p >= from && p >= cut - 6; p--) {
    if (bytes[p] !== 0x5c) continue;
    let run = 1;
    while (p - run >= from && bytes[p - run] === 0x5c) run++;
    if (run % 2 === 1 && p + (bytes[p + 1] === 0x75 ? 6 : 2) > cut) cut = p;
    break;
  }
  if (cut > from) return cut;
  const b = bytes[from]!;
  const step = b === 0x5c ? (bytes[from + 1] === 0x75 ? 6 : 2) : b < 0x80 ? 1 : b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : 2;
  return Math.min(to, from + step);
}

/** `"key" :` before a large member's value. */
function memberKey(bytes: Buffer, piece: BigPiece): string {
  if (!isJsonSpace(bytes, piece.node.end, piece.to)) throw malformedElement(piece);
  const head = bytes.toString('utf8', piece.from, piece.node.start);
  const match = /^[ \t\n\r]*("(?:[^"\\]|\\.)*")[ \t\n\r]*:[ \t\n\r]*$/.exec(head);
  if (!match) throw malformedElement(piece);
  return JSON.parse(match[1]!) as string;
}

/** As JSON.parse sets a member: an own data property, even for `__proto__`. */
function set(object: Record<string, unknown>, key: string, value: unknown): void {
  if (key === '__proto__') Object.defineProperty(object, key, { value, writable: true, enumerable: true, configurable: true });
  else object[key] = value;
}

function isJsonSpace(bytes: Uint8Array, from: number, to: number): boolean {
  for (let i = from; i < to; i++) {
    const b = bytes[i];
    if (b !== 0x20 && b !== 0x0a && b !== 0x0d && b !== 0x09) return false;
  }
  return true;
}

function malformedElement(piece: BigPiece): SyntaxError {
  return new SyntaxError(`unexpected text around the value at byte ${piece.node.start}`);
}
