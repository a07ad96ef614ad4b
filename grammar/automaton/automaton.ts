/**
 * Grammar IR → a byte-level pushdown automaton: one epsilon-NFA per rule, rules calling rules
 * through call edges (push a return node, run the callee, pop). Built once per grammar and
 * shared by every matcher and every vocabulary; flat typed arrays (CSR) so the step loop
 * allocates nothing.
 *
 * Each rule's nodes are numbered contiguously in an order that depends only on the rule's own
 * body, so a node's offset within its rule plus the rule's structural key (the rule and every
 * rule it reaches, names erased) identifies the same local language in any grammar: that is
 * what lets token classifications be shared across grammars (token-classes.ts).
 */
import { createHash } from 'node:crypto';
import { GrammarError } from '../contract.js';
import type { Expr, Grammar } from '../ir.js';
import { complementRanges, normalizeRanges } from '../compile/char-set.js';
import { utf8Sequences } from './utf8.js';
import { type CompileBudget, STATE_BYTES } from '../budget.js';

/** More NFA nodes than this is a grammar we refuse (a huge `{m,n}` or maxLength expansion). */
export const MAX_AUTOMATON_NODES = 400_000;

export interface Automaton {
  readonly numNodes: number;
  readonly numRules: number;
  readonly root: number;
  readonly ruleNames: readonly string[];
  readonly ruleStart: Int32Array;
  readonly ruleEnd: Int32Array;
  readonly ruleOf: Int32Array;
  /** Byte edges of node n: [edgeStart[n], edgeStart[n+1]) into edgeLo/edgeHi/edgeTo. */
  readonly edgeStart: Int32Array;
  readonly edgeLo: Uint8Array;
  readonly edgeHi: Uint8Array;
  readonly edgeTo: Int32Array;
  /** Nodes reachable by epsilon edges alone (n included) that have byte edges, calls, or end a rule. */
  readonly closStart: Int32Array;
  readonly closNodes: Int32Array;
  readonly callStart: Int32Array;
  readonly callRule: Int32Array;
  readonly callRet: Int32Array;
  /** 1 when returning to this node only leads to its rule's end: such a call pushes nothing. */
  readonly tailRet: Uint8Array;
  readonly isEnd: Uint8Array;
  /** Return nodes of every call site of rule r: [callersStart[r], callersStart[r+1]) into callersRet. */
  readonly callersStart: Int32Array;
  readonly callersRet: Int32Array;
  /** Fewest bytes from node n to its rule's end. */
  readonly dist: Float64Array;

  /** Structural identity of each rule (its body and everything it reaches, names erased). */
  readonly ruleKeys: readonly string[];
}

/** Flat edge lists (no per-node arrays: a big bounded repeat makes hundreds of thousands of nodes). */
class Builder {
  numNodes = 0;
  readonly ruleOf: number[] = [];
  readonly byteEdges: number[] = []; // from, lo, hi, to
  readonly epsEdges: number[] = []; // from, to
  readonly callEdges: number[] = []; // from, rule, ret
  rule = 0;
  private readonly sequences = new WeakMap<Expr, Array<Array<[number, number]>>>();

  constructor(
    private readonly ruleIndex: Map<string, number>,
    private readonly budget: CompileBudget | undefined,
  ) {}

  node(): number {
    if (this.numNodes >= MAX_AUTOMATON_NODES) throw tooLarge();
    if (this.budget !== undefined) {
      this.budget.tick();
      this.budget.charge(STATE_BYTES);
    }
    this.ruleOf.push(this.rule);
    return this.numNodes++;
  }

  eps(from: number, to: number): void {
    this.epsEdges.push(from, to);
  }

  private byte(from: number, lo: number, hi: number, to: number): void {
    this.byteEdges.push(from, lo, hi, to);
  }

  /** UTF-8 sequences of a class, once per IR object (a repeated item reuses its expansion). */
  private sequencesOf(e: Extract<Expr, { kind: 'chars' }>): Array<Array<[number, number]>> {
    let seqs = this.sequences.get(e);
    if (seqs === undefined) {
      seqs = utf8Sequences(e.negated ? complementRanges(e.ranges) : normalizeRanges(e.ranges));
      this.sequences.set(e, seqs);
    }
    return seqs;
  }

