/**
 * The request pipeline for one generation request:
 *   prepare: model lookup → chat template + tokenize → context check → route (first instance)
 *   run:     worker deltas (with migration) → stop token ids → incremental detokenize with stop
 *            strings → text events, then one finish event with usage.
 * Everything that can fail as a clean HTTP status fails in prepare, before any byte is sent.
 */
import { randomUUID } from 'node:crypto';
import type { InstanceId, PreprocessedRequest, TokenLogprob } from '../../proto/wire.js';
import { parseInstanceId } from '../../runtime/index.js';
import type { CodecCache, ModelCodec, PromptInput, TokenizedPrompt } from '../codec.js';
import { TandemError } from '../../runtime/index.js';
import type { DisaggPrepared, Disaggregator } from '../disagg/disaggregator.js';
import { ApiError, badRequest, modelNotFound } from '../errors.js';
import { findAdapter } from '../lora/served-adapters.js';
import type { ModelMetrics } from '../metrics.js';
import type { ModelWatcher, ServedModel } from '../model-watcher.js';
import { DEFAULT_MODEL_PARSERS, checkRequestGrammar, promptOpensReasoning, resolveModelParsers, type GrammarChecker, type ModelParserOptions } from '../openai/structured.js';
import { DEFAULT_COMPILE_LIMITS, GrammarCompiler } from '../../grammar/index.js';
import { CancelledError } from '../../runtime/index.js';
import type { GenerationRequest } from '../openai/validate.js';
import type { WorkerSelector } from '../routing.js';
import type { WorkerHealth } from '../worker-health.js';
import { chooseTarget } from './attempt-target.js';
import { streamWithMigration, type MigrationPlan } from './migration.js';

export type OpenAiFinishReason = 'stop' | 'length';

export interface Usage {
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
}

export type GenerationEvent =
  | { type: 'delta'; text: string; tokenIds: readonly number[]; logprobs: TokenLogprob[] | undefined }
  /** `stopString`: the stop string that ended the output, when one did (Messages reports it). */
  | { type: 'finish'; finishReason: OpenAiFinishReason; usage: Usage; stopString?: string };

export interface PreparedGeneration {
  id: string;
  created: number;
  input: GenerationRequest;
  model: ServedModel;
  codec: ModelCodec;
  request: PreprocessedRequest;
  firstInstance: InstanceId;
  /** No worker of the model's own pool was up: firstInstance is a prefill worker running the whole request. */
  firstOnFallback?: boolean;
  pinned: boolean;
  /**
   * Times this request moved to another worker so far (after a failure, before or after its
   * first token); the same events `tandem_frontend_migrations_total` counts. Final once `run` ends.
   */
  migrations: number;
  /** Set when the prompt runs on a prefill worker (firstInstance is then the decode worker). */
  disagg?: DisaggPrepared;
  /** performance.now() at arrival, for TTFT and duration. */
  startedAt: number;
}

export interface PipelineConfig {
  models: ModelWatcher;
  codecs: CodecCache;
  selector: WorkerSelector;
  migrationLimit: number;
  /**
   * How long a request waits for a worker when its pool has none up and no fallback pool can
   * take it (a lone worker died and is being restarted), in prepare and on migration (ms).
   */
  migrationWaitMs?: number;
  /** Keeps workers that just failed out of routing for a while. */
  health?: WorkerHealth;
  onMigrate?: (model: string, from: InstanceId, generated: number, cause: unknown) => void;
  /** The prefill router; absent = every request runs aggregated. */
  disagg?: Disaggregator;
  /** `--tool-call-parser` / `--reasoning-parser`; default: auto-detected tool calls, no reasoning split. */
  parsers?: ModelParserOptions;
  /** Compiles output grammars off the event loop within the compile budget; default: shared, default budget. */
  grammar?: GrammarChecker;
}

let sharedChecker: GrammarCompiler | undefined;
/** For pipelines built without one (tests, embedders): threads start on first use and are unref'd while idle. */
function defaultGrammarChecker(): GrammarCompiler {
  sharedChecker ??= new GrammarCompiler({ limits: DEFAULT_COMPILE_LIMITS, threads: 2 });
  return sharedChecker;
}

export const DIRECT_ROUTE_HEADER = 'x-worker-instance-id';

/**
 * OpenAI's context-length error. `atLeast`: the prompt was refused by the byte bound before it
 * was encoded, so its token count is a lower bound.
 */
