/**
 * POST /v1/embeddings: read → admit → validate → targets (404 unknown model, 400 when the
 * model's workers are generation-only, 400 for a `dimensions` it cannot honour) → tokenize →
 * one `embed` call → truncate (Matryoshka) → float or base64 JSON. The same admission gate,
 * error shapes and request metrics (`endpoint="embeddings"`) as the generation routes, and the
 * dashboard's request inspector records it (endpoint, input count, prompt tokens, the worker).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { DRAIN_CUT, type AdmissionGate } from '../admission.js';
import { ApiError, toApiError } from '../errors.js';
import type { FrontendMetrics } from '../metrics.js';
import { admitOrThrow } from '../http/admit.js';
import { readJsonBody } from '../http/body.js';
import { sendError, sendJson } from '../http/respond.js';
import { dimensionsError, embeddingsBody, truncateVectors } from './embedding-output.js';
import { parseEmbeddingsRequest } from './embeddings-request.js';
import { DIRECT_ROUTE_HEADER } from '../pipeline/generation.js';
import { badRequest } from '../errors.js';
import type { InstanceId } from '../../proto/wire.js';
import { parseInstanceId } from '../../runtime/index.js';
import type { EmbeddingsService } from './embeddings-service.js';
import type { DashboardState } from '../dashboard/index.js';

export interface EmbeddingsContext {
  embeddings: EmbeddingsService;
  gate: AdmissionGate;
  metrics: FrontendMetrics;
  maxBodyBytes: number;
  retryAfterSeconds: number;
  log: Logger;
  /** The dashboard's aggregator: told of each answered request once it ends. */
  dashboard?: DashboardState;
}

const UNKNOWN_MODEL_LABEL = '_unknown';

export async function handleEmbeddings(ctx: EmbeddingsContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const startedAt = performance.now();
  const controller = new AbortController();
  const onClose = () => {
    if (!res.writableFinished) controller.abort();
  };
  res.on('close', onClose);
  let modelLabel = UNKNOWN_MODEL_LABEL;
  let status = 200;
  let admitted = false;
  let inflight: ReturnType<FrontendMetrics['forModel']> | undefined;
  let errorCode: string | undefined;
  let served: Served | undefined;
  try {
    const body = await readJsonBody(req, ctx.maxBodyBytes);
    admitOrThrow(ctx.gate, ctx.metrics, res, controller);
    admitted = true;
    const request = parseEmbeddingsRequest(body);
    const targets = ctx.embeddings.targets(request.model);
    modelLabel = request.model;
    inflight = ctx.metrics.forModel(request.model);
    inflight.inflight.inc();
    const cap = targets.capability;
    if (request.dimensions !== undefined && request.dimensions !== cap.dimensions) {
      const refusal = dimensionsError(request.model, cap, request.dimensions);
      if (refusal) throw refusal;
    }
    const inputs = await ctx.embeddings.tokenize(request, targets.contextLength, controller.signal);
    const requestId = randomUUID();
    const header = req.headers[DIRECT_ROUTE_HEADER];
    const pinned = pinnedInstance(Array.isArray(header) ? header[0] : header);
    const routedAt = Date.now();
    const result = await ctx.embeddings.embed(request.model, requestId, inputs, controller.signal, pinned);
    served = { requestId, model: request.model, instanceId: result.instanceId, inputs: inputs.length, promptTokens: result.promptTokens, arrivedAt: routedAt - (performance.now() - startedAt), routedAt };
    inflight.isl.observe(result.promptTokens);
    const dim = request.dimensions ?? result.dimensions;
    const vectors = truncateVectors(result.vectors, result.dimensions, dim, cap.normalize);
    if (res.destroyed) {
      status = 499;
      errorCode = 'cancelled';
      return;
    }
    sendJson(res, 200, embeddingsBody(request.model, vectors, dim, request.encodingFormat, result.promptTokens), { 'x-request-id': requestId, [DIRECT_ROUTE_HEADER]: result.instanceId });
  } catch (err) {
    const drainCut = controller.signal.reason === DRAIN_CUT;
    const apiError = drainCut ? new ApiError('unavailable', 'the frontend shut down before this request finished (drain timeout expired); retry it') : toApiError(err);
    status = controller.signal.aborted && !drainCut ? 499 : apiError.status;
    errorCode = status === 499 ? 'cancelled' : apiError.code;
    if (status >= 500 && status !== 503) ctx.log.error({ err, cause: apiError.cause }, 'embeddings request failed');
    else ctx.log.debug({ code: apiError.code, message: apiError.message }, 'embeddings request rejected');
    if (!res.headersSent) sendError(res, apiError, ctx.retryAfterSeconds);
  } finally {
    res.off('close', onClose);
    ctx.gate.offCut(controller);
    if (!controller.signal.aborted) controller.abort();
    if (admitted) ctx.gate.release();
    if (inflight) {
      inflight.inflight.dec();
      inflight.duration.observe((performance.now() - startedAt) / 1000);
    }
    ctx.metrics.requests.inc({ model: modelLabel, endpoint: 'embeddings', status: String(status) });
    if (ctx.dashboard) {
      try {
        recordOnDashboard(ctx.dashboard, served, errorCode);
      } catch (err) {
        ctx.log.debug({ err }, 'dashboard: could not record the request'); // never the request's problem
      }
    }
  }
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
