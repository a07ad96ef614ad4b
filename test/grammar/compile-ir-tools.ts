/**
 * Test-only tools over the grammar IR, independent of the automaton: a reference matcher
 * (does the grammar's language contain this string?) and a random walker (a random member of
 * the language). Both work on code points, as the IR does.
 */
import AjvModule from 'ajv';
import formatsModule from 'ajv-formats';
import type { Expr, Grammar } from '../../grammar/ir.js';

const decoder = new TextDecoder();

function literalCps(e: Extract<Expr, { kind: 'literal' }>): number[] {
  return Array.from(decoder.decode(e.bytes), (c) => c.codePointAt(0)!);
}

function inClass(e: Extract<Expr, { kind: 'chars' }>, c: number): boolean {
  let hit = false;
  for (let i = 0; i < e.ranges.length; i += 2) {
    if (c >= e.ranges[i]! && c <= e.ranges[i + 1]!) hit = true;
  }
  if (c >= 0xd800 && c <= 0xdfff) return false;
  return e.negated ? !hit : hit;
}

/** Does the whole of `text` match the grammar? (Set-of-end-positions matcher, memoized per rule.) */
export function matches(grammar: Grammar, text: string): boolean {
  const cps = Array.from(text, (c) => c.codePointAt(0)!);
  const memo = new Map<string, Set<number>>();
  const inProgress = new Set<string>();

  const ends = (e: Expr, start: number): Set<number> => {
    switch (e.kind) {
      case 'empty':
        return new Set([start]);
      case 'literal': {
        const l = literalCps(e);
        for (let i = 0; i < l.length; i++) if (cps[start + i] !== l[i]) return new Set();
        return new Set([start + l.length]);
      }
      case 'chars':
        return start < cps.length && inClass(e, cps[start]!) ? new Set([start + 1]) : new Set();
      case 'seq': {
        let cur = new Set([start]);
        for (const item of e.items) {
          const next = new Set<number>();
          for (const p of cur) for (const q of ends(item, p)) next.add(q);
          cur = next;
          if (cur.size === 0) break;
        }
        return cur;
      }
      case 'alt': {
        const out = new Set<number>();
        for (const item of e.items) for (const q of ends(item, start)) out.add(q);
        return out;
      }
      case 'repeat': {
        const out = new Set<number>();
        let cur = new Set([start]);
        const seen = new Set<number>();
        for (let n = 0; cur.size > 0; n++) {
          if (n >= e.min) for (const p of cur) out.add(p);
          if (n >= e.max) break;
          const next = new Set<number>();
          for (const p of cur) for (const q of ends(e.item, p)) next.add(q);
          // Past min, a position already reached adds nothing new.
          if (n >= e.min) for (const p of cur) seen.add(p);
          cur = n + 1 >= e.min ? new Set([...next].filter((p) => !seen.has(p))) : next;
          if (n > cps.length + e.min + 2) break;
        }
        return out;
      }
      case 'ref': {
        const key = `${e.name}@${start}`;
        const hit = memo.get(key);
        if (hit) return hit;
        if (inProgress.has(key)) throw new Error(`left recursion at rule ${e.name}`);
        inProgress.add(key);
        const body = grammar.rules.get(e.name);
        if (!body) throw new Error(`undefined rule ${e.name}`);
        const r = ends(body, start);
        inProgress.delete(key);
        memo.set(key, r);
        return r;
      }
    }
  };
  return ends({ kind: 'ref', name: grammar.root }, 0).has(cps.length);
}

/** A small seeded PRNG (mulberry32), so failures reproduce from the seed. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Fewest code points `e` can produce, given each rule's current minimum. */
function minLengthOf(e: Expr, rules: Map<string, number>): number {
  switch (e.kind) {
    case 'empty':
      return 0;
    case 'literal':
      return literalCps(e).length;
    case 'chars':
      return 1;
    case 'seq':
      return e.items.reduce((s, i) => s + minLengthOf(i, rules), 0);
    case 'alt':
      return Math.min(...e.items.map((i) => minLengthOf(i, rules)));
    case 'repeat':
      return e.min === 0 ? 0 : e.min * minLengthOf(e.item, rules);
    case 'ref':
      return rules.get(e.name)!;
  }
}