  /** Thompson construction from `start`; returns the node after `e`. Loops get a fresh head node. */
  build(e: Expr, start: number): number {
    switch (e.kind) {
      case 'empty':
        return start;
      case 'literal': {
        let cur = start;
        for (const b of e.bytes) {
          const next = this.node();
          this.byte(cur, b, b, next);
          cur = next;
        }
        return cur;
      }
      case 'chars': {
        const end = this.node();
        // Sequences sharing a leading byte range share its node (fewer parallel threads).
        let shared: Map<string, number> | undefined;
        for (const sequence of this.sequencesOf(e)) {
          let cur = start;
          for (let i = 0; i < sequence.length; i++) {
            const [lo, hi] = sequence[i]!;
            if (i === sequence.length - 1) {
              this.byte(cur, lo, hi, end);
              break;
            }
            const key = `${cur}:${lo}:${hi}`;
            shared ??= new Map();
            let next = shared.get(key);
            if (next === undefined) {
              next = this.node();
              shared.set(key, next);
              this.byte(cur, lo, hi, next);
            }
            cur = next;
          }
        }
        return end;
      }
      case 'seq': {
        let cur = start;
        for (const item of e.items) cur = this.build(item, cur);
        return cur;
      }
      case 'alt': {
        const end = this.node();
        for (const item of e.items) {
          const head = this.node();
          this.eps(start, head);
          this.eps(this.build(item, head), end);
        }
        return end;
      }
      case 'repeat': {
        let cur = start;
        for (let i = 0; i < e.min; i++) cur = this.build(e.item, cur);
        if (e.max === Infinity) {
          const head = this.node();
          this.eps(cur, head);
          this.eps(this.build(e.item, head), head);
          return head;
        }
        if (e.max <= e.min) return cur;
        const end = this.node();
        for (let i = e.min; i < e.max; i++) {
          this.eps(cur, end);
          const head = this.node();
          this.eps(cur, head);
          cur = this.build(e.item, head);
        }
        this.eps(cur, end);
        return end;
      }
      case 'ref': {
        const callee = this.ruleIndex.get(e.name);
        if (callee === undefined) throw new GrammarError('invalid_grammar', `undefined rule "${e.name}"`);
        const ret = this.node();
        this.callEdges.push(start, callee, ret);
        return ret;
      }
    }
  }
}

function tooLarge(): GrammarError {
  return new GrammarError('unsupported_feature', `grammar too large: more than ${MAX_AUTOMATON_NODES} automaton states (large {m,n} or maxLength/maxItems bounds expand)`);
}

/** Upper bound on the nodes `e` builds (rules counted once), to refuse huge grammars before building. */
function sizeBound(e: Expr): number {
  switch (e.kind) {
    case 'empty':
      return 0;
    case 'literal':
      return e.bytes.length;
    case 'chars':
      return 8;
    case 'seq':
      return e.items.reduce((n, i) => n + sizeBound(i), 0);
    case 'alt':
      return 1 + e.items.reduce((n, i) => n + 1 + sizeBound(i), 0);
    case 'repeat': {
      const item = sizeBound(e.item) + 1;
      return e.max === Infinity ? (e.min + 1) * item + 1 : e.max * item + 1;
    }
    case 'ref':
      return 1;
  }
}

/** CSR of flat (from, ...fields) records grouped by `from`: start offsets and each field's column. */
function csrOf(flat: number[], width: number, numNodes: number): { start: Int32Array; cols: Int32Array[] } {
  const n = flat.length / width;
  const start = new Int32Array(numNodes + 1);
  for (let i = 0; i < n; i++) start[flat[i * width]! + 1]!++;
  for (let v = 0; v < numNodes; v++) start[v + 1]! += start[v]!;
  const fill = start.slice(0, numNodes);
  const cols = Array.from({ length: width - 1 }, () => new Int32Array(n));
  for (let i = 0; i < n; i++) {
    const at = fill[flat[i * width]!]!++;
    for (let f = 1; f < width; f++) cols[f - 1]![at] = flat[i * width + f]!;
  }
  return { start, cols };
}

/** Canonical text of a rule body; references as their index in `order`. */
function serialize(e: Expr, index: (name: string) => number): string {
  switch (e.kind) {
    case 'empty':
      return 'e';
    case 'literal':
      return `l${e.bytes.length}:${Buffer.from(e.bytes).toString('latin1')}`;
    case 'chars':
      return `c${e.negated ? '!' : ''}${e.ranges.join(',')};`;
    case 'seq':
      return `s(${e.items.map((i) => serialize(i, index)).join('|')})`;
    case 'alt':
      return `a(${e.items.map((i) => serialize(i, index)).join('|')})`;
    case 'repeat':
      return `r${e.min},${e.max}(${serialize(e.item, index)})`;
    case 'ref':
      return `@${index(e.name)}`;
  }
}

