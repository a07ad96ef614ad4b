/**
 * Running the pushdown automaton: a state is a set of threads (node, stack), stacks hash-consed
 * in a StackTable so equal stacks are one id (and memo keys stay numbers). One Stepper
 * consumes one byte for a whole thread set, following epsilon edges, calls (push) and rule
 * ends (pop) to the next nodes that read a byte.
 *
 * Three modes, one closure:
 *  - exact: the real stack. A rule end with nothing below it means the output may end here.
 *  - local: what a node's own rule (and what it calls) accepts, whatever the stack below holds.
 *    A rule end with nothing below it is an escape: the token's fate depends on the context.
 *  - relaxed: local, but an escape continues at every call site of the finished rule (any
 *    context). A token that fails even here fails in every context.
 */
import type { Automaton } from './automaton.js';

/** Stepper.step's byte for "any byte": the lookahead of maxBytesToAccept. */
export const ANY_BYTE = -1;

export const enum Mode {
  Exact = 0,
  Local = 1,
  Relaxed = 2,
}

/** Persistent stacks of return nodes; id 0 is the empty stack. */
export class StackTable {
  parent: Int32Array;
  ret: Int32Array;
  private costs: Float64Array;
  size = 1;
  private readonly index = new Map<number, number>();

  constructor(private readonly numNodes: number) {
    this.parent = new Int32Array(64);
    this.ret = new Int32Array(64);
    this.costs = new Float64Array(64);
  }

  push(parent: number, ret: number): number {
    const key = parent * this.numNodes + ret;
    const hit = this.index.get(key);
    if (hit !== undefined) return hit;
    if (this.size === this.parent.length) {
      const grow = (a: Int32Array): Int32Array => {
        const b = new Int32Array(a.length * 2);
        b.set(a);
        return b;
      };
      this.parent = grow(this.parent);
      this.ret = grow(this.ret);
      const c = new Float64Array(this.costs.length * 2);
      c.set(this.costs);
      this.costs = c;
    }
    const id = this.size++;
    this.parent[id] = parent;
    this.ret[id] = ret;
    this.costs[id] = -1;
    this.index.set(key, id);
    return id;
  }

  /** Fewest bytes to unwind the stack: each frame's return node to its rule's end. */
  cost(id: number, dist: Float64Array): number {
    if (id === 0) return 0;
    const c = this.costs[id]!;
    if (c >= 0) return c;
    const v = dist[this.ret[id]!]! + this.cost(this.parent[id]!, dist);
    this.costs[id] = v;
    return v;
  }
}

export class ThreadSet {
  node = new Int32Array(8);
  stack = new Int32Array(8);
  relaxed = new Uint8Array(8);
  count = 0;
  /** Threads not (yet) past an escape. */
  direct = 0;
  /** exact: the output may end here. */
  accept = false;
  /** local/relaxed: a direct thread finished its rule with nothing known below it. */
  localEnd = false;
  /** relaxed: the start rule may have ended here. */
  rootEnd = false;

  clear(): void {
    this.count = 0;
    this.direct = 0;
    this.accept = false;
    this.localEnd = false;
    this.rootEnd = false;
  }

  add(n: number, s: number, r: number): void {
    if (this.count === this.node.length) {
      const node = new Int32Array(this.count * 2);
      node.set(this.node);
      this.node = node;
      const stack = new Int32Array(this.count * 2);
      stack.set(this.stack);
      this.stack = stack;
      const relaxed = new Uint8Array(this.count * 2);
      relaxed.set(this.relaxed);
      this.relaxed = relaxed;
    }
    this.node[this.count] = n;
    this.stack[this.count] = s;
    this.relaxed[this.count] = r;
    this.count++;
    if (r === 0) this.direct++;
  }

  copyFrom(o: ThreadSet): void {
    this.clear();
    for (let i = 0; i < o.count; i++) this.add(o.node[i]!, o.stack[i]!, o.relaxed[i]!);
    this.accept = o.accept;
    this.localEnd = o.localEnd;
    this.rootEnd = o.rootEnd;
  }

  /** Keep only exact threads whose cost to finish is `target` (closing mode's shortest paths). */
  keepCost(target: number, a: Automaton, stacks: StackTable): void {
    this.keepWhere((n, s) => a.dist[n]! + stacks.cost(s, a.dist) === target);
  }

  /** Keep the threads `keep` says yes to, in order. */
  keepWhere(keep: (node: number, stack: number) => boolean): void {
    let k = 0;
    for (let i = 0; i < this.count; i++) {
      if (keep(this.node[i]!, this.stack[i]!)) {
        this.node[k] = this.node[i]!;
        this.stack[k] = this.stack[i]!;
        this.relaxed[k] = this.relaxed[i]!;
        k++;
      }
    }
    this.count = k;
    this.direct = k;
  }
}

export class Stepper {
  private readonly seen = new Set<number>();
  private out!: ThreadSet;

  constructor(
    readonly a: Automaton,
    readonly stacks: StackTable,
    private readonly mode: Mode,
  ) {}

  /** `out` = the closure of one thread at (n, s): where the automaton can read its next byte. */
  start(n: number, s: number, out: ThreadSet): void {
    out.clear();
    this.seen.clear();
    this.out = out;
    this.close(n, s, 0);
  }

  /** `out` = the threads of `from` after reading `byte` (ANY_BYTE: the union over all bytes). */
  step(from: ThreadSet, byte: number, out: ThreadSet): void {
    out.clear();
    this.seen.clear();
    this.out = out;
    const a = this.a;
    const any = byte === ANY_BYTE;
    for (let i = 0; i < from.count; i++) {
      const n = from.node[i]!;
      for (let e = a.edgeStart[n]!, end = a.edgeStart[n + 1]!; e < end; e++) {
        if (any || (byte >= a.edgeLo[e]! && byte <= a.edgeHi[e]!)) this.close(a.edgeTo[e]!, from.stack[i]!, from.relaxed[i]!);
      }
    }
  }

  private close(n: number, s: number, r: number): void {
    const a = this.a;
    const numNodes = a.numNodes;
    for (let i = a.closStart[n]!, iEnd = a.closStart[n + 1]!; i < iEnd; i++) {
      const m = a.closNodes[i]!;
      const key = (s * numNodes + m) * 2 + r;
      if (this.seen.has(key)) continue;
      this.seen.add(key);
      if (a.edgeStart[m + 1]! > a.edgeStart[m]!) this.out.add(m, s, r);
      for (let c = a.callStart[m]!, cEnd = a.callStart[m + 1]!; c < cEnd; c++) {
        const ret = a.callRet[c]!;
        this.close(a.ruleStart[a.callRule[c]!]!, a.tailRet[ret] === 1 ? s : this.stacks.push(s, ret), r);
      }
      if (a.isEnd[m] === 1) {
        if (s !== 0) {
          this.close(this.stacks.ret[s]!, this.stacks.parent[s]!, r);
        } else if (this.mode === Mode.Exact) {
          this.out.accept = true;
        } else {
          if (r === 0) this.out.localEnd = true;
          if (this.mode === Mode.Relaxed) {
            const rule = a.ruleOf[m]!;
            if (rule === a.root) this.out.rootEnd = true;
            for (let k = a.callersStart[rule]!, kEnd = a.callersStart[rule + 1]!; k < kEnd; k++) this.close(a.callersRet[k]!, 0, 1);
          }
        }
      }
    }
  }
}
