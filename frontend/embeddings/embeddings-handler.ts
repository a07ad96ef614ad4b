/**
 * POST /v1/embeddings, inside the exchange every worker-bound route shares (http/exchange.ts:
 * read, admit, errors, metrics with `endpoint="embeddings"`, cancel on disconnect): validate →
 * targets (404 unknown model, 400 when the model's workers are generation-only, 400 for a
 * `dimensions` it cannot honour) → tokenize → one `embed` call → truncate (Matryoshka) → float
 * or base64 JSON. The dashboard's request inspector records it (endpoint, input count, prompt
 * tokens, the worker).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { randomUUID } from 'node:crypto';
import { runExchange, type Exchange, type ExchangeContext } from '../http/exchange.js';
import { sendJson } from '../http/respond.js';
import { dimensionsError, embeddingsBody, truncateVectors } from './embedding-output.js';
import { parseEmbeddingsRequest } from './embeddings-request.js';
import { DIRECT_ROUTE_HEADER } from '../pipeline/generation.js';
import { badRequest } from '../errors.js';
import type { InstanceId } from '../../proto/wire.js';
import { parseInstanceId } from '../../runtime/index.js';
import type { EmbeddingsService } from './embeddings-service.js';
import type { DashboardState } from '../dashboard/index.js';

export interface EmbeddingsContext extends ExchangeContext {
  embeddings: EmbeddingsService;
  /** The dashboard's aggregator: told of each answered request once it ends. */
  dashboard?: DashboardState;
}

export async function handleEmbeddings(ctx: EmbeddingsContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  let served: Served | undefined;
  const dashboard = ctx.dashboard;
  const api = { endpoint: 'embeddings', ...(dashboard ? { onEnd: (x: Exchange) => recordOnDashboard(dashboard, served, x.errorCode) } : {}) };
  await runExchange(ctx, api, req, res, async (body, x) => {
    const request = parseEmbeddingsRequest(body);
    const targets = ctx.embeddings.targets(request.model);
    const inflight = x.forModel(ctx.metrics, request.model);
    const cap = targets.capability;
    if (request.dimensions !== undefined && request.dimensions !== cap.dimensions) {
      const refusal = dimensionsError(request.model, cap, request.dimensions);
      if (refusal) throw refusal;
    }
    const inputs = await ctx.embeddings.tokenize(request, targets.contextLength, x.signal);
    const requestId = randomUUID();
    const header = req.headers[DIRECT_ROUTE_HEADER];
    const pinned = pinnedInstance(Array.isArray(header) ? header[0] : header);
    const routedAt = Date.now();
    // A client that goes away aborts x.signal: the worker call is cancelled, and the worker
    // drops the inputs it has not computed (workers/embedding/embed-batcher.ts).
    const result = await ctx.embeddings.embed(request.model, requestId, inputs, x.signal, pinned);
    served = { requestId, model: request.model, instanceId: result.instanceId, inputs: inputs.length, promptTokens: result.promptTokens, arrivedAt: routedAt - (performance.now() - x.startedAt), routedAt };
    inflight.isl.observe(result.promptTokens);
    const dim = request.dimensions ?? result.dimensions;
    const vectors = truncateVectors(result.vectors, result.dimensions, dim, cap.normalize);
    if (x.signal.aborted) return; // the client left: a 499
    sendJson(res, 200, embeddingsBody(request.model, vectors, dim, request.encodingFormat, result.promptTokens), { 'x-request-id': requestId, [DIRECT_ROUTE_HEADER]: result.instanceId });
  });
}

/** What the inspector learns of an embeddings request a worker answered. */
interface Served {
  requestId: string;
  model: string;
  instanceId: InstanceId;
  inputs: number;
  promptTokens: number;
  /** Arrival and the moment the embed call went out, ms since epoch. */
  arrivedAt: number;
  routedAt: number;
}

/**
 * One embed call is the whole request, so it is recorded once it is over: started at the time
 * the call went out (queue = read, admit, tokenize), ended now. No first token: TTFT stays null.
 */
function recordOnDashboard(dashboard: DashboardState, served: Served | undefined, errorCode: string | undefined): void {
  if (served === undefined) {
    if (errorCode !== undefined) dashboard.rejected(errorCode);
    return;
  }
  dashboard.requestStarted({ requestId: served.requestId, model: served.model, endpoint: 'embeddings', arrivedAt: served.arrivedAt, instanceId: served.instanceId, inputs: served.inputs }, served.routedAt);
  dashboard.requestEnded(served.requestId, { finishReason: null, ...(errorCode !== undefined ? { error: errorCode } : {}), promptTokens: served.promptTokens, completionTokens: 0, cachedTokens: 0 }, Date.now());
}

/** The `x-worker-instance-id` header, parsed as the generation routes parse it, or a 400 naming it. */
function pinnedInstance(header: string | undefined): InstanceId | undefined {
  if (header === undefined) return undefined;
  const id = parseInstanceId(header);
  if (id === undefined) throw badRequest(`header ${DIRECT_ROUTE_HEADER} must be a hex instance id`, DIRECT_ROUTE_HEADER);
  return id;
}
