/**
 * The grammar engine's public surface: the contract its callers code against (vocabulary,
 * matcher, errors), the IR, the spec compilers and the tokenizer-vocabulary reader.
 */
export * from './contract.js';
export * from './ir.js';
export { compileSpec } from './compile/index.js';
export { vocabularyFromTokenizerJson } from './vocabulary.js';
export { TOOL_CALL_FORMATS, type ToolCallFormat } from './tool-calls/formats.js';
export { GrammarCache, GRAMMAR_CACHE_BYTES, buildAutomatonFor, createMatcher, validateSpec, type GrammarCacheStats } from './automaton/cache.js';
export { type Automaton } from './automaton/automaton.js';
export { packClasses, unpackClasses } from './automaton/packed-classes.js';
export {
  CompileBudget,
  compileLimits,
  compileMemoryExceeded,
  compileTimeExceeded,
  DEFAULT_COMPILE_LIMITS,
  DEFAULT_COMPILE_MEMORY_MB,
  DEFAULT_COMPILE_TIMEOUT_MS,
  type CompileLimits,
} from './budget.js';
export { CompiledGrammar, type ForkableMatcher } from './automaton/matcher.js';
export { clearSharedTokenClasses, localClassifications } from './automaton/token-classes.js';
export {
  createToolCallStreamParser,
  parseToolCalls,
  newToolCallId,
  toolCallMarker,
  LLAMA_PYTHON_TAG,
  type ToolCallDelta,
  type ParsedToolCall,
  type ToolCallStreamParser,
} from './tool-calls/parsers.js';
export { detectToolCallFormat } from './tool-calls/detect.js';
export { createReasoningParser, splitReasoning, THINK_OPEN, THINK_CLOSE, type ReasoningPhase, type ReasoningSplit, type ReasoningStreamParser } from './reasoning/think.js';
export { packVocabulary, unpackVocabulary, type PackedVocabulary } from './vocabulary.js';
export { type ClassifiedNode } from './automaton/matcher.js';
export { GrammarCompiler, type CompileOutcome, type GrammarCompilerOptions } from './off-thread/compiler.js';
