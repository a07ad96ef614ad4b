/**
 * XGrammar's adaptive token mask, per automaton node that reads bytes:
 *  - accepted: tokens the node's own rule consumes entirely, whatever the stack below holds;
 *  - uncertain: tokens that leave the rule before they end and survive in some calling
 *    context; only these are checked against the real stack at run time;
 *  - everything else is rejected.
 *
 * The local part (accepted + the tokens that leave the rule) depends only on the rule's
 * structure and the vocabulary, so it is shared across grammars by (vocabulary, rule key,
 * node offset): every JSON schema's string rule, say, is classified once per tokenizer.
 * Classification walks the token trie once per node; a dead prefix prunes its whole subtree.
 */
import type { Vocabulary } from '../contract.js';
import type { Automaton } from './automaton.js';
import { Mode, type Stepper, type ThreadSet } from './threads.js';
import { type TokenTrie, tokenTrie } from './token-trie.js';
import { localDfa } from './local-dfa.js';
import { LruMap } from '../../runtime/lru.js';

export interface LocalClasses {
  /** Bitmask of accepted tokens when that is smaller than a list, else null. */
  readonly acceptedMask: Uint32Array | null;
  readonly acceptedList: Int32Array | null;
  readonly numAccepted: number;
  /** Tokens that leave the rule before their last byte (context decides). */
  readonly leaving: Int32Array;
}

export interface NodeClasses {
  readonly local: LocalClasses;
  /** `leaving` tokens that some calling context accepts: checked against the real stack. */
  readonly uncertain: Int32Array;
}

/** Bound on the shared local classifications, in bytes of masks and lists. */
const SHARED_BYTES_LIMIT = 256 * 1024 * 1024;
const shared = new LruMap<string, LocalClasses>({ maxWeight: SHARED_BYTES_LIMIT, weigh: sizeOf });

function sizeOf(c: LocalClasses): number {
  return (c.acceptedMask?.byteLength ?? 0) + (c.acceptedList?.byteLength ?? 0) + c.leaving.byteLength + 64;
}

/** Classifications computed in this thread since start (tests: work done elsewhere is not counted). */
export let localClassifications = 0;

function sharedKey(a: Automaton, node: number, vocab: Vocabulary): string {
  const rule = a.ruleOf[node]!;
  return `${vocab.id}|${a.ruleKeys[rule]}|${node - a.ruleStart[rule]!}`;
}

/**
 * Adopt a classification computed elsewhere (another thread), unless one is already shared.
 * The shared copy owns its arrays: `c` may be a view into a grammar's transfer buffer, which
 * must not outlive that grammar.
 */
export function adoptLocalClasses(a: Automaton, node: number, vocab: Vocabulary, c: LocalClasses): LocalClasses {
  const key = sharedKey(a, node, vocab);
  const hit = shared.peek(key);
  if (hit) return hit;
  const own: LocalClasses = {
    acceptedMask: c.acceptedMask?.slice() ?? null,
    acceptedList: c.acceptedList?.slice() ?? null,
    numAccepted: c.numAccepted,
    leaving: c.leaving.slice(),
  };
  shared.set(key, own);
  return own;
}

export function localClassesFor(a: Automaton, node: number, vocab: Vocabulary): LocalClasses {
  const key = sharedKey(a, node, vocab);
  const hit = shared.get(key);
  if (hit) return hit;
  const c = classifyLocal(a, node, vocab);
  localClassifications++;
  shared.set(key, c);
  return c;
}

/** Drops every shared classification (tests and benchmarks measuring cold compiles). */
export function clearSharedTokenClasses(): void {
  shared.clear();
}

function classifyLocal(a: Automaton, node: number, vocab: Vocabulary): LocalClasses {
  const trie = tokenTrie(vocab);
  const dfa = localDfa(a);
  const words = (vocab.size + 31) >>> 5;
  const mask = new Uint32Array(words);
  let numAccepted = 0;
  const leaving: number[] = [];

  const addTokens = (t: number, into: 'accepted' | 'leaving'): void => {
    for (let k = trie.tokStart[t]!, end = trie.tokStart[t + 1]!; k < end; k++) {
      const id = trie.tokIds[k]!;
      if (into === 'accepted') {
        mask[id >>> 5]! |= 1 << (id & 31);
        numAccepted++;
      } else {
        leaving.push(id);
      }
    }
  };
  const addSubtree = (t: number): void => {
    for (let c = trie.firstChild[t]!; c !== -1; c = trie.nextSibling[c]!) {
      addTokens(c, 'leaving');
      addSubtree(c);
    }
  };
  const walk = (t: number, state: number, escaped: boolean): void => {
    for (let c = trie.firstChild[t]!; c !== -1; c = trie.nextSibling[c]!) {
      const next = dfa.next(state, trie.byte[c]!);
      const alive = dfa.alive[next] === 1;
      const end = dfa.localEnd[next] === 1;
      if (alive || end) addTokens(c, 'accepted');
      else if (escaped) addTokens(c, 'leaving');
      const esc = escaped || end;
      if (alive) walk(c, next, esc);
      else if (esc) addSubtree(c);
    }
  };
  walk(0, dfa.start(node), false);

  const asList = numAccepted < words;
  let acceptedList: Int32Array | null = null;
  if (asList) {
    acceptedList = new Int32Array(numAccepted);
    let k = 0;
    for (let w = 0; w < words; w++) {
      let bits = mask[w]!;
      while (bits !== 0) {
        const low = bits & -bits;
        acceptedList[k++] = (w << 5) + (31 - Math.clz32(low));
        bits ^= low;
      }
    }
  }
  return { acceptedMask: asList ? null : mask, acceptedList, numAccepted, leaving: Int32Array.from(leaving) };
}

/** The grammar-specific part: which leaving tokens some calling context accepts. */
export function nodeClasses(a: Automaton, node: number, vocab: Vocabulary, relaxed: Stepper, scratch: [ThreadSet, ThreadSet]): NodeClasses {
  const local = localClassesFor(a, node, vocab);
  const uncertain: number[] = [];
  for (const id of local.leaving) {
    if (survives(relaxed, node, 0, vocab.tokenBytes[id]!, scratch, Mode.Relaxed)) uncertain.push(id);
  }
  return { local, uncertain: Int32Array.from(uncertain) };
}

/** Does a thread at (node, stack) consume all of `bytes` (ending anywhere legal)? */
export function survives(stepper: Stepper, node: number, stack: number, bytes: Uint8Array, scratch: [ThreadSet, ThreadSet], mode: Mode): boolean {
  let from = scratch[0];
  let to = scratch[1];
  from.clear();
  from.add(node, stack, 0);
  for (let i = 0; i < bytes.length; i++) {
    stepper.step(from, bytes[i]!, to);
    const last = i === bytes.length - 1;
    if (to.count === 0) {
      if (!last) return false;
      return mode === Mode.Exact ? to.accept : to.localEnd || to.rootEnd;
    }
    const t = from;
    from = to;
    to = t;
  }
  return true;
}

export type { TokenTrie };
