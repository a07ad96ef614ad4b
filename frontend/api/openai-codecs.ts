/**
 * Codecs 1 and 2: OpenAI Chat Completions and Completions. Their frames and bodies are built by
 * openai/format.ts (ChatChunkWriter / CompletionChunkWriter, ChatUnaryCollector /
 * CompletionUnaryCollector); this file only adapts them to ApiCodec.
 */
import { errorBody, type ApiError } from '../errors.js';
import { disaggNvext } from '../disagg/response.js';
import { ChatChunkWriter, ChatUnaryCollector, CompletionChunkWriter, CompletionUnaryCollector } from '../openai/format.js';
import { parseChatRequest, parseCompletionRequest } from '../openai/validate.js';
import type { PreparedGeneration } from '../pipeline/generation.js';
import { dataFrame, type ApiCodec, type StreamEncoder, type UnaryEncoder } from './codec.js';

const DONE_FRAME = 'data: [DONE]\n\n';

function chatStream(prepared: PreparedGeneration): StreamEncoder {
  const chunks = new ChatChunkWriter(prepared);
  return {
    open: (out) => void out.frame(dataFrame(chunks.roleChunk())),
    delta(text, logprobs, out) {
      if (chunks.output === undefined) return out.frame(dataFrame(chunks.delta(text, logprobs)));
      let backpressure: Promise<void> | undefined;
      for (const chunk of chunks.outputDeltas(text, logprobs)) backpressure = out.frame(dataFrame(chunk));
      return backpressure;
    },
    finish(reason, usage, out) {
      if (chunks.output !== undefined) for (const chunk of chunks.outputEnd()) out.frame(dataFrame(chunk));
      let backpressure = out.frame(dataFrame(chunks.finish(reason)));
      if (prepared.input.includeUsage) backpressure = out.frame(dataFrame(chunks.usage(usage)));
      return { finishReason: chunks.finishReason(reason), backpressure };
    },
    done: () => DONE_FRAME,
  };
}

function completionStream(prepared: PreparedGeneration): StreamEncoder {
  const chunks = new CompletionChunkWriter(prepared);
  return {
    open: () => undefined,
    delta: (text, logprobs, out) => out.frame(dataFrame(chunks.delta(text, logprobs))),
    finish(reason, usage, out) {
      let backpressure = out.frame(dataFrame(chunks.finish(reason)));
      if (prepared.input.includeUsage) backpressure = out.frame(dataFrame(chunks.usage(usage)));
      return { finishReason: reason, backpressure };
    },
    done: () => DONE_FRAME,
  };
}

/** Either collector as a UnaryEncoder; the finish reason is the one the body reports. */
function unary(collector: ChatUnaryCollector | CompletionUnaryCollector): UnaryEncoder {
  return {
    add: (text, logprobs) => collector.add(text, logprobs),
    body(reason, usage) {
      const body = collector.body(reason, usage) as { choices: Array<{ finish_reason: string }> };
      return { body, finishReason: body.choices[0]!.finish_reason };
    },
  };
}

const openAiErrors = {
  errorBody: (err: ApiError): object => errorBody(err),
  streamError: (err: ApiError): string => `${dataFrame(JSON.stringify(errorBody(err)))}${DONE_FRAME}`,
  unaryExtras: (prepared: PreparedGeneration): object | undefined => (prepared.disagg ? { nvext: disaggNvext(prepared.disagg) } : undefined),
};

export const chatCodec: ApiCodec = {
  endpoint: 'chat_completions',
  idPrefix: 'chatcmpl-',
  parse: (body) => parseChatRequest(body),
  streamEncoder: chatStream,
  unaryEncoder: (prepared) => unary(new ChatUnaryCollector(prepared)),
  ...openAiErrors,
};

export const completionCodec: ApiCodec = {
  endpoint: 'completions',
  idPrefix: 'cmpl-',
  parse: (body) => parseCompletionRequest(body),
  streamEncoder: completionStream,
  unaryEncoder: (prepared) => unary(new CompletionUnaryCollector(prepared)),
  ...openAiErrors,
};
