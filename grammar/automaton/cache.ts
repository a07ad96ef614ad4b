/**
 * The compiled-grammar cache: spec → automaton (per spec, vocabulary-free) and (spec,
 * vocabulary) → CompiledGrammar, both LRU-bounded. One per worker process; the spec's JSON
 * text is the key, so the same schema sent by many requests compiles once. Property order is
 * part of the key on purpose: it is the order the output writes.
 */
import type { GrammarMatcher, Vocabulary } from '../contract.js';
import { compileSpec } from '../compile/index.js';
import type { StructuredOutputSpec } from '../../proto/wire.js';
import { type Automaton, buildAutomaton } from './automaton.js';
import { CompiledGrammar } from './matcher.js';
import { tokenTrie } from './token-trie.js';

export interface GrammarCacheStats {
  hits: number;
  misses: number;
  size: number;
}

export class GrammarCache {
  private readonly automata = new Map<string, Automaton>();
  private readonly compiled = new Map<string, CompiledGrammar>();
  private hits = 0;
  private misses = 0;

  constructor(private readonly maxEntries = 128) {}

  /** Compile-or-reuse. Throws GrammarError (invalid_argument) for a spec that cannot be honoured. */
  compile(spec: StructuredOutputSpec, vocab: Vocabulary): CompiledGrammar {
    const specKey = JSON.stringify(spec);
    const key = `${vocab.id}\n${specKey}`;
    const hit = this.compiled.get(key);
    if (hit) {
      this.hits++;
      touch(this.compiled, key, hit);
      return hit;
    }
    this.misses++;
    const g = new CompiledGrammar(this.automaton(spec, specKey), vocab);
    put(this.compiled, key, g, this.maxEntries);
    return g;
  }

  /**
   * One-time work for a vocabulary, done at worker start rather than inside the first
   * constrained request's step: the token trie, and the token classes of the generic JSON rules
   * (strings, numbers, any value) that every JSON schema shares. Returns the milliseconds spent.
   */
  warm(vocab: Vocabulary): number {
    const t0 = performance.now();
    tokenTrie(vocab);
    this.compile({ kind: 'json_object' }, vocab).classifyAll();
    return performance.now() - t0;
  }

  matcherFor(spec: StructuredOutputSpec, vocab: Vocabulary): GrammarMatcher {
    return this.compile(spec, vocab).matcher();
  }

  stats(): GrammarCacheStats {
    return { hits: this.hits, misses: this.misses, size: this.compiled.size };
  }

  private automaton(spec: StructuredOutputSpec, specKey: string): Automaton {
    const hit = this.automata.get(specKey);
    if (hit) {
      touch(this.automata, specKey, hit);
      return hit;
    }
    const a = buildAutomaton(compileSpec(spec));
    put(this.automata, specKey, a, this.maxEntries);
    return a;
  }
}

function touch<V>(m: Map<string, V>, key: string, v: V): void {
  m.delete(key);
  m.set(key, v);
}

function put<V>(m: Map<string, V>, key: string, v: V, max: number): void {
  m.set(key, v);
  while (m.size > max) m.delete(m.keys().next().value!);
}

const processCache = new GrammarCache();

/** A fresh matcher for `spec` over `vocab`, through the process-wide cache. */
export function createMatcher(spec: StructuredOutputSpec, vocab: Vocabulary): GrammarMatcher {
  return processCache.matcherFor(spec, vocab);
}

/**
 * Checks that a spec compiles (the frontend's 400s): front end and automaton, no vocabulary.
 * Throws GrammarError naming the problem.
 */
export function validateSpec(spec: StructuredOutputSpec): void {
  buildAutomaton(compileSpec(spec));
}
