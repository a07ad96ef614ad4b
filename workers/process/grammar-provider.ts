/**
 * The worker's GrammarProvider: its Vocabulary (tokenizer.json, read once) plus the process's
 * one compiled-grammar cache. The cache side is the grammar engine's (grammar/index.ts); this
 * adapter only needs "a matcher for this spec over this vocabulary", so it is typed by that.
 */
import type { GrammarMatcher, Vocabulary } from '../../grammar/index.js';
import type { StructuredOutputSpec } from '../../proto/wire.js';
import type { GrammarProvider } from '../engine-loop/structured-decoding.js';

/** What the worker needs from the grammar engine's cache: compile-or-reuse, then a fresh matcher. */
export interface MatcherSource {
  matcherFor(spec: StructuredOutputSpec, vocab: Vocabulary): GrammarMatcher;
}

/** Off-loop compilation of new grammars (grammar-compiler.ts); `signal` cancels it. */
export interface GrammarPreparer {
  prepare(spec: StructuredOutputSpec, signal?: AbortSignal): Promise<void> | undefined;
}

export function workerGrammarProvider(vocab: Vocabulary, source: MatcherSource, preparer?: GrammarPreparer): GrammarProvider {
  return {
    vocabSize: vocab.size,
    matcherFor: (spec) => source.matcherFor(spec, vocab),
    ...(preparer !== undefined ? { prepare: (spec: StructuredOutputSpec, signal?: AbortSignal) => preparer.prepare(spec, signal) } : {}),
  };
}
