/**
 * The worker's request-plane endpoints (phase 6 of startWorker), from the loop and the
 * disaggregated side it was built with:
 *
 *   generate     PrefillHandler │ DecodeHandler │ loop.generate, checked at the edge (prompt
 *                present, prompt + max_tokens within the context length), stamped with the instance
 *   kv_events    replay of an event range, or a dump of the block set (router recovery)
 *   kv_release   prefill: a decode worker is done with a hand-off's blocks
 *   kv_stage     prefill on a device pool: copy a hand-off to host memory for a staged pull
 *   kv_prefetch  decode with layer streaming: start pulling an announced hand-off
 */
import type {
  KvDumpResponse,
  KvPrefetchRequest,
  KvPrefetchResponse,
  KvRecoveryRequest,
  KvReleaseRequest,
  KvReleaseResponse,
  KvReplayResponse,
  KvStageRequest,
  KvStageResponse,
  PreprocessedRequest,
  TokenDelta,
  WorkerRole,
} from '../../proto/wire.js';
import { GENERATE_ENDPOINT, KV_EVENTS_ENDPOINT, KV_PREFETCH_ENDPOINT, KV_RELEASE_ENDPOINT, KV_STAGE_ENDPOINT } from '../../proto/wire.js';
import { TandemError } from '../../runtime/errors.js';
import type { Component, RequestContext, ServedEndpoint } from '../../runtime/index.js';
import type { Logger } from '../../runtime/index.js';
import type { EngineLoop } from '../engine-loop/index.js';
import { DecodeHandler, type KvImportService, type PrefillHandler } from '../disagg/index.js';
import type { LayerPrefetcher } from '../disagg/prefetch-table.js';
import type { WorkerMetrics } from './worker-metrics.js';

export interface WorkerEndpointDeps {
  component: Component;
  loop: EngineLoop;
  metrics: WorkerMetrics;
  modelName: string;
  role: WorkerRole;
  instanceId: string;
  contextLength: number;
  log: Logger;
  /** prefill: the handler; `stage` when the pool is on a device (kv_stage). */
  prefill?: { handler: PrefillHandler; stage: boolean };
  decode?: { importer: KvImportService; prefetcher?: LayerPrefetcher };
}

export interface WorkerEndpoints {
  /** The generate endpoint's address (the worker's log line). */
  address: string;
  /** Stops serving (kv_events stays until the process exits, as the router's recovery may still ask). */
  stop(): Promise<void>;
}

export async function serveWorkerEndpoints(deps: WorkerEndpointDeps): Promise<WorkerEndpoints> {
  const { component, loop, metrics, modelName, instanceId, contextLength, log } = deps;
  const prefillHandler = deps.prefill?.handler;
  const decodeHandler = deps.decode !== undefined ? new DecodeHandler({ loop, importer: deps.decode.importer, instanceId }) : undefined;
  const run = (request: PreprocessedRequest, ctx: RequestContext): AsyncIterable<TokenDelta> =>
    prefillHandler?.generate(request, ctx) ?? decodeHandler?.generate(request, ctx) ?? loop.generate(request, ctx.signal);

  async function* generate(request: PreprocessedRequest, ctx: RequestContext): AsyncGenerator<TokenDelta> {
    if (!Array.isArray(request?.tokenIds) || request.tokenIds.length === 0) throw new TandemError('invalid_argument', 'request has no prompt tokens');
    if (request.tokenIds.length + (request.stop?.maxTokens ?? 0) > contextLength) {
      throw new TandemError('invalid_argument', `prompt (${request.tokenIds.length} tokens) plus max_tokens (${request.stop?.maxTokens}) exceeds the context length ${contextLength}`);
    }
    metrics.requests.inc({ model_name: modelName });
    for await (const delta of run(request, ctx)) {
      metrics.generatedTokens.inc({ model_name: modelName }, delta.tokenIds.length);
      yield { ...delta, instanceId };
    }
    metrics.update(loop.stats());
  }

  // Router recovery: answers a replay of an event range or a dump of the whole block set, in
  // the shapes of proto/kv-recovery.ts.
  async function* kvEvents(request: KvRecoveryRequest): AsyncGenerator<KvReplayResponse | KvDumpResponse> {
    if (request.type === 'dump') {
      yield { workerId: instanceId, ...loop.kvEventLog.dump() };
      return;
    }
    const replay = loop.kvEventLog.replay(request.fromEventId, request.toEventId);
    yield replay.type === 'events'
      ? { type: 'events', workerId: instanceId, events: replay.events }
      : { type: 'too_old', workerId: instanceId, oldestEventId: replay.oldestEventId };
  }

  const served = await component.endpoint(GENERATE_ENDPOINT).serve(generate, { metadata: { model: modelName, role: deps.role } });
  await component.endpoint(KV_EVENTS_ENDPOINT).serve(kvEvents);
  const extra: ServedEndpoint[] = [];
  if (prefillHandler !== undefined) {
    extra.push(await component.endpoint(KV_RELEASE_ENDPOINT).serve<KvReleaseRequest, KvReleaseResponse>((req) => prefillHandler.release(req)));
  }
  // A device-pool prefill copies a hand-off to host memory only when a decode worker asks.
  if (prefillHandler !== undefined && deps.prefill?.stage === true) {
    extra.push(await component.endpoint(KV_STAGE_ENDPOINT).serve<KvStageRequest, KvStageResponse>((req) => prefillHandler.stageBlocks(req)));
  }
  const prefetcher = deps.decode?.prefetcher;
  if (prefetcher !== undefined) {
    extra.push(
      await component.endpoint(KV_PREFETCH_ENDPOINT).serve<KvPrefetchRequest, KvPrefetchResponse>(async function* (req) {
        const started = req?.kvTransfer !== undefined && prefetcher.start(req.kvTransfer);
        if (started) log.info({ transferId: req.kvTransfer.transferId, blocks: req.kvTransfer.blockIds.length }, 'KV layer prefetch started');
        yield { started };
      }),
    );
  }
  return {
    address: served.record.address,
    stop: async () => {
      await served.stop().catch(() => undefined);
      for (const s of extra) await s.stop().catch(() => undefined);
    },
  };
}
