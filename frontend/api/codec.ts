/**
 * ApiCodec: what makes one HTTP API (Chat Completions, Completions, Anthropic Messages, …) out
 * of the one generation pipeline. A codec only translates: its body into a GenerationRequest,
 * the pipeline's text events into its stream frames or unary body, and errors into its error
 * shape. Reading, admission, preprocessing, routing, migration, disaggregation, structured
 * output, tool-call and reasoning parsing, metrics and the dashboard are the handler's
 * (http/generate-handler.ts) and the pipeline's, the same for every codec.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { TokenLogprob } from '../../proto/wire.js';
import type { ApiError } from '../errors.js';
import type { OpenAiFinishReason, PreparedGeneration, Usage } from '../pipeline/generation.js';
import type { GenerationRequest } from '../openai/validate.js';
import type { ParamNames } from './param-names.js';

/** Where a stream encoder writes: one already-framed SSE frame; a promise while the client is slow. */
export interface FrameSink {
  frame(frame: string): Promise<void> | undefined;
}

/** One streamed response. Methods are called in order: open, delta*, finish, then done (or the codec's streamError). */
export interface StreamEncoder {
  /** Frames before the first token (chat's role chunk, Messages' message_start). */
  open(out: FrameSink): void;
  /** The frames for one piece of text, made by `tokens` generated tokens; returns the last send's backpressure. */
  delta(text: string, logprobs: readonly TokenLogprob[] | undefined, out: FrameSink, tokens: number): Promise<void> | undefined;
  /** Frames for what parsers held back, the finish and the usage (`stopString`: the stop string that ended it). Returns the reason the client was told. */
  finish(reason: OpenAiFinishReason, usage: Usage, out: FrameSink, stopString?: string): { finishReason: string; backpressure: Promise<void> | undefined };
  /** The framed tail of a stream that ended well (`data: [DONE]`, or '' for APIs with none). */
  done(): string;
  /** The framed error and end of this stream, when it depends on what was sent (Responses' sequence numbers); default: the codec's `streamError`. */
  error?(err: ApiError): string;
}

/** One unary response. */
export interface UnaryEncoder {
  /** One piece of text, made by `tokens` generated tokens. */
  add(text: string, logprobs: readonly TokenLogprob[] | undefined, tokens: number): void;
  /** The body and the finish reason it reports (the same one a stream of the request reports). */
  body(reason: OpenAiFinishReason, usage: Usage, stopString?: string): { body: object; finishReason: string };
}

export interface ApiCodec {
  /** The `endpoint` label of `tandem_frontend_requests_total` and the dashboard's request inspector. */
  readonly endpoint: string;
  /** The untrusted body (and headers) in, a validated request out; an ApiError naming the field otherwise. */
  parse(body: unknown, headers: IncomingHttpHeaders): GenerationRequest;
  /** The request id's prefix, separator included (`chatcmpl-`, `msg_`, …). */
  readonly idPrefix: string;
  /**
   * Called once the request is prepared, with a way to end it early (`cancel` aborts it; the
   * client gets the given error). Returns what to call when it ends. Responses' `/cancel` uses it.
   */
  track?(prepared: PreparedGeneration, cancel: (err: ApiError) => void): () => void;
  streamEncoder(prepared: PreparedGeneration): StreamEncoder;
  unaryEncoder(prepared: PreparedGeneration): UnaryEncoder;
  /** The error body of a response that has not started. */
  errorBody(err: ApiError): object;
  /** The framed error and end of a stream that has started. */
  streamError(err: ApiError): string;
  /** Extra unary body fields (disaggregation's `nvext` on the OpenAI codecs); absent = none. */
  unaryExtras?(prepared: PreparedGeneration): object | undefined;
  /**
   * Chat field → this API's field, for every error this route answers (param-names.ts): its
   * body becomes a chat request, so chat validation and the pipeline name chat's fields.
   * Absent: the API's fields are chat's (Chat Completions, Completions).
   */
  readonly paramNames?: ParamNames;
}

/** `data: <json>\n\n`: the OpenAI frame. */
export const dataFrame = (json: string): string => `data: ${json}\n\n`;
/** `event: <name>\ndata: <json>\n\n`: the Anthropic and Responses frame. */
export const eventFrame = (event: string, json: string): string => `event: ${event}\ndata: ${json}\n\n`;
