/** Public surface of frontend/preprocess: tokenizer, chat template, prompt tokenization (inline or pooled), incremental detokenizer. */
export { HfTokenizer, loadTokenizer, type EncodeOptions, type DecodeOptions, type TokenBytesTable } from './tokenizer.js';
export { ChatTemplate, type ChatMessage, type ChatContentPart, type RenderOptions } from './chat-template.js';
export { IncrementalDetokenizer, type DetokenizerOptions, type DetokenizerFinishReason } from './detokenizer.js';
export { StopStringMatcher } from './stop-strings.js';
export { createTextStream, ByteLevelTextStream, WindowedTextStream, type TokenTextStream, type TextStreamOptions } from './token-text.js';
export { TokenizerLoadError, ChatTemplateMissingError, ChatTemplateError } from './errors.js';
export { tokenizePrompt, loadPromptModel, minPromptTokens, type PromptSpec, type PromptTokens, type PromptModel, type PromptSource } from './prompt.js';
export { PreprocessPool, defaultPreprocessThreads, type PreprocessPoolOptions } from './pool.js';
export { bytesPerTokenBound, minTokensForBytes } from './token-bound.js';