function contextLengthExceeded(input: GenerationRequest, contextLength: number, promptTokens: number, atLeast: boolean): ApiError {
  const completion = Math.max(1, input.maxTokens ?? contextLength - promptTokens);
  const least = atLeast ? 'at least ' : '';
  return new ApiError(
    'context_length_exceeded',
    `This model's maximum context length is ${contextLength} tokens. However, you requested ` +
      `${least}${promptTokens + completion} tokens (${least}${promptTokens} in the ` +
      `${input.kind === 'chat' ? 'messages' : 'prompt'}, ${completion} in the completion). ` +
      'Please reduce the length of the prompt or the completion.',
    input.maxTokens !== undefined ? 'max_tokens' : input.kind === 'chat' ? 'messages' : 'prompt',
  );
}

/** Template failures are the caller's bad request; pool overload or a crashed thread are not. */
function isTemplateError(err: unknown): boolean {
  if (err instanceof ApiError) return false;
  return !(err instanceof TandemError) || err.code === 'invalid_argument';
}

export class GenerationPipeline {
  constructor(private readonly config: PipelineConfig) {}

  /** Model lookup only: lets the HTTP layer label metrics before the heavier work. */
  model(name: string): ServedModel {
    const model = this.config.models.model(name) ?? findAdapter(this.config.models, name)?.model;
    if (!model) throw modelNotFound(name);
    return model;
  }

  /** `idPrefix`: the API's id prefix (the codec's, separator included); default `chatcmpl-` / `cmpl-` by the request's kind. */
  async prepare(input: GenerationRequest, directHeader: string | undefined, startedAt: number, signal?: AbortSignal, idPrefix?: string): Promise<PreparedGeneration> {
    const model = this.model(input.model);
    const card = model.primaryCard();
    if (!card) throw modelNotFound(input.model);
    // The output grammar compiles on a thread, within its budget: a 400 before any routing.
    await checkRequestGrammar(input, this.config.grammar ?? defaultGrammarChecker(), signal);
    if (signal?.aborted) throw new CancelledError('request cancelled while its output grammar compiled');
    const codec = await this.config.codecs.get(card);
    const contextLength = model.contextLength();
    // Without max_tokens the completion may use the rest of the context, but at least 1 token.
    const completionShare = Math.max(1, input.maxTokens ?? 1);
    const tokenIds = await this.tokenize(input, codec, contextLength - completionShare, signal);
    if (tokenIds.length === 0) throw badRequest('the prompt is empty after tokenization', input.kind === 'chat' ? 'messages' : 'prompt');
    const maxTokens = input.maxTokens ?? contextLength - tokenIds.length;
    if (tokenIds.length + Math.max(1, maxTokens) > contextLength) throw contextLengthExceeded(input, contextLength, tokenIds.length, false);
    const stopTokenIds = input.ignoreEos ? input.stopTokenIds : [...new Set([...card.eosTokenIds, ...input.stopTokenIds])];
    const id = `${idPrefix ?? (input.kind === 'chat' ? 'chatcmpl-' : 'cmpl-')}${randomUUID().replace(/-/g, '')}`;
    // A LoRA adapter named as the model runs on its base model's workers that hold it.
    const adapter = model.name !== input.model ? findAdapter(this.config.models, input.model)?.adapter : undefined;
    const request: PreprocessedRequest = {
      requestId: id,
      model: model.name,
      ...(adapter !== undefined ? { lora: adapter.name, loraId: adapter.loraId, ...(adapter.path !== undefined ? { loraPath: adapter.path } : {}) } : {}),
      tokenIds,
      sampling: input.sampling,
      stop: { maxTokens, stopTokenIds, ignoreEos: input.ignoreEos, ...(input.minTokens !== undefined ? { minTokens: input.minTokens } : {}) },
    };
    if (input.logprobs !== undefined) request.logprobs = input.logprobs;
    if (input.kind === 'chat') {
      // The tool-call format and a forced call's grammar depend on the served model.
      resolveModelParsers(input, codec.chatTemplate, this.config.parsers ?? DEFAULT_MODEL_PARSERS);
      if (input.reasoningParser) input.reasoningStartsInPrompt = promptOpensReasoning(tokenIds, (tokenId) => codec.tokenText(tokenId));
    }
    if (input.structured) request.structured = input.structured;

    const selector = this.config.selector;
    let firstInstance: InstanceId;
    let firstOnFallback = false;
    let pinned = false;
    if (directHeader !== undefined) {
      const wanted = parseInstanceId(directHeader);
      if (wanted === undefined) throw badRequest(`header ${DIRECT_ROUTE_HEADER} must be a hex instance id`, DIRECT_ROUTE_HEADER);
      if (!model.candidates().includes(wanted)) {
        throw new ApiError('instance_not_found', `instance ${wanted} does not serve model '${model.name}'`, DIRECT_ROUTE_HEADER);
      }
      firstInstance = wanted;
      pinned = true;
    } else if (selector.mode === 'direct') {
      throw badRequest(`router mode 'direct' needs the ${DIRECT_ROUTE_HEADER} header`, DIRECT_ROUTE_HEADER);
    } else {
      const health = this.config.health;
      const fallback = this.config.disagg?.fallback;
      const target = await chooseTarget(
        { model, selector, route: { model: model.name, request }, ...(health ? { health } : {}), ...(fallback ? { fallback } : {}), waitMs: this.config.migrationWaitMs ?? 0, strict: false },
        signal,
      );
      firstInstance = target.instanceId;
      firstOnFallback = target.fallback;
    }
    // On the fallback pool the request runs whole on that worker: there is no decode worker to hand off to.
    const disagg = this.config.disagg && !firstOnFallback ? await this.config.disagg.plan(model, request, firstInstance, selector, pinned) : undefined;
    if (disagg) firstInstance = disagg.route.decodeInstance;
    return {
      id,
      created: Math.floor(Date.now() / 1000),
      input,
      model,
      codec,
      request,
      firstInstance,
      ...(firstOnFallback ? { firstOnFallback } : {}),
      pinned,
      migrations: 0,
      startedAt,
      ...(disagg ? { disagg } : {}),
    };
  }

