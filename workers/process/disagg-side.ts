/**
 * The disaggregated half of a prefill or decode worker, built in the worker's phases
 * (worker-process.ts) around the engine loop:
 *
 *   decode  (before the loop, which imports through it)  startDecodeSide:
 *           KvImportService | DeviceKvImporter (+ KvPrefetcher or, on a device pool,
 *           DeviceKvPrefetcher into the pool's reserved staging blocks, with layer streaming), the
 *           prefill component's `kv_release` and `kv_stage` clients, peers unmapped as they leave
 *   prefill (after the loop, whose pinned sequences it frees)  startPrefillSide:
 *           PinnedBlocks (release timeout) and the PrefillHandler that pins each hand-off
 *
 * Each side owns its transfer metrics (DisaggMetrics, fed by the agent's counters) and closes
 * the transfer agent last.
 */
import type { KvReleaseRequest, KvReleaseResponse, KvStageRequest, KvStageResponse, KvTransferParams } from '../../proto/wire.js';
import { KV_RELEASE_ENDPOINT, KV_STAGE_ENDPOINT } from '../../proto/wire.js';
import type { DistributedRuntime, EndpointClient } from '../../runtime/index.js';
import type { Logger } from '../../runtime/index.js';
import type { EngineLoop, KvImportJob } from '../engine-loop/index.js';
import {
  DEFAULT_KV_RELEASE_TIMEOUT_MS,
  DEFAULT_PULL_TIMEOUT_MS,
  DeviceKvImporter,
  isDeviceKvSetup,
  KvImportService,
  kvCardFields,
  PinnedBlocks,
  PrefillHandler,
  type KvTransferSetup,
} from '../disagg/index.js';
import type { LayerPublisher } from '../disagg/layer-publisher.js';
import type { LayerProgressRegion } from '../disagg/layer-progress-region.js';
import { KvPrefetcher } from '../disagg/kv-prefetch.js';
import type { NativeEngine } from '../engines/native/index.js';
import { DeviceKvPrefetcher } from '../disagg/device-kv-prefetch.js';
import type { LayerStreamResult } from '../disagg/layer-ready.js';
import type { LayerPrefetcher } from '../disagg/prefetch-table.js';
import { TRANSFER_SECONDS_BUCKETS } from '../kv-transfer/index.js';
import { DisaggMetrics, type DisaggGaugeSources } from './worker-metrics.js';
import { COMPONENT_FOR_ROLE, type WorkerOptions } from './worker-options.js';

/** What a side needs of the worker. */
export interface DisaggContext {
  runtime: DistributedRuntime;
  options: WorkerOptions;
  kv: KvTransferSetup;
  modelName: string;
  log: Logger;
}

export interface DecodeSide {
  importer: KvImportService;
  prefetcher?: LayerPrefetcher;
  close(): void;
}

export interface PrefillSide {
  pinned: PinnedBlocks;
  handler: PrefillHandler;
  close(): void;
}

/**
 * The decode worker's importer, built before the loop that runs its imports. `stagingBlocks`:
 * the tail of a device pool kept out of the scheduler for layer-wise prefetches (0: none).
 */
