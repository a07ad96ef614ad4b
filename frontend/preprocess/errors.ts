/**
 * Typed preprocessing errors. A broken tokenizer file is the operator's configuration problem
 * (`config_invalid`); a missing template or a template that rejects the conversation is the
 * caller's bad request (`invalid_argument`, mapped to HTTP 400 at the frontend edge).
 */
import { TandemError } from '../../runtime/errors.js';

export class TokenizerLoadError extends TandemError {
  override readonly name = 'TokenizerLoadError';
  constructor(message: string, options?: { cause?: unknown }) {
    super('config_invalid', message, options);
  }
}

export class ChatTemplateMissingError extends TandemError {
  override readonly name = 'ChatTemplateMissingError';
  constructor(readonly source: string) {
    super('invalid_argument', `model at ${source} has no chat template; use /v1/completions with a plain prompt`);
  }
}

export class ChatTemplateError extends TandemError {
  override readonly name = 'ChatTemplateError';
  constructor(message: string, options?: { cause?: unknown }) {
    super('invalid_argument', message, options);
  }
}
