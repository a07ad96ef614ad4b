/**
 * Test stand-ins for the worker's structured-output tests: a toy byte vocabulary and a tiny
 * DFA-backed GrammarMatcher, so the engine-loop glue (masks, EOS gating, closing mode, length
 * finish) is tested without the real grammar engine. The real one is tested in test/grammar/
 * and end to end in test/e2e/structured-validity.test.ts.
 */
import type { GrammarMatcher } from '../../grammar/contract.js';
import type { StructuredOutputSpec } from '../../proto/structured-output.js';
import type { GrammarProvider } from '../../workers/engine-loop/structured-decoding.js';
import { GrammarError } from '../../grammar/contract.js';

/** Toy vocab: ids 0..255 are single bytes, 256 = "ab", 257 = "bc", 258 = EOS. */
export const TOY_VOCAB = 260;
export const TOY_EOS = 258;
export const TOY_TOKENS: ReadonlyArray<Uint8Array | null> = (() => {
  const t: Array<Uint8Array | null> = [];
  for (let b = 0; b < 256; b++) t.push(Uint8Array.of(b));
  t.push(new TextEncoder().encode('ab'), new TextEncoder().encode('bc'), null, null);
  return t;
})();

/** A DFA over bytes: next[state].get(byte) → state; accepting states may end the output. */
export interface Dfa {
  next: Array<Map<number, number>>;
  accepting: Set<number>;
}

/** A DFA matching exactly one of `choices` (a trie). */
export function choiceDfa(choices: string[]): Dfa {
  const next: Array<Map<number, number>> = [new Map()];
  const accepting = new Set<number>();
  for (const c of choices) {
    let s = 0;
    for (const b of new TextEncoder().encode(c)) {
      let t = next[s]!.get(b);
      if (t === undefined) {
        t = next.length;
        next.push(new Map());
        next[s]!.set(b, t);
      }
      s = t;
    }
    accepting.add(s);
  }
  return { next, accepting };
}

/** `x+` for one byte x: never ends by itself, only by EOS. */
export function plusDfa(byte: number): Dfa {
  return { next: [new Map([[byte, 1]]), new Map([[byte, 1]])], accepting: new Set([1]) };
}

export class DfaMatcher implements GrammarMatcher {
  private state = 0;
  private ended = false;
  private readonly minBytes: number[];

  fork(): DfaMatcher {
    const f = Object.create(DfaMatcher.prototype) as DfaMatcher;
    Object.assign(f, this);
    return f;
  }

  constructor(private readonly dfa: Dfa) {
    // Backward BFS from accepting states: fewest bytes to acceptance per state.
    this.minBytes = dfa.next.map(() => Infinity);
    for (const s of dfa.accepting) this.minBytes[s] = 0;
    for (let changed = true; changed; ) {
      changed = false;
      dfa.next.forEach((edges, s) => {
        for (const t of edges.values()) {
          if (this.minBytes[t]! + 1 < this.minBytes[s]!) {
            this.minBytes[s] = this.minBytes[t]! + 1;
            changed = true;
          }
        }
      });
    }
  }

  private walk(bytes: Uint8Array, closing: boolean): number | undefined {
    let s = this.state;
    for (const b of bytes) {
      const t = this.dfa.next[s]!.get(b);
      if (t === undefined) return undefined;
      if (closing && this.minBytes[t]! !== this.minBytes[s]! - 1) return undefined;
      s = t;
    }
    return s;
  }

  fillNextTokenBitmask(mask: Uint32Array, options?: { closing?: boolean }): void {
    mask.fill(0);
    const closing = options?.closing === true;
    for (let id = 0; id < TOY_VOCAB; id++) {
      const bytes = TOY_TOKENS[id];
      const ok = bytes == null ? id === TOY_EOS && this.canTerminate() : !this.ended && this.walk(bytes, closing) !== undefined;
      if (ok) mask[id >>> 5]! |= 1 << (id & 31);
    }
  }
  acceptToken(id: number): boolean {
    if (this.ended) return false;
    if (id === TOY_EOS) {
      if (!this.canTerminate()) return false;
      this.ended = true;
      return true;
    }
    const bytes = TOY_TOKENS[id];
    const s = bytes == null ? undefined : this.walk(bytes, false);
    if (s === undefined) return false;
    this.state = s;
    return true;
  }
  canTerminate(): boolean {
    return this.dfa.accepting.has(this.state);
  }
  isTerminated(): boolean {
    return this.ended || (this.canTerminate() && this.dfa.next[this.state]!.size === 0);
  }
  minBytesToAccept(): number {
    return this.minBytes[this.state]!;
  }
  /** The toy DFAs commit to nothing longer than their minimum. */
  maxBytesToAccept(): number {
    return this.minBytes[this.state]!;
  }
}

/** Choice specs → choice DFAs, regex "x+" → plusDfa; anything else is a GrammarError. */
export const toyProvider: GrammarProvider = {
  vocabSize: TOY_VOCAB,
  matcherFor(spec: StructuredOutputSpec): GrammarMatcher {
    if (spec.kind === 'choice') return new DfaMatcher(choiceDfa(spec.choices));
    if (spec.kind === 'regex' && /^.\+$/.test(spec.pattern)) return new DfaMatcher(plusDfa(spec.pattern.charCodeAt(0)));
    throw new GrammarError('unsupported_feature', `toy provider: ${spec.kind} is not supported`);
  },
};

export function decodeToy(ids: number[]): string {
  return ids
    .filter((id) => id !== TOY_EOS)
    .map((id) => new TextDecoder().decode(TOY_TOKENS[id]!))
    .join('');
}