export async function startDecodeSide(ctx: DisaggContext & { stagingBlocks?: number }): Promise<DecodeSide> {
  const { runtime, options, kv, log } = ctx;
  const stagingBlocks = ctx.stagingBlocks ?? 0;
  let devicePrefetcher: DeviceKvPrefetcher | undefined;
  const metrics = startDisaggMetrics(ctx, { stagingBlocks: () => devicePrefetcher?.stagingBlocksInUse ?? 0 });
  const dm = metrics.dm;
  const prefillComponent = runtime.namespace(options.namespace).component(COMPONENT_FOR_ROLE.prefill);
  const releaseClient = await prefillComponent.endpoint(KV_RELEASE_ENDPOINT).client();
  const stageClient = await prefillComponent.endpoint(KV_STAGE_ENDPOINT).client();
  const stamps = kv.stamps;
  const device = isDeviceKvSetup(kv) ? kv : undefined;
  const pullTimeoutMs = options.kvPullTimeoutMs ?? DEFAULT_PULL_TIMEOUT_MS;
  const onStreamed = (source: KvTransferParams, { copies, readyAtIssue, report }: LayerStreamResult): void => {
    dm.streamed(report.hiddenFraction);
    log.info(
      { transferId: source.transferId, numLayers: source.kvLayerProgress?.numLayers, copies: copies.length, layersReadyAtFirstCopy: readyAtIssue[0], readyAtIssue, copyMs: report.copyMs, hiddenMs: report.hiddenMs, exposedMs: report.exposedMs, hiddenFraction: report.hiddenFraction },
      'KV streamed layer by layer',
    );
  };
  const onFailed = (source: KvTransferParams, err: unknown, open: number): void =>
    log.info({ transferId: source.transferId, err, open }, 'KV layer stream failed: the decode request pulls or recomputes');
  const hostPrefetcher =
    options.kvLayerStreaming === true && device === undefined ? new KvPrefetcher({ agent: kv.agent, pool: kv.pool, expireMs: pullTimeoutMs, pullTimeoutMs, onStreamed, onFailed }) : undefined;
  const importer = new (device !== undefined ? DeviceKvImporter : KvImportService)({
    ...(device !== undefined ? { engine: device.engine } : {}),
    agent: kv.agent,
    pool: kv.pool,
    pullTimeoutMs,
    release: (source) => callRelease(releaseClient, source),
    stage: (source) => callStage(stageClient, source, pullTimeoutMs),
    ...(stamps !== undefined
      ? { verify: (job: KvImportJob) => stamps.firstMismatch(job.localBlockIds, job.tokenIds, job.firstBlock * stamps.blockSize, job.numTokens, job.firstBlock) }
      : {}),
    ...(kv.layout !== undefined ? { layout: kv.layout } : {}),
    // e4m3 pools convert with the model's KV scales (a hand-off between pools of other dtypes).
    ...((kv.engine as Partial<NativeEngine>).model?.kvScales !== undefined ? { kvScales: (kv.engine as NativeEngine).model.kvScales } : {}),
    placement: kv.placement,
    ...(hostPrefetcher !== undefined ? { prefetcher: hostPrefetcher } : {}),
    onOutcome: (job, outcome) => {
      if (outcome.blocks > 0 || !outcome.ok) dm.imported(outcome);
      if (outcome.streamed === true) log.info({ requestId: job.requestId, transferId: job.source.transferId, blocks: outcome.blocks, waitMs: outcome.seconds * 1000 }, 'KV adopted from the layer stream');
      if (outcome.ok) return;
      dm.fallback();
      log.warn({ requestId: job.requestId, err: outcome.error }, 'KV import failed: computing the prompt here');
    },
    onReleaseError: (source, err) => log.debug({ transferId: source.transferId, err }, 'kv_release call failed (the prefill worker frees by timeout)'),
  });
  if (importer instanceof DeviceKvImporter && stagingBlocks > 0 && kv.layout !== undefined) {
    // Same-node device hand-offs stream over the IPC mapping into the pool's reserved tail.
    const total = device!.engine.info.numBlocks;
    devicePrefetcher = new DeviceKvPrefetcher({
      agent: kv.agent,
      engine: device!.engine,
      layout: kv.layout,
      staging: { first: total - stagingBlocks, count: stagingBlocks },
      peerFor: (source) => importer.peerFor(source),
      expireMs: pullTimeoutMs,
      pullTimeoutMs,
      onStreamed,
      onFailed,
    });
    importer.useDevicePrefetcher(devicePrefetcher);
  }
  const prefetcher: LayerPrefetcher | undefined = hostPrefetcher ?? devicePrefetcher;
  // A device importer maps each prefill pool once; unmap those whose worker left discovery.
  const unwatchPeers = importer instanceof DeviceKvImporter ? releaseClient.onChange((ids) => importer.retainPeers(ids)) : undefined;
  return {
    importer,
    ...(prefetcher !== undefined ? { prefetcher } : {}),
    close: () => {
      prefetcher?.close();
      metrics.close();
      unwatchPeers?.();
      if (importer instanceof DeviceKvImporter) importer.close();
      releaseClient.close();
      stageClient.close();
      kv.close();
    },
  };
}

export interface PrefillSideDeps extends DisaggContext {
  loop: EngineLoop;
  /** Layer-wise streaming: the publisher the loop's engine feeds and the region peers poll. */
  streaming?: { publisher: LayerPublisher; region: LayerProgressRegion };
}

