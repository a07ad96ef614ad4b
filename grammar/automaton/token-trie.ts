/**
 * A vocabulary's tokens as a byte trie, built once per Vocabulary: walking it shares the work
 * of every common prefix, and a dead prefix prunes every token under it. Special tokens, EOS
 * and tokens that decode to nothing are left out (a grammar never allows them as text).
 */
import type { Vocabulary } from '../contract.js';

export interface TokenTrie {
  readonly numNodes: number;
  /** Node 0 is the root (the empty prefix). -1 = none. */
  readonly firstChild: Int32Array;
  readonly nextSibling: Int32Array;
  readonly byte: Uint8Array;
  /** Tokens whose bytes end exactly at node n: tokIds[tokStart[n] .. tokStart[n+1]). */
  readonly tokStart: Int32Array;
  readonly tokIds: Int32Array;
  readonly maxDepth: number;
}

const cache = new WeakMap<Vocabulary, TokenTrie>();

export function tokenTrie(vocab: Vocabulary): TokenTrie {
  const hit = cache.get(vocab);
  if (hit) return hit;
  const trie = build(vocab);
  cache.set(vocab, trie);
  return trie;
}

function build(vocab: Vocabulary): TokenTrie {
  const eos = new Set(vocab.eosTokenIds);
  const ids: number[] = [];
  const keys: string[] = [];
  let totalBytes = 0;
  for (let id = 0; id < vocab.size; id++) {
    const b = vocab.tokenBytes[id];
    if (b === null || b === undefined || b.length === 0 || eos.has(id)) continue;
    ids.push(id);
    keys.push(Buffer.from(b.buffer, b.byteOffset, b.length).toString('latin1'));
    totalBytes += b.length;
  }
  // latin1 strings compare code unit by code unit, i.e. byte order: sorted = trie preorder.
  const order = ids.map((_, i) => i).sort((x, y) => (keys[x]! < keys[y]! ? -1 : keys[x]! > keys[y]! ? 1 : ids[x]! - ids[y]!));
  const cap = totalBytes + 1;
  const firstChild = new Int32Array(cap).fill(-1);
  const nextSibling = new Int32Array(cap).fill(-1);
  const byte = new Uint8Array(cap);
  const lastChild = new Int32Array(cap).fill(-1);
  const tokNode = new Int32Array(ids.length);
  let numNodes = 1;
  let maxDepth = 0;
  const path: number[] = [0];
  let prev = '';
  for (let k = 0; k < order.length; k++) {
    const key = keys[order[k]!]!;
    let lcp = 0;
    while (lcp < key.length && lcp < prev.length && key.charCodeAt(lcp) === prev.charCodeAt(lcp)) lcp++;
    path.length = lcp + 1;
    for (let d = lcp; d < key.length; d++) {
      const parent = path[d]!;
      const node = numNodes++;
      byte[node] = key.charCodeAt(d);
      if (lastChild[parent] === -1) firstChild[parent] = node;
      else nextSibling[lastChild[parent]!] = node;
      lastChild[parent] = node;
      path.push(node);
    }
    tokNode[k] = path[key.length]!;
    if (key.length > maxDepth) maxDepth = key.length;
    prev = key;
  }
  // Tokens were visited in preorder, so their nodes are non-decreasing: a CSR by node.
  const tokStart = new Int32Array(numNodes + 1);
  for (let k = 0; k < order.length; k++) tokStart[tokNode[k]! + 1]!++;
  for (let n = 0; n < numNodes; n++) tokStart[n + 1]! += tokStart[n]!;
  const tokIds = new Int32Array(order.length);
  for (let k = 0; k < order.length; k++) tokIds[k] = ids[order[k]!]!;
  return {
    numNodes,
    firstChild: firstChild.subarray(0, numNodes),
    nextSibling: nextSibling.subarray(0, numNodes),
    byte: byte.subarray(0, numNodes),
    tokStart,
    tokIds,
    maxDepth,
  };
}
