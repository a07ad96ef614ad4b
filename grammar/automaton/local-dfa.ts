/**
 * The local-mode automaton (threads.ts, Mode.Local) determinized lazily: each distinct thread
 * set gets an id, each (id, byte) transition is computed once and then read from a table.
 * Classifying a node walks the whole token trie (hundreds of thousands of trie nodes for a
 * 150k vocabulary) but visits few distinct thread sets (a string loop keeps returning to the
 * same one), so the walk becomes table lookups. One per automaton, shared by its nodes.
 */
import type { Automaton } from './automaton.js';
import { Mode, StackTable, Stepper, ThreadSet } from './threads.js';

/** States before the table is dropped and rebuilt (bounds memory on huge grammars). */
const MAX_STATES = 100_000;

export class LocalDfa {
  private stepper!: Stepper;
  private readonly ids = new Map<number, number[]>();
  private sets: ThreadSet[] = [];
  /** Per state: 1 when a direct thread is alive (the walk can go deeper). */
  alive: Uint8Array<ArrayBuffer> = new Uint8Array(256);
  /** Per state: a direct thread finished the rule with nothing known below (escape point). */
  localEnd: Uint8Array<ArrayBuffer> = new Uint8Array(256);
  private trans = new Int32Array(256 * 256).fill(-1);
  private readonly scratch = new ThreadSet();
  private readonly startSet = new ThreadSet();

  constructor(private readonly a: Automaton) {
    this.reset();
  }

  private reset(): void {
    this.stepper = new Stepper(this.a, new StackTable(this.a.numNodes), Mode.Local);
    this.ids.clear();
    this.sets = [];
    this.trans.fill(-1);
  }

  /** The state of one thread at `node` (a node that reads bytes), stack empty. */
  start(node: number): number {
    if (this.sets.length > MAX_STATES) this.reset();
    this.startSet.clear();
    this.startSet.add(node, 0, 0);
    return this.intern(this.startSet);
  }

  next(state: number, byte: number): number {
    const k = state * 256 + byte;
    const hit = this.trans[k]!;
    if (hit >= 0) return hit;
    this.stepper.step(this.sets[state]!, byte, this.scratch);
    const id = this.intern(this.scratch);
    this.trans[k] = id;
    return id;
  }

  private intern(set: ThreadSet): number {
    // Order-insensitive numeric hash, then an exact comparison within the bucket.
    let h = set.localEnd ? 0x9e3779b9 : 0;
    for (let i = 0; i < set.count; i++) h = (h + mix(set.node[i]!, set.stack[i]!)) | 0;
    h = (h ^ set.count) | 0;
    const bucket = this.ids.get(h);
    if (bucket !== undefined) {
      for (const id of bucket) if (sameThreads(this.sets[id]!, set)) return id;
    }
    const id = this.sets.length;
    const copy = new ThreadSet();
    copy.copyFrom(set);
    this.sets.push(copy);
    if (bucket !== undefined) bucket.push(id);
    else this.ids.set(h, [id]);
    if (id >= this.alive.length) {
      const grow = (x: Uint8Array<ArrayBuffer>): Uint8Array<ArrayBuffer> => {
        const y = new Uint8Array(x.length * 2);
        y.set(x);
        return y;
      };
      this.alive = grow(this.alive);
      this.localEnd = grow(this.localEnd);
      const t = new Int32Array(this.alive.length * 256).fill(-1);
      t.set(this.trans);
      this.trans = t;
    }
    this.alive[id] = set.direct > 0 ? 1 : 0;
    this.localEnd[id] = set.localEnd ? 1 : 0;
    return id;
  }
}

function mix(node: number, stack: number): number {
  let x = Math.imul(node ^ 0x5bd1e995, 0x27d4eb2d) ^ Math.imul(stack + 0x165667b1, 0x85ebca6b);
  x ^= x >>> 15;
  return Math.imul(x, 0xc2b2ae35);
}

/** Same threads (each set holds distinct threads) and the same escape flag. */
function sameThreads(x: ThreadSet, y: ThreadSet): boolean {
  if (x.count !== y.count || x.localEnd !== y.localEnd) return false;
  outer: for (let i = 0; i < x.count; i++) {
    for (let j = 0; j < y.count; j++) if (x.node[i] === y.node[j] && x.stack[i] === y.stack[j]) continue outer;
    return false;
  }
  return true;
}

const dfas = new WeakMap<Automaton, LocalDfa>();

export function localDfa(a: Automaton): LocalDfa {
  let d = dfas.get(a);
  if (d === undefined) {
    d = new LocalDfa(a);
    dfas.set(a, d);
  }
  return d;
}
