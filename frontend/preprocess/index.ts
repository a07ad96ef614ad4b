/** Public surface of frontend/preprocess: tokenizer, chat template, incremental detokenizer. */
export { HfTokenizer, loadTokenizer, type EncodeOptions, type DecodeOptions, type TokenBytesTable } from './tokenizer.js';
export { ChatTemplate, type ChatMessage, type ChatContentPart, type RenderOptions } from './chat-template.js';
export { IncrementalDetokenizer, type DetokenizerOptions, type DetokenizerFinishReason } from './detokenizer.js';
export { StopStringMatcher } from './stop-strings.js';
export { createTextStream, ByteLevelTextStream, WindowedTextStream, type TokenTextStream, type TextStreamOptions } from './token-text.js';
export { TokenizerLoadError, ChatTemplateMissingError, ChatTemplateError } from './errors.js';
