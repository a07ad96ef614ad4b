/**
 * A grammar compiled against one vocabulary, and the per-sequence matcher over it.
 *
 * CompiledGrammar holds what every sequence of the same (grammar, tokenizer) shares: the
 * automaton, per-node token classes (filled on first visit), the stack table, and a memo of
 * which uncertain tokens a (node, stack) pair accepts, so a sequence that stays inside one
 * string or number reuses the answer every step. A mask is then: clear, OR the accepted set of
 * each live node, set the memoized uncertain survivors, set EOS where the grammar may end.
 */
import type { GrammarMatcher, Vocabulary } from '../contract.js';
import { bitmaskWords } from '../contract.js';
import type { Automaton } from './automaton.js';
import { type NodeClasses, adoptLocalClasses, nodeClasses, survives } from './token-classes.js';
import { ANY_BYTE, Mode, StackTable, Stepper, ThreadSet } from './threads.js';
import { tokenTrie } from './token-trie.js';
import type { CompileBudget } from '../budget.js';
import { automatonBytes, classesBytes, indexPacked, packClasses, unpackAt } from './packed-classes.js';

/** One node's token classes, as they cross a thread boundary. */
export interface ClassifiedNode {
  node: number;
  classes: NodeClasses;
}

/** Threads per byte of lookahead (maxBytesToAccept) before the cheapest are dropped. */
const LOOKAHEAD_WIDTH = 256;

function keepCostliest(set: ThreadSet, keep: number, a: Automaton, stacks: StackTable): void {
  const cost = (n: number, s: number): number => a.dist[n]! + stacks.cost(s, a.dist);
  const costs = new Float64Array(set.count);
  for (let i = 0; i < set.count; i++) costs[i] = cost(set.node[i]!, set.stack[i]!);
  const threshold = costs.sort()[set.count - keep]!;
  let kept = 0;
  set.keepWhere((n, s) => kept < keep && cost(n, s) >= threshold && ++kept > 0);
}

/** Memo entries before the (node, stack) memo is dropped and rebuilt. */
const MEMO_LIMIT = 200_000;

export class CompiledGrammar {
  readonly stacks: StackTable;
  readonly exact: Stepper;
  private readonly relaxed: Stepper;
  private readonly classes: Array<NodeClasses | undefined>;
  /** Classes computed on a compile thread, decoded per node on first use (installPacked). */
  private packed: { buffer: ArrayBuffer; offsets: Int32Array } | undefined;
  private readonly memo = new Map<number, Int32Array>();
  private readonly lookahead = new Map<string, number>();
  private readonly scratch: [ThreadSet, ThreadSet] = [new ThreadSet(), new ThreadSet()];
  readonly words: number;

  constructor(
    readonly automaton: Automaton,
    readonly vocab: Vocabulary,
  ) {
    this.stacks = new StackTable(automaton.numNodes);
    this.exact = new Stepper(automaton, this.stacks, Mode.Exact);
    this.relaxed = new Stepper(automaton, new StackTable(automaton.numNodes), Mode.Relaxed);
    this.classes = new Array(automaton.numNodes);
    this.words = bitmaskWords(vocab.size);
  }

  /** `budget`: a compile's budget, charged for what is classified (off-thread compiles). */
  classesOf(node: number, budget?: CompileBudget): NodeClasses {
    let c = this.classes[node];
    if (c === undefined && this.packed !== undefined && this.packed.offsets[node]! >= 0) {
      c = unpackAt(this.packed.buffer, this.packed.offsets[node]!);
      this.classes[node] = c;
    }
    if (c === undefined) {
      budget?.tick();
      c = nodeClasses(this.automaton, node, this.vocab, this.relaxed, this.scratch);
      budget?.charge(classesBytes(c));
      this.classes[node] = c;
    }
    return c;
  }

  /** Classifies every byte-reading node now (what a cold compile costs when nothing is lazy). */
  classifyAll(budget?: CompileBudget): void {
    for (const n of this.unclassified()) this.classesOf(n, budget);
  }

  /** Byte-reading nodes whose token classes are not known yet. */
  unclassified(): number[] {
    const a = this.automaton;
    const out: number[] = [];
    const packed = this.packed?.offsets;
    for (let n = 0; n < a.numNodes; n++) if (a.edgeStart[n + 1]! > a.edgeStart[n]! && this.classes[n] === undefined && !(packed !== undefined && packed[n]! >= 0)) out.push(n);
    return out;
  }