/** Fewest code points each rule can produce (fixpoint), to steer the walker home when deep. */
function minLengths(grammar: Grammar): Map<string, number> {
  const m = new Map<string, number>();
  for (const name of grammar.rules.keys()) m.set(name, Infinity);
  for (let changed = true; changed; ) {
    changed = false;
    for (const [name, body] of grammar.rules) {
      const l = minLengthOf(body, m);
      if (l < m.get(name)!) {
        m.set(name, l);
        changed = true;
      }
    }
  }
  return m;
}

/** Interesting code points for random class members: ASCII-heavy with some escapes and astral. */
function pickChar(e: Extract<Expr, { kind: 'chars' }>, rand: () => number): number {
  const candidates = [0x22, 0x5c, 0x0a, 0x09, 0x00, 0x1f, 0x20, 0x41, 0x7a, 0x30, 0x39, 0xe9, 0x4e2d, 0x1f600, 0x2028, 0x7f];
  for (let tries = 0; tries < 40; tries++) {
    const c = rand() < 0.3 ? candidates[Math.floor(rand() * candidates.length)]! : Math.floor(rand() * 0x80);
    if (inClass(e, c)) return c;
  }
  if (e.negated) {
    for (let c = 0x20; ; c++) if (inClass(e, c)) return c;
  }
  const i = 2 * Math.floor((rand() * e.ranges.length) / 2);
  const lo = e.ranges[i]!;
  const hi = e.ranges[i + 1]!;
  for (let tries = 0; tries < 20; tries++) {
    const c = lo + Math.floor(rand() * (hi - lo + 1));
    if (inClass(e, c)) return c;
  }
  for (let c = lo; c <= hi; c++) if (inClass(e, c)) return c;
  throw new Error('empty character class');
}

/** A random string of the grammar's language; past maxDepth rule calls it heads for the shortest finish. */
export function randomInstance(grammar: Grammar, rand: () => number, maxDepth = 12): string {
  const minLen = minLengths(grammar);
  const len = (e: Expr): number => minLengthOf(e, minLen);
  const out: number[] = [];
  const walk = (e: Expr, depth: number): void => {
    const deep = depth > maxDepth;
    switch (e.kind) {
      case 'empty':
        return;
      case 'literal':
        out.push(...literalCps(e));
        return;
      case 'chars':
        out.push(pickChar(e, rand));
        return;
      case 'seq':
        for (const i of e.items) walk(i, depth);
        return;
      case 'alt': {
        const finite = e.items.filter((i) => len(i) < Infinity);
        let choice: Expr;
        if (deep) choice = finite.reduce((a, b) => (len(b) < len(a) ? b : a));
        else choice = finite[Math.floor(rand() * finite.length)]!;
        walk(choice, depth);
        return;
      }
      case 'repeat': {
        const extra = deep ? 0 : Math.floor(rand() * 4);
        const n = Math.min(e.max, e.min + extra);
        for (let k = 0; k < n; k++) walk(e.item, depth);
        return;
      }
      case 'ref':
        walk(grammar.rules.get(e.name)!, depth + 1);
        return;
    }
  };
  walk({ kind: 'ref', name: grammar.root }, 0);
  return String.fromCodePoint(...out);
}


/**
 * ajv (draft-07) with ajv-formats, non-strict. Both packages are CommonJS with a `default`
 * export; going through `.default` type-checks under NodeNext and runs under vitest.
 */
export function makeAjv(): InstanceType<typeof AjvModule.default> {
  const ajv = new AjvModule.default({ strict: false });
  formatsModule.default(ajv);
  return ajv;
}