function refsOf(e: Expr, into: string[]): void {
  if (e.kind === 'ref') into.push(e.name);
  else if (e.kind === 'seq' || e.kind === 'alt') for (const i of e.items) refsOf(i, into);
  else if (e.kind === 'repeat') refsOf(e.item, into);
}

/** Each rule's structural key: the rules it reaches in first-reference order, bodies serialized. */
function structuralKeys(grammar: Grammar, names: readonly string[]): string[] {
  const refs = new Map<string, string[]>();
  for (const [name, body] of grammar.rules) {
    const r: string[] = [];
    refsOf(body, r);
    refs.set(name, r);
  }
  return names.map((name) => {
    const order = new Map<string, number>([[name, 0]]);
    const queue = [name];
    for (let i = 0; i < queue.length; i++) {
      for (const r of refs.get(queue[i]!)!) {
        if (!order.has(r)) {
          order.set(r, order.size);
          queue.push(r);
        }
      }
    }
    const text = queue.map((n) => serialize(grammar.rules.get(n)!, (x) => order.get(x)!)).join('\n');
    return createHash('sha1').update(text).digest('base64');
  });
}

/** `budget`: the request's compile budget (time, memory, cancellation); none = unbounded but MAX_AUTOMATON_NODES. */
export function buildAutomaton(grammar: Grammar, budget?: CompileBudget): Automaton {
  if (!grammar.rules.has(grammar.root)) throw new GrammarError('invalid_grammar', `the start rule "${grammar.root}" is not defined`);
  // Only rules reachable from the root, in a stable order.
  const names: string[] = [grammar.root];
  const ruleIndex = new Map<string, number>([[grammar.root, 0]]);
  for (let i = 0; i < names.length; i++) {
    const r: string[] = [];
    refsOf(grammar.rules.get(names[i]!)!, r);
    for (const name of r) {
      if (!grammar.rules.has(name)) throw new GrammarError('invalid_grammar', `undefined rule "${name}"`);
      if (!ruleIndex.has(name)) {
        ruleIndex.set(name, names.length);
        names.push(name);
      }
    }
  }
  let bound = 0;
  for (const name of names) bound += sizeBound(grammar.rules.get(name)!) + 2;
  if (bound > MAX_AUTOMATON_NODES * 4) throw tooLarge();
  const b = new Builder(ruleIndex, budget);
  const ruleStart = new Int32Array(names.length);
  const ruleEnd = new Int32Array(names.length);
  for (let r = 0; r < names.length; r++) {
    b.rule = r;
    ruleStart[r] = b.node();
    const last = b.build(grammar.rules.get(names[r]!)!, ruleStart[r]!);
    ruleEnd[r] = b.node();
    b.eps(last, ruleEnd[r]!);
  }
  const n = b.numNodes;
  const isEnd = new Uint8Array(n);
  for (const e of ruleEnd) isEnd[e] = 1;

  const edges = csrOf(b.byteEdges, 4, n);
  const edgeLo = Uint8Array.from(edges.cols[0]!);
  const edgeHi = Uint8Array.from(edges.cols[1]!);
  const edgeTo = edges.cols[2]!;
  const calls = csrOf(b.callEdges, 3, n);
  const callRule = calls.cols[0]!;
  const callRet = calls.cols[1]!;
  const eps = csrOf(b.epsEdges, 2, n);
  const epsStart = eps.start;
  const epsTo = eps.cols[0]!;

  // Epsilon closures, keeping only nodes where something happens.
  const closStart = new Int32Array(n + 1);
  const closList: number[] = [];
  const mark = new Int32Array(n).fill(-1);
  const tailRet = new Uint8Array(n);
  const todo: number[] = [];
  for (let v = 0; v < n; v++) {
    budget?.tick();
    closStart[v] = closList.length;
    todo.length = 0;
    todo.push(v);
    mark[v] = v;
    let onlyEnd = true;
    while (todo.length > 0) {
      const m = todo.pop()!;
      if (edges.start[m + 1]! > edges.start[m]! || calls.start[m + 1]! > calls.start[m]! || isEnd[m] === 1) {
        closList.push(m);
        if (isEnd[m] !== 1) onlyEnd = false;
      }
      for (let k = epsStart[m]!; k < epsStart[m + 1]!; k++) {
        const t = epsTo[k]!;
        if (mark[t] !== v) {
          mark[t] = v;
          todo.push(t);
        }
      }
    }
    if (onlyEnd && closList.length > closStart[v]!) tailRet[v] = 1;
  }
  closStart[n] = closList.length;

  const callersFlat: number[] = [];
  for (let i = 0; i < callRule.length; i++) callersFlat.push(callRule[i]!, callRet[i]!);
  const callers = csrOf(callersFlat, 2, names.length);

  const a: Automaton = {
    numNodes: n,
    numRules: names.length,
    root: 0,
    ruleNames: names,
    ruleStart,
    ruleEnd,
    ruleOf: Int32Array.from(b.ruleOf),
    edgeStart: edges.start,
    edgeLo,
    edgeHi,
    edgeTo,
    closStart,
    closNodes: Int32Array.from(closList),
    callStart: calls.start,
    callRule,
    callRet,
    tailRet,
    isEnd,
    callersStart: callers.start,
    callersRet: callers.cols[0]!,
    dist: new Float64Array(n),
    ruleKeys: structuralKeys(grammar, names),
  };
  budget?.check();
  rejectLeftRecursion(a, epsStart, epsTo);
  computeDistances(a, epsStart, epsTo, budget);
  return a;
}