  /**
   * Classes of `nodes` (classified now where needed, within `budget`) packed into one buffer to
   * transfer to another thread: one buffer, not thousands of small arrays, because cloning or
   * transferring each array costs the receiving event loop seconds on big grammars.
   */
  exportPacked(nodes: readonly number[], budget?: CompileBudget): ArrayBuffer {
    const classes: ClassifiedNode[] = [];
    for (const node of nodes) classes.push({ node, classes: this.classesOf(node, budget) });
    return packClasses(classes);
  }

  /** Install classes computed by another thread for this same (grammar, vocabulary). */
  install(classified: readonly ClassifiedNode[]): void {
    for (const { node, classes } of classified) {
      if (this.classes[node] !== undefined) continue;
      const local = adoptLocalClasses(this.automaton, node, this.vocab, classes.local);
      this.classes[node] = { local, uncertain: classes.uncertain };
    }
  }

  /**
   * Adopt classes a compile thread packed (exportPacked) for this same (grammar, vocabulary):
   * indexed now, each node decoded on first use, so the event loop pays one pass over headers.
   */
  installPacked(buffer: ArrayBuffer): void {
    this.packed = { buffer, offsets: indexPacked(buffer, this.automaton.numNodes) };
  }

  /** Bytes held: the automaton's arrays and the token classes known so far (the cache's weight). */
  bytes(): number {
    let n = automatonBytes(this.automaton) + (this.packed?.buffer.byteLength ?? 0);
    for (const c of this.classes) if (c !== undefined) n += classesBytes(c);
    return n;
  }

  /** The uncertain tokens of `node` that the real stack `stack` accepts (memoized). */
  uncertainAccepted(node: number, stack: number, classes: NodeClasses): Int32Array {
    const key = stack * this.automaton.numNodes + node;
    const hit = this.memo.get(key);
    if (hit) return hit;
    const ok: number[] = [];
    for (const id of classes.uncertain) {
      if (survives(this.exact, node, stack, this.vocab.tokenBytes[id]!, this.scratch, Mode.Exact)) ok.push(id);
    }
    if (this.memo.size >= MEMO_LIMIT) this.memo.clear();
    const out = Int32Array.from(ok);
    this.memo.set(key, out);
    return out;
  }

  /**
   * The most bytes needed to finish after any token from `state`: the costliest thread reachable
   * within the vocabulary's longest token, memoized per thread set (states recur: a string loop
   * comes back to the same one). Conservative: a byte string no token spells still counts.
   */
  worstAfterOneToken(state: ThreadSet): number {
    if (state.count === 0) return 0;
    const pairs: string[] = [];
    for (let i = 0; i < state.count; i++) pairs.push(`${state.node[i]}.${state.stack[i]}`);
    pairs.sort();
    const key = pairs.join(',');
    const hit = this.lookahead.get(key);
    if (hit !== undefined) return hit;
    const a = this.automaton;
    const horizon = tokenTrie(this.vocab).maxDepth;
    let from = this.scratch[0];
    let to = this.scratch[1];
    from.copyFrom(state);
    let worst = 0;
    for (let d = 1; d <= horizon && from.count > 0; d++) {
      this.exact.step(from, ANY_BYTE, to);
      for (let i = 0; i < to.count; i++) {
        const c = a.dist[to.node[i]!]! + this.stacks.cost(to.stack[i]!, a.dist);
        if (c > worst) worst = c;
      }
      // Recursive grammars branch exponentially (every byte may open another level); the
      // costliest threads are the ones this bound is about, so keep those.
      if (to.count > LOOKAHEAD_WIDTH) keepCostliest(to, LOOKAHEAD_WIDTH, a, this.stacks);
      const t = from;
      from = to;
      to = t;
    }
    if (this.lookahead.size >= MEMO_LIMIT) this.lookahead.clear();
    this.lookahead.set(key, worst);
    return worst;
  }

  matcher(): ForkableMatcher {
    return new AutomatonMatcher(this, null);
  }
}

/** A matcher whose forks are automaton matchers too (try a token without committing to it). */
export interface ForkableMatcher extends GrammarMatcher {
  fork(): ForkableMatcher;
}

class AutomatonMatcher implements ForkableMatcher {
  private cur = new ThreadSet();
  private a1 = new ThreadSet();
  private a2 = new ThreadSet();
  private terminated = false;
  private readonly seenNodes = new Set<number>();

  constructor(
    private readonly g: CompiledGrammar,
    from: AutomatonMatcher | null,
  ) {
    if (from === null) {
      const a = g.automaton;
      g.exact.start(a.ruleStart[a.root]!, 0, this.cur);
    } else {
      this.cur.copyFrom(from.cur);
      this.terminated = from.terminated;
    }
  }

  fork(): ForkableMatcher {
    return new AutomatonMatcher(this.g, this);
  }

  canTerminate(): boolean {
    return !this.terminated && this.cur.accept;
  }

