/**
 * The compiled-grammar cache: spec → automaton (per spec, vocabulary-free) and (spec,
 * vocabulary) → CompiledGrammar, both LRU-bounded in entries and bytes. One per worker process; the spec's JSON
 * text is the key, so the same schema sent by many requests compiles once. Property order is
 * part of the key on purpose: it is the order the output writes.
 */
import type { GrammarMatcher, Vocabulary } from '../contract.js';
import { compileSpec } from '../compile/index.js';
import type { StructuredOutputSpec } from '../../proto/wire.js';
import { type Automaton, buildAutomaton } from './automaton.js';
import { CompiledGrammar } from './matcher.js';
import { automatonBytes } from './packed-classes.js';
import type { CompileBudget } from '../budget.js';
import { LruMap } from '../../runtime/lru.js';
import { tokenTrie } from './token-trie.js';

export interface GrammarCacheStats {
  hits: number;
  misses: number;
  size: number;
  /** Bytes held by the compiled grammars (automata and token classes known when cached). */
  bytes: number;
}

/** Default bound of a cache's compiled grammars, in bytes (a big grammar evicts small ones). */
export const GRAMMAR_CACHE_BYTES = 256 * 1024 * 1024;

export class GrammarCache {
  private readonly automata: LruMap<string, Automaton>;
  private readonly compiled: LruMap<string, CompiledGrammar>;
  private hits = 0;
  private misses = 0;

  constructor(maxEntries = 128, maxBytes = GRAMMAR_CACHE_BYTES) {
    this.automata = new LruMap({ maxEntries, maxWeight: maxBytes, weigh: automatonBytes });
    this.compiled = new LruMap({ maxEntries, maxWeight: maxBytes, weigh: (g) => g.bytes() });
  }

  /**
   * Compile-or-reuse, on the calling thread. Throws GrammarError (invalid_argument) for a spec
   * that cannot be honoured, or that runs past `budget`.
   */
  compile(spec: StructuredOutputSpec, vocab: Vocabulary, budget?: CompileBudget): CompiledGrammar {
    const specKey = JSON.stringify(spec);
    const key = `${vocab.id}\n${specKey}`;
    const hit = this.compiled.get(key);
    if (hit) {
      this.hits++;
      return hit;
    }
    this.misses++;
    const g = new CompiledGrammar(this.automaton(spec, specKey, budget), vocab);
    this.compiled.set(key, g);
    return g;
  }

  /** The cached grammar for (spec, vocab), or undefined; compiles nothing. */
  lookup(spec: StructuredOutputSpec, vocab: Vocabulary): CompiledGrammar | undefined {
    return this.compiled.get(`${vocab.id}\n${JSON.stringify(spec)}`);
  }

  /**
   * Cache a grammar compiled and classified on another thread (its automaton and its token
   * classes packed in one buffer, decoded per node on use), weighed with its classes.
   */
  adopt(spec: StructuredOutputSpec, vocab: Vocabulary, automaton: Automaton, packedClasses: ArrayBuffer): CompiledGrammar {
    const key = `${vocab.id}\n${JSON.stringify(spec)}`;
    const hit = this.compiled.get(key);
    if (hit) return hit;
    this.misses++;
    const g = new CompiledGrammar(automaton, vocab);
    g.installPacked(packedClasses);
    this.compiled.set(key, g);
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
    return { hits: this.hits, misses: this.misses, size: this.compiled.size, bytes: this.compiled.weight };
  }

  private automaton(spec: StructuredOutputSpec, specKey: string, budget: CompileBudget | undefined): Automaton {
    const hit = this.automata.get(specKey);
    if (hit) return hit;
    const a = buildAutomaton(compileSpec(spec), budget);
    this.automata.set(specKey, a);
    return a;
  }
}

const processCache = new GrammarCache();

/** A fresh matcher for `spec` over `vocab`, through the process-wide cache. */
export function createMatcher(spec: StructuredOutputSpec, vocab: Vocabulary): GrammarMatcher {
  return processCache.matcherFor(spec, vocab);
}

/** Spec → automaton within `budget` (a compile thread's first step). Throws GrammarError. */
export function buildAutomatonFor(spec: StructuredOutputSpec, budget?: CompileBudget): Automaton {
  budget?.check();
  return buildAutomaton(compileSpec(spec), budget);
}

/**
 * Checks that a spec compiles (the frontend's 400s): front end and automaton, no vocabulary.
 * Throws GrammarError naming the problem.
 */
export function validateSpec(spec: StructuredOutputSpec, budget?: CompileBudget): void {
  buildAutomatonFor(spec, budget);
}