/**
 * The prefill worker's hand-offs, built after the loop: pins free the loop's pinned sequences,
 * and each pin's end gives its progress slot back to the handler that made it.
 */
export function startPrefillSide(deps: PrefillSideDeps): PrefillSide {
  const { runtime, options, kv, log, loop } = deps;
  // The pins, their metrics and the handler refer to each other; none of these callbacks runs
  // before the handler pins its first hand-off, after this function has returned.
  const pinned = new PinnedBlocks({
    free: (seqId) => loop.releasePinned(seqId),
    releaseTimeoutMs: options.kvReleaseTimeoutMs ?? DEFAULT_KV_RELEASE_TIMEOUT_MS,
    onEnd: (e) => {
      handler.pinEnded(e.transferId);
      if (e.reason !== 'timeout') return;
      metrics.dm.releaseTimeout();
      log.warn({ transferId: e.transferId, blocks: e.numBlocks, heldMs: e.heldMs }, 'pinned KV blocks were never released: freed by timeout');
    },
  });
  const metrics = startDisaggMetrics(deps, { pins: () => ({ transfers: pinned.size, blocks: pinned.numBlocks }) });
  const handler = new PrefillHandler({
    loop,
    agent: kv.agent,
    pool: kv.pool,
    pinned,
    instanceId: runtime.instanceId,
    ...(kv.layout ? { layout: kv.layout } : {}),
    placement: kv.placement,
    ...deviceHandoff(kv),
    ...(deps.streaming !== undefined ? { streaming: deps.streaming } : {}),
  });
  return {
    pinned,
    handler,
    close: () => {
      metrics.close();
      kv.close();
    },
  };
}

/** The transfer metrics of either side, fed by the agent's counters until close. */
function startDisaggMetrics(ctx: DisaggContext, sources: DisaggGaugeSources = {}): { dm: DisaggMetrics; close(): void } {
  const { runtime, kv, modelName } = ctx;
  const dm = new DisaggMetrics(runtime.metrics, modelName, TRANSFER_SECONDS_BUCKETS, { inflight: () => kv.agent.counters.inflight, ...sources });
  const unsubscribe = kv.agent.counters.onTransfer((e) => dm.transfer(e));
  dm.describeTransport({ pool: kv.placement.pool, transports: kvCardFields(kv).kvTransports ?? [], layout: kv.pool.layout });
  return { dm, close: unsubscribe };
}

/** Direct call to the prefill instance's kv_release; waits briefly for discovery to list it. */
async function callRelease(client: EndpointClient, source: KvTransferParams): Promise<void> {
  const id = source.prefillInstanceId;
  for (let i = 0; i < 10 && client.instance(id) === undefined; i++) await new Promise((r) => setTimeout(r, 100));
  const stream = client.generate<KvReleaseRequest, KvReleaseResponse>(
    { transferId: source.transferId },
    { routing: { mode: 'direct', instanceId: id }, timeoutMs: 5_000 },
  );
  for await (const _ of stream) {
    // one answer; draining it completes the call
  }
}

/** Asks a device-pool prefill worker for the host copy of a hand-off; rejects unless it made it. */
async function callStage(client: EndpointClient, source: KvTransferParams, timeoutMs: number): Promise<void> {
  const id = source.prefillInstanceId;
  for (let i = 0; i < 10 && client.instance(id) === undefined; i++) await new Promise((r) => setTimeout(r, 100));
  let staged = false;
  for await (const r of client.generate<KvStageRequest, KvStageResponse>({ transferId: source.transferId }, { routing: { mode: 'direct', instanceId: id }, timeoutMs })) {
    staged ||= r.staged;
  }
  if (!staged) throw new Error(`prefill ${id} did not stage transfer ${source.transferId} (released or timed out)`);
}

/** A prefill worker on a device pool stages hand-offs into its host pool and names its export handle. */
function deviceHandoff(kv: KvTransferSetup): { stage?: (blockIds: number[]) => Promise<void>; deviceHandle?: string } {
  if (!isDeviceKvSetup(kv)) return {};
  return { ...(kv.stage !== undefined ? { stage: kv.stage } : {}), ...(kv.deviceHandle !== undefined ? { deviceHandle: kv.deviceHandle } : {}) };
}