  isTerminated(): boolean {
    return this.terminated || (this.cur.accept && this.cur.count === 0);
  }

  minBytesToAccept(): number {
    if (this.cur.accept || this.terminated) return 0;
    const a = this.g.automaton;
    let best = Infinity;
    for (let i = 0; i < this.cur.count; i++) {
      const c = a.dist[this.cur.node[i]!]! + this.g.stacks.cost(this.cur.stack[i]!, a.dist);
      if (c < best) best = c;
    }
    return best;
  }

  maxBytesToAccept(): number {
    if (this.terminated) return 0;
    return Math.max(this.minBytesToAccept(), this.g.worstAfterOneToken(this.cur));
  }

  acceptToken(tokenId: number): boolean {
    if (this.terminated) return false;
    const vocab = this.g.vocab;
    if (vocab.eosTokenIds.includes(tokenId)) {
      if (!this.cur.accept) return false;
      this.terminated = true;
      return true;
    }
    const bytes = tokenId >= 0 && tokenId < vocab.size ? vocab.tokenBytes[tokenId] : null;
    if (bytes === null || bytes === undefined || bytes.length === 0) return false;
    let from = this.cur;
    let to = this.a1;
    for (let i = 0; i < bytes.length; i++) {
      this.g.exact.step(from, bytes[i]!, to);
      if (to.count === 0 && !(to.accept && i === bytes.length - 1)) return false;
      from = to;
      to = to === this.a1 ? this.a2 : this.a1;
    }
    // Commit: `from` (a1 or a2) becomes the state, the old state its scratch buffer.
    const old = this.cur;
    this.cur = from;
    if (from === this.a1) this.a1 = old;
    else this.a2 = old;
    return true;
  }

  fillNextTokenBitmask(mask: Uint32Array, options?: { closing?: boolean }): void {
    const g = this.g;
    mask.fill(0, 0, g.words);
    if (this.terminated) return;
    if (options?.closing === true && this.fillClosing(mask)) return;
    const cur = this.cur;
    this.seenNodes.clear();
    for (let i = 0; i < cur.count; i++) {
      const n = cur.node[i]!;
      const classes = g.classesOf(n);
      if (!this.seenNodes.has(n)) {
        this.seenNodes.add(n);
        const local = classes.local;
        if (local.acceptedMask !== null) {
          const m = local.acceptedMask;
          for (let w = 0; w < g.words; w++) mask[w]! |= m[w]!;
        } else {
          const l = local.acceptedList!;
          for (let k = 0; k < l.length; k++) mask[l[k]! >>> 5]! |= 1 << (l[k]! & 31);
        }
      }
      if (classes.uncertain.length > 0) {
        const ok = g.uncertainAccepted(n, cur.stack[i]!, classes);
        for (let k = 0; k < ok.length; k++) mask[ok[k]! >>> 5]! |= 1 << (ok[k]! & 31);
      }
    }
    if (cur.accept) this.setEos(mask);
  }

  private setEos(mask: Uint32Array): void {
    for (const id of this.g.vocab.eosTokenIds) mask[id >>> 5]! |= 1 << (id & 31);
  }

  /**
   * Closing mode: only tokens that stay on a shortest path to acceptance (each byte one step
   * nearer), so the output ends as soon as possible. False when the vocabulary has no such
   * token (then the caller falls back to the full mask).
   */
  private fillClosing(mask: Uint32Array): boolean {
    const g = this.g;
    if (this.cur.accept) {
      if (g.vocab.eosTokenIds.length === 0) return false;
      this.setEos(mask);
      return true;
    }
    const a = g.automaton;
    const target = this.minBytesToAccept();
    const trie = tokenTrie(g.vocab);
    const sets: ThreadSet[] = [new ThreadSet()];
    sets[0]!.copyFrom(this.cur);
    sets[0]!.keepCost(target, a, g.stacks);
    let any = false;
    const walk = (t: number, depth: number): void => {
      if (sets.length <= depth + 1) sets.push(new ThreadSet());
      const from = sets[depth]!;
      const to = sets[depth + 1]!;
      for (let c = trie.firstChild[t]!; c !== -1; c = trie.nextSibling[c]!) {
        g.exact.step(from, trie.byte[c]!, to);
        to.keepCost(target - depth - 1, a, g.stacks);
        if (to.count > 0 || (to.accept && target === depth + 1)) {
          for (let k = trie.tokStart[c]!, end = trie.tokStart[c + 1]!; k < end; k++) {
            const id = trie.tokIds[k]!;
            mask[id >>> 5]! |= 1 << (id & 31);
            any = true;
          }
        }
        if (to.count > 0) walk(c, depth + 1);
      }
    };
    walk(0, 0);
    return any;
  }
}
