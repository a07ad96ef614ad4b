/**
 * The request pipeline's one entry point into disaggregation: `plan` in prepare (decide, pick
 * workers, count the path, or refuse with 503) and `stream` in run (the prefill → decode delta
 * stream with its trace). Keeps the pipeline's own edits to a couple of lines.
 */
import type { Logger } from 'pino';
import type { InstanceId, PreprocessedRequest, TokenDelta } from '../../proto/wire.js';
import type { ServedModel } from '../model-watcher.js';
import type { FallbackPool } from '../pipeline/attempt-target.js';
import type { WorkerSelector } from '../routing.js';
import type { WorkerHealth } from '../worker-health.js';
import { streamDisaggregated, type DisaggTrace } from './disagg-stream.js';
import type { DisaggMetrics, DisaggPath } from './metrics.js';
import type { DisaggRoute, PrefillRouter } from './prefill-router.js';

/** Carried on a prepared request that runs disaggregated. */
export interface DisaggPrepared {
  route: DisaggRoute;
  trace: DisaggTrace;
}

export interface DisaggStreamArgs {
  model: ServedModel;
  selector: WorkerSelector;
  request: PreprocessedRequest;
  pinned: boolean;
  migrationLimit: number;
  /** How long a decode retry waits for a decode worker when none is up and no fallback can take it (ms). */
  waitMs?: number;
  /** Runs a decode retry when no decode worker is up (the prefill pool, `fallback` below). */
  fallback?: FallbackPool;
  health?: WorkerHealth;
  onMigrate?: (from: InstanceId, generated: number, cause: unknown) => void;
}

export class Disaggregator {
  /**
   * The prefill pool as the pipeline's fallback: with no agg/decode worker up (a lone decode
   * worker died), a prefill worker runs the whole request, or the rest of a stream, itself (a
   * request without `prefillOnly` runs aggregated there).
   */
  readonly fallback: FallbackPool;

  constructor(
    readonly router: PrefillRouter,
    private readonly metrics?: DisaggMetrics,
    private readonly log?: Pick<Logger, 'warn' | 'debug'>,
    /** --kv-layer-streaming: announce hand-offs to decode workers before the first token. */
    private readonly layerStreaming = false,
  ) {
    this.fallback = {
      selector: router.prefillSelector,
      pick: (model, request, excluded) => router.pickPrefill(model, request, excluded),
      generate: (model, request, instanceId, signal) => router.pool.generate(model, request, instanceId, signal),
    };
  }

  /** Undefined = run aggregated on `chosen`. Throws NoInstancesError (503) under --enforce-disagg. */
  async plan(model: ServedModel, request: PreprocessedRequest, chosen: InstanceId, selector: WorkerSelector, pinned: boolean): Promise<DisaggPrepared | undefined> {
    let outcome;
    try {
      outcome = await this.router.route(model, request, chosen, selector, pinned);
    } catch (err) {
      this.count(model.name, 'rejected');
      throw err;
    }
    if (outcome.kind === 'agg') {
      const reason = outcome.decision.kind === 'agg' ? outcome.decision.reason : 'short_prompt';
      this.count(model.name, reason === 'short_prompt' ? 'agg_short_prompt' : reason === 'no_prefill_workers' ? 'agg_no_prefill_workers' : 'agg_no_decode_workers');
      return undefined;
    }
    return {
      route: outcome.route,
      trace: { path: 'disagg', prefillWorkerId: outcome.route.prefillInstance, decodeWorkerId: outcome.route.decodeInstance, prefillRetries: 0, releasedByFrontend: false },
    };
  }

  stream(prepared: DisaggPrepared, args: DisaggStreamArgs, signal: AbortSignal): AsyncGenerator<TokenDelta> {
    const model = args.model.name;
    const metrics = this.metrics;
    const inner = streamDisaggregated(
      {
        ...args,
        router: this.router,
        route: prepared.route,
        trace: prepared.trace,
        ...(this.layerStreaming ? { layerStreaming: true } : {}),
        onPrefillFailed: (instanceId, cause) => {
          metrics?.prefillFailures.inc({ model });
          this.log?.warn({ model, instanceId, err: cause }, 'prefill worker failed: re-prefilling elsewhere or falling back');
        },
        onRelease: (params) => {
          metrics?.releases.inc({ model });
          this.log?.debug({ model, transferId: params.transferId, prefillInstanceId: params.prefillInstanceId }, 'releasing unclaimed prefill blocks');
        },
      },
      signal,
    );
    return this.counted(inner, prepared.trace, model);
  }

  private async *counted(inner: AsyncGenerator<TokenDelta>, trace: DisaggTrace, model: string): AsyncGenerator<TokenDelta> {
    let first = true;
    try {
      for await (const delta of inner) {
        if (first) {
          first = false;
          this.count(model, trace.path === 'disagg' ? 'disagg' : 'fallback_prefill_failed');
          if (trace.prefillSeconds !== undefined && trace.path === 'disagg') this.metrics?.prefillSeconds.observe({ model }, trace.prefillSeconds);
        }
        yield delta;
      }
    } finally {
      if (first) this.count(model, trace.path === 'disagg' ? 'disagg' : 'fallback_prefill_failed');
    }
  }

  private count(model: string, path: DisaggPath): void {
    this.metrics?.routed.inc({ model, path });
  }
}
