/**
 * The grammar engine's public surface: the contract its callers code against (vocabulary,
 * matcher, errors), the IR, the spec compilers and the tokenizer-vocabulary reader.
 */
export * from './contract.js';
export * from './ir.js';
export { compileSpec } from './compile/index.js';
export { vocabularyFromTokenizerJson } from './vocabulary.js';
export { TOOL_CALL_FORMATS, type ToolCallFormat } from './tool-calls/formats.js';