  /**
   * The one preprocessing call: the codec renders and encodes (large prompts off the event
   * loop) and may refuse early, by a byte bound, a prompt that cannot fit `maxPromptTokens`.
   */
  private async tokenize(input: GenerationRequest, codec: ModelCodec, maxPromptTokens: number, signal: AbortSignal | undefined): Promise<number[]> {
    if (input.sampling.logitBias && codec.vocabSize !== undefined) {
      for (const [id] of input.sampling.logitBias) {
        if (id >= codec.vocabSize) throw badRequest(`'logit_bias' token id ${id} is outside the vocabulary (size ${codec.vocabSize})`, 'logit_bias');
      }
    }
    if (input.kind === 'completion' && typeof input.prompt !== 'string') {
      const vocab = codec.vocabSize;
      if (vocab !== undefined) {
        for (const id of input.prompt) {
          if (id >= vocab) throw badRequest(`token id ${id} is outside the vocabulary (size ${vocab})`, 'prompt');
        }
      }
      return input.prompt;
    }
    const prompt = promptInput(input);
    let result: TokenizedPrompt;
    try {
      result = await codec.tokenize(prompt, { maxPromptTokens, ...(signal ? { signal } : {}) });
    } catch (err) {
      if (input.kind === 'chat' && isTemplateError(err)) throw badRequest(`could not apply the chat template: ${(err as Error).message}`, 'messages');
      throw err;
    }
    if (result.type === 'too_long') throw contextLengthExceeded(input, maxPromptTokens + Math.max(1, input.maxTokens ?? 1), result.minTokens, true);
    // Past the budget check the prompt fits the context, so this copy is bounded by it.
    return Array.isArray(result.ids) ? (result.ids as number[]) : Array.from(result.ids);
  }

  /**
   * Count a prompt without generating (`/tokenize`, Messages' `count_tokens`): the same codec
   * call and chat template as `prepare`, no context bound, no routing.
   */
  async tokenizeOnly(modelName: string, prompt: PromptInput, signal?: AbortSignal): Promise<{ tokenIds: number[]; contextLength: number; codec: ModelCodec }> {
    const model = this.model(modelName);
    const card = model.primaryCard();
    if (!card) throw modelNotFound(modelName);
    const codec = await this.config.codecs.get(card);
    let result: TokenizedPrompt;
    try {
      result = await codec.tokenize(prompt, { maxPromptTokens: Number.MAX_SAFE_INTEGER, ...(signal ? { signal } : {}) });
    } catch (err) {
      if (prompt.kind === 'chat' && isTemplateError(err)) throw badRequest(`could not apply the chat template: ${(err as Error).message}`, 'messages');
      throw err;
    }
    if (result.type === 'too_long') throw new ApiError('context_length_exceeded', `the prompt has at least ${result.minTokens} tokens`);
    return { tokenIds: Array.from(result.ids), contextLength: model.contextLength(), codec };
  }

  /** The one served model when `model` is absent and exactly one is served (vLLM's `/tokenize` default). */
  defaultModel(): string | undefined {
    const names = this.config.models.names();
    return names.length === 1 ? names[0] : undefined;
  }

