/**
 * Embeddings through the fleet: which workers of a model can embed (cards with `task: 'embed'`
 * from the process's one card feed, clients from its one client cache), tokenizing string
 * inputs with the model's codec, and one `embed` call per request to one capable instance
 * (round-robin over those up), retried on another when a worker is unavailable.
 */
import type { EmbeddingCapability, EmbedRequest, EmbedResponse, InstanceId } from '../../proto/wire.js';
import type { ModelCardFeed } from '../../runtime/index.js';
import { TandemError } from '../../runtime/errors.js';
import type { CodecCache } from '../codec.js';
import { ApiError, badRequest, modelNotFound, quoteInput, toApiError } from '../errors.js';
import type { WorkerHealth } from '../worker-health.js';
import type { WorkerClients } from '../worker-clients.js';
import type { EmbeddingsRequest } from './embeddings-request.js';
import { DIRECT_ROUTE_HEADER } from '../pipeline/generation.js';

/** Distinct instances one request may try before giving up. */
const MAX_ATTEMPTS = 3;

export interface EmbeddingTargets {
  capability: EmbeddingCapability;
  /** Smallest context length of the model's embedding cards. */
  contextLength: number;
  instances: InstanceId[];
}

export interface EmbeddingResult {
  vectors: Float32Array;
  dimensions: number;
  promptTokens: number;
  instanceId: InstanceId;
}

export class EmbeddingsService {
  private cursor = 0;

  constructor(
    private readonly cards: ModelCardFeed,
    private readonly clients: WorkerClients,
    private readonly codecs: CodecCache,
    private readonly health?: WorkerHealth,
    /** A known model whose workers are all gone, within its grace period (ModelWatcher.isIdle): 503, not 404. */
    private readonly isIdle: (model: string) => boolean = () => false,
  ) {}

  /** The model's embedding workers; 404 for an unknown model, 400 naming it when none of its workers embeds. */
  targets(model: string): EmbeddingTargets {
    const all = this.cards.cards({ model });
    if (all.length === 0) {
      if (this.isIdle(model)) throw new ApiError('no_instances', `no worker is up to serve '${quoteInput(model)}'; retry later`, 'model');
      throw modelNotFound(model);
    }
    const embed = all.filter((c) => c.card.task === 'embed' && c.card.embedding !== undefined);
    if (embed.length === 0) {
      throw badRequest(`the model '${quoteInput(model)}' does not serve embeddings: its workers are generation-only (start workers with --task embed)`, 'model');
    }
    const live = new Set<InstanceId>();
    let contextLength = Infinity;
    for (const { card, instanceId } of embed) {
      contextLength = Math.min(contextLength, card.contextLength);
      const client = this.clients.get(card.component, card.endpoint);
      if (client?.instanceIds().includes(instanceId)) live.add(instanceId);
    }
    const now = Date.now();
    const instances = this.health ? this.health.filter([...live].sort(), now) : [...live].sort();
    return { capability: embed[0]!.card.embedding!, contextLength, instances };
  }

  /** Live embedding instances of a model (0 when it has none); /health counts them. */
  instanceCount(model: string): number {
    try {
      return this.targets(model).instances.length;
    } catch {
      return 0;
    }
  }

  /** Token ids of every input, with the same special tokens as a /v1/completions string prompt. */
  async tokenize(request: EmbeddingsRequest, contextLength: number, signal: AbortSignal): Promise<number[][]> {
    if (request.inputs.kind === 'tokens') {
      request.inputs.tokens.forEach((t, i) => {
        if (t.length > contextLength) throw contextError(i, t.length, contextLength);
      });
      return request.inputs.tokens;
    }
    const card = this.cards.cards({ model: request.model }).find((c) => c.card.task === 'embed')?.card;
    if (card === undefined) throw new TandemError('no_instances', `no worker serves embeddings for '${quoteInput(request.model)}'`);
    const codec = await this.codecs.get(card);
    const out: number[][] = [];
    for (const [i, text] of request.inputs.texts.entries()) {
      const t = await codec.tokenize({ kind: 'text', text, addSpecialTokens: true }, { maxPromptTokens: contextLength, signal });
      if (t.type === 'too_long') throw contextError(i, t.minTokens, contextLength, true);
      if (t.ids.length > contextLength) throw contextError(i, t.ids.length, contextLength);
      out.push(Array.from(t.ids));
    }
    return out;
  }

  /**
   * One `embed` call, moved to another instance when one is unavailable; `pinned` (the
   * `x-worker-instance-id` header) sends it to that instance only (404 when it does not embed
   * this model).
   */
  async embed(model: string, requestId: string, inputs: number[][], signal: AbortSignal, pinned?: InstanceId): Promise<EmbeddingResult> {
    const tried = new Set<InstanceId>();
    let last: unknown;
    if (pinned !== undefined && !this.targets(model).instances.includes(pinned)) {
      throw new ApiError('instance_not_found', `instance ${pinned} does not serve embeddings for '${quoteInput(model)}'`, DIRECT_ROUTE_HEADER);
    }
    for (let attempt = 0; attempt < (pinned !== undefined ? 1 : MAX_ATTEMPTS); attempt++) {
      const { instances } = this.targets(model);
      const choices = pinned !== undefined ? [pinned] : instances.filter((id) => !tried.has(id));
      if (choices.length === 0) break;
      const instanceId = choices[this.cursor++ % choices.length]!;
      tried.add(instanceId);
      const card = this.cards.card(model, instanceId);
      const client = card ? this.clients.get(card.component, card.endpoint) : undefined;
      if (client === undefined) continue;
      try {
        const request: EmbedRequest = { requestId, inputs };
        for await (const answer of client.call<EmbedRequest, EmbedResponse>(request, instanceId, signal)) {
          // Copied: a msgpack bin may not be 4-byte aligned.
          const vectors = new Float32Array(Uint8Array.from(answer.vectors).buffer);
          if (vectors.length !== inputs.length * answer.dimensions) throw new TandemError('internal', `worker answered ${vectors.length} values for ${inputs.length} × ${answer.dimensions}`);
          return { vectors, dimensions: answer.dimensions, promptTokens: inputs.reduce((n, t) => n + t.length, 0), instanceId };
        }
        throw new TandemError('internal', 'worker ended the embed call without an answer');
      } catch (err) {
        const code = toApiError(err).code;
        if (code !== 'unavailable' || signal.aborted) throw err;
        this.health?.markFailed(instanceId, err, Date.now());
        last = err;
      }
    }
    if (last !== undefined) throw last;
    throw new ApiError('no_instances', `no worker is up to serve embeddings for '${quoteInput(model)}'; retry later`, 'model');
  }
}

function contextError(index: number, tokens: number, contextLength: number, atLeast = false): ApiError {
  return new ApiError(
    'context_length_exceeded',
    `input[${index}] has ${atLeast ? 'at least ' : ''}${tokens} tokens, more than the model's maximum context length of ${contextLength} tokens`,
    'input',
  );
}
