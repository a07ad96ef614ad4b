/**
 * Token classes of many nodes in one ArrayBuffer, so a compile thread hands a whole grammar's
 * classes to the event loop as one transfer. Per node, in 32-bit words:
 *   node, flags (1: accepted as a mask), numAccepted, acceptedLen, leavingLen, uncertainLen,
 *   then the accepted mask or list, the leaving list, the uncertain list.
 * Unpacked classes are views into the buffer (no copy); the buffer lives as long as they do.
 * A receiver indexes the buffer (one pass over the headers) and decodes a node's classes when
 * it is first met, so adopting a big grammar costs the event loop next to nothing.
 */
import type { Automaton } from './automaton.js';
import type { ClassifiedNode } from './matcher.js';
import type { NodeClasses } from './token-classes.js';

const HEADER = 6;

export function classesBytes(c: NodeClasses): number {
  const l = c.local;
  return (l.acceptedMask?.byteLength ?? 0) + (l.acceptedList?.byteLength ?? 0) + l.leaving.byteLength + c.uncertain.byteLength + 64;
}

/** Bytes of an automaton's arrays (its weight in a cache). */
export function automatonBytes(a: Automaton): number {
  let n = 0;
  for (const v of Object.values(a)) if (ArrayBuffer.isView(v)) n += v.byteLength;
  return n + a.ruleKeys.length * 64;
}

export function packClasses(classes: readonly ClassifiedNode[]): ArrayBuffer {
  let words = 0;
  for (const { classes: c } of classes) {
    const l = c.local;
    words += HEADER + (l.acceptedMask?.length ?? l.acceptedList?.length ?? 0) + l.leaving.length + c.uncertain.length;
  }
  const out = new Int32Array(words);
  const asU32 = new Uint32Array(out.buffer);
  let at = 0;
  for (const { node, classes: c } of classes) {
    const l = c.local;
    const accepted = l.acceptedMask ?? l.acceptedList!;
    out[at++] = node;
    out[at++] = l.acceptedMask !== null ? 1 : 0;
    out[at++] = l.numAccepted;
    out[at++] = accepted.length;
    out[at++] = l.leaving.length;
    out[at++] = c.uncertain.length;
    if (l.acceptedMask !== null) asU32.set(l.acceptedMask, at);
    else out.set(l.acceptedList!, at);
    at += accepted.length;
    out.set(l.leaving, at);
    at += l.leaving.length;
    out.set(c.uncertain, at);
    at += c.uncertain.length;
  }
  return out.buffer;
}

/** Word offset of each node's record in `buffer` (-1: not in it), for `unpackAt`. */
export function indexPacked(buffer: ArrayBuffer, numNodes: number): Int32Array {
  const words = new Int32Array(buffer);
  const offsets = new Int32Array(numNodes).fill(-1);
  for (let at = 0; at < words.length; at += HEADER + words[at + 3]! + words[at + 4]! + words[at + 5]!) offsets[words[at]!] = at;
  return offsets;
}

/** The classes of the record at word offset `at`, as views into `buffer`. */
export function unpackAt(buffer: ArrayBuffer, at: number): NodeClasses {
  const words = new Int32Array(buffer, at * 4, HEADER);
  const isMask = words[1] === 1;
  const numAccepted = words[2]!;
  const acceptedLen = words[3]!;
  const leavingLen = words[4]!;
  const uncertainLen = words[5]!;
  let o = at + HEADER;
  const acceptedMask = isMask ? new Uint32Array(buffer, o * 4, acceptedLen) : null;
  const acceptedList = isMask ? null : new Int32Array(buffer, o * 4, acceptedLen);
  o += acceptedLen;
  const leaving = new Int32Array(buffer, o * 4, leavingLen);
  o += leavingLen;
  const uncertain = new Int32Array(buffer, o * 4, uncertainLen);
  return { local: { acceptedMask, acceptedList, numAccepted, leaving }, uncertain };
}

/** Every record of `buffer`, decoded (tests). */
export function unpackClasses(buffer: ArrayBuffer): ClassifiedNode[] {
  const words = new Int32Array(buffer);
  const out: ClassifiedNode[] = [];
  for (let at = 0; at < words.length; at += HEADER + words[at + 3]! + words[at + 4]! + words[at + 5]!) out.push({ node: words[at]!, classes: unpackAt(buffer, at) });
  return out;
}