  /** Stream text events. Aborting `signal` cancels the worker stream. */
  async *run(prepared: PreparedGeneration, signal: AbortSignal, metrics?: ModelMetrics): AsyncGenerator<GenerationEvent> {
    const { input, request } = prepared;
    const maxTokens = request.stop.maxTokens;
    const minTokens = request.stop.minTokens ?? 0;
    // With ignore_eos the list holds only the request's own stop_token_ids (see prepare).
    const stopIds = new Set(request.stop.stopTokenIds);
    const detokenizer = prepared.codec.createDetokenizer({ stop: input.stop, promptTokenIds: request.tokenIds });
    const fallback = this.config.disagg?.fallback;
    const plan = {
      model: prepared.model,
      selector: this.config.selector,
      request,
      firstInstance: prepared.firstInstance,
      ...(prepared.firstOnFallback ? { firstOnFallback: true } : {}),
      pinned: prepared.pinned,
      migrationLimit: this.config.migrationLimit,
      waitMs: this.config.migrationWaitMs ?? 0,
      ...(fallback ? { fallback } : {}),
      ...(this.config.health ? { health: this.config.health } : {}),
      onMigrate: (from: InstanceId, generated: number, cause: unknown) => {
        prepared.migrations += 1;
        this.config.onMigrate?.(prepared.model.name, from, generated, cause);
      },
    } satisfies MigrationPlan;
    const deltas = prepared.disagg && this.config.disagg ? this.config.disagg.stream(prepared.disagg, plan, signal) : streamWithMigration(plan, signal);
    let completionTokens = 0;
    let cachedTokens = 0;
    let lastTokenAt = 0;
    for await (const delta of deltas) {
      if (delta.usage) cachedTokens = delta.usage.cachedTokens;
      const ids = delta.tokenIds;
      let finish: OpenAiFinishReason | undefined;
      let textEnd = ids.length;
      let used = ids.length;
      for (let i = 0; i < ids.length; i++) {
        completionTokens += 1;
        if (stopIds.has(ids[i]!) && completionTokens > minTokens) {
          // The stop token counts as generated but is never printed.
          textEnd = i;
          used = i + 1;
          finish = 'stop';
          break;
        }
        if (completionTokens >= maxTokens) {
          textEnd = used = i + 1;
          finish = 'length';
          break;
        }
      }
      if (used > 0 && metrics) {
        const now = performance.now();
        if (lastTokenAt === 0) metrics.ttft.observe((now - prepared.startedAt) / 1000);
        else metrics.itl.observeMany((now - lastTokenAt) / 1000 / used, used);
        lastTokenAt = now;
      }
      const step = detokenizer.push(textEnd === ids.length ? ids : ids.slice(0, textEnd));
      let text = step.text;
      const stopString = step.stopped ? step.stopString : undefined;
      if (step.stopped) finish = 'stop';
      else if (finish === undefined && delta.finishReason !== undefined) finish = delta.finishReason === 'length' ? 'length' : 'stop';
      if (finish !== undefined && !step.stopped) text += detokenizer.flush();
      const logprobs = delta.logprobs && used < delta.logprobs.length ? delta.logprobs.slice(0, used) : delta.logprobs;
      if (text.length > 0 || (logprobs !== undefined && logprobs.length > 0)) {
        yield { type: 'delta', text, tokenIds: used === ids.length ? ids : ids.slice(0, used), logprobs };
      }
      if (finish !== undefined) {
        const usage: Usage = { promptTokens: request.tokenIds.length, completionTokens, cachedTokens: Math.min(cachedTokens, request.tokenIds.length) };
        if (metrics) {
          metrics.isl.observe(usage.promptTokens);
          metrics.osl.observe(completionTokens);
          metrics.kvHitRate.observe(usage.promptTokens > 0 ? usage.cachedTokens / usage.promptTokens : 0);
        }
        yield { type: 'finish', finishReason: finish, usage, ...(stopString !== undefined ? { stopString } : {}) };
        return;
      }
    }
    if (!signal.aborted) throw new ApiError('internal', 'worker stream ended without a finish reason');
  }
}

/** What the codec renders and encodes for a request: its chat messages (with tools) or its prompt text. */
export function promptInput(input: GenerationRequest): PromptInput {
  if (input.kind === 'completion') return { kind: 'text', text: input.prompt as string, addSpecialTokens: true };
  return {
    kind: 'chat',
    messages: input.messages,
    options: {
      addGenerationPrompt: input.addGenerationPrompt,
      ...(input.tools ? { tools: input.tools } : {}),
      ...(input.templateKwargs ? { extra: input.templateKwargs } : {}),
    },
  };
}