/** Rules that can produce nothing, then: does a rule reach itself before consuming a byte? */
function rejectLeftRecursion(a: Automaton, epsStart: Int32Array, epsTo: Int32Array): void {
  const nullable = new Uint8Array(a.numRules);
  // Nodes reachable from a rule start without consuming, following calls into nullable rules.
  const reach = (r: number, onCall: (callee: number) => void): boolean => {
    const seen = new Set<number>([a.ruleStart[r]!]);
    const todo = [a.ruleStart[r]!];
    let ends = false;
    while (todo.length > 0) {
      const m = todo.pop()!;
      if (m === a.ruleEnd[r]) ends = true;
      const next = Array.from(epsTo.subarray(epsStart[m]!, epsStart[m + 1]!));
      for (let i = a.callStart[m]!; i < a.callStart[m + 1]!; i++) {
        onCall(a.callRule[i]!);
        if (nullable[a.callRule[i]!]) next.push(a.callRet[i]!);
      }
      for (const t of next) {
        if (!seen.has(t)) {
          seen.add(t);
          todo.push(t);
        }
      }
    }
    return ends;
  };
  for (let changed = true; changed; ) {
    changed = false;
    for (let r = 0; r < a.numRules; r++) {
      if (!nullable[r] && reach(r, () => {})) {
        nullable[r] = 1;
        changed = true;
      }
    }
  }
  const leftCalls: number[][] = [];
  for (let r = 0; r < a.numRules; r++) {
    const callees = new Set<number>();
    reach(r, (c) => callees.add(c));
    leftCalls.push([...callees]);
  }
  const state = new Uint8Array(a.numRules); // 0 new, 1 on path, 2 done
  const visit = (r: number): void => {
    state[r] = 1;
    for (const c of leftCalls[r]!) {
      if (state[c] === 1) throw new GrammarError('invalid_grammar', `rule "${a.ruleNames[c]}" is left-recursive (it can reach itself before producing any text)`);
      if (state[c] === 0) visit(c);
    }
    state[r] = 2;
  };
  for (let r = 0; r < a.numRules; r++) if (state[r] === 0) visit(r);
}

/** dist[n]: fewest bytes from n to its rule's end, calls costing the callee's minimum (fixpoint). */
function computeDistances(a: Automaton, epsStart: Int32Array, epsTo: Int32Array, budget: CompileBudget | undefined): void {
  const d = a.dist;
  d.fill(Infinity);
  for (const e of a.ruleEnd) d[e] = 0;
  for (let changed = true; changed; ) {
    changed = false;
    budget?.check();
    for (let n = a.numNodes - 1; n >= 0; n--) {
      let best = d[n]!;
      for (let k = epsStart[n]!; k < epsStart[n + 1]!; k++) if (d[epsTo[k]!]! < best) best = d[epsTo[k]!]!;
      for (let i = a.edgeStart[n]!; i < a.edgeStart[n + 1]!; i++) {
        const c = 1 + d[a.edgeTo[i]!]!;
        if (c < best) best = c;
      }
      for (let i = a.callStart[n]!; i < a.callStart[n + 1]!; i++) {
        const c = d[a.ruleStart[a.callRule[i]!]!]! + d[a.callRet[i]!]!;
        if (c < best) best = c;
      }
      if (best < d[n]!) {
        d[n] = best;
        changed = true;
      }
    }
  }
  if (d[a.ruleStart[a.root]!] === Infinity) throw new GrammarError('invalid_grammar', 'the grammar matches no text at all (a rule can never finish)');
}
