/**
 * Multi-LoRA in the KV router's decision: what a worker without the request's adapter pays, and
 * where to load an adapter ahead of need (docs/lora.md). Pure: time and loads are arguments.
 *
 * The penalty is the adapter load time, so a non-holder wins only when the holders are loaded
 * by more than a load costs. Per worker it is the load time that worker measured and reported
 * (`LoadMetrics.loraLoadMs`, in its perf model's milliseconds), else `--router-lora-load-ms`.
 * The latency cost adds those milliseconds; the block cost adds as many blocks as the perf
 * model recomputes in that time (worked: 50 ms at the default polynomial's 0.2568 ms per block
 * after 1024 tokens = 194.7 blocks; the old fixed 32 blocks were 8 ms, far below what a load
 * costs).
 *
 * Loads ahead of need (`LoraPrefetch`): a routed adapter request names one worker to start
 * loading that adapter in the background, so a later request finds it there instead of waiting
 * for an on-demand load. Two triggers:
 *   - routing intent: a worker without the adapter would have won with half the penalty (the
 *     holders are busier than it by at least half a load, so the next requests may well leave
 *     them). Not merely "without the penalty": on the 32-adapter Zipf fleet that fired on about
 *     every other request (28-37 loads a run of 240, each a 17.6 MB read on a busy worker) and
 *     the loads cost more TTFT than they saved (bench/lora-fleet.ts);
 *   - popularity: the adapter's share of the last `window` adapter requests asks for more
 *     holders than it has (share × candidates, rounded up).
 * The target is the non-holder with the lowest cost before the penalty.
 *
 * Slots (`loraSlotWaits`): a worker runs at most `--max-loras` distinct adapters at once
 * (`LoadMetrics.maxLoras`); its scheduler holds a sequence of a further adapter, and every
 * adapter sequence queued behind it, until one running adapter drains. The router's bookings
 * know which adapters are in flight per worker (ActiveSequences.adaptersWith); a worker where
 * this request would make more than its slots pays, per adapter beyond them, half an adapter
 * load time (`LORA_SLOT_WAIT_SHARE`). Without it the block cost could not see the hold: a held
 * request adds only its few uncached blocks, and a worker whose batch drains behind a hold
 * looks cheaper, so it drew more requests for further adapters (bench/lora-fleet.ts;
 * docs/lora.md). Half, not a whole load: then a holder over its slots and an idle non-holder
 * tied, and on the bench kv loaded 23 adapters in a run and lost worse than without the charge;
 * at half, the other holder with a free slot wins, and a non-holder only once the holders are
 * also busier by half a load. Slot waits do not count toward prefetch intent.
 */
/** A slot wait costs this share of the worker's adapter load time. */
export const LORA_SLOT_WAIT_SHARE = 0.5;
import type { InstanceId } from '../proto/wire.js';
import type { CostRow } from './cost.js';

/** What a worker is assumed to take to load an adapter before it reports its own (`--router-lora-load-ms`). */
export const DEFAULT_LORA_LOAD_MS = 50;
/** Routing intent: the share of a load the holders must be busier by before a non-holder prefetches. */
export const INTENT_PENALTY_SHARE = 0.5;
/** Adapter requests the popularity share is counted over. */
export const LORA_DEMAND_WINDOW = 256;

/**
 * The last `window` adapter requests, by lora_id: a ring of ids and a count per id, so the share
 * of any adapter is one lookup.
 */
export class LoraDemand {
  private readonly ring: Array<number | undefined>;
  private next = 0;
  private filled = 0;
  private readonly counts = new Map<number, number>();

  constructor(readonly window = LORA_DEMAND_WINDOW) {
    this.ring = new Array<number | undefined>(window);
  }

  /** Counts one request for `loraId`, dropping the oldest beyond the window. */
  note(loraId: number): void {
    const old = this.ring[this.next];
    if (old !== undefined) {
      const c = (this.counts.get(old) ?? 1) - 1;
      if (c <= 0) this.counts.delete(old);
      else this.counts.set(old, c);
    }
    this.ring[this.next] = loraId;
    this.counts.set(loraId, (this.counts.get(loraId) ?? 0) + 1);
    this.next = (this.next + 1) % this.window;
    if (this.filled < this.window) this.filled++;
  }

  /** Share of the window's adapter requests that named `loraId` (0 before any). */
  share(loraId: number): number {
    return this.filled === 0 ? 0 : (this.counts.get(loraId) ?? 0) / this.filled;
  }
}

/**
 * The worker to load the adapter on ahead of need, or undefined. `rows[i]` is candidate i's
 * cost with the penalty, `penalties[i]` what it paid (0 for holders), `chosen` the index routed.
 */
export function loraPrefetchTarget(rows: readonly CostRow[], penalties: readonly number[], chosen: number, holders: number, share: number): InstanceId | undefined {
  let best = -1;
  for (let i = 0; i < rows.length; i++) {
    if (penalties[i]! <= 0 || rows[i]!.overloaded) continue;
    if (best < 0 || rows[i]!.cost - penalties[i]! < rows[best]!.cost - penalties[best]!) best = i;
  }
  if (best < 0 || best === chosen || penalties[chosen]! > 0) return undefined;
  const intent = rows[best]!.cost - penalties[best]! * (1 - INTENT_PENALTY_SHARE) < rows[chosen]!.cost;
  const wanted = Math.ceil(share * rows.length);
  return intent || holders < wanted ? rows[best]!.instanceId : undefined;
}

/** Adapters beyond a worker's slots were it to take the request: 0 when it has room or does not report `maxLoras`. */
export function loraSlotWaits(adaptersWithRequest: number, maxLoras: number | undefined): number {
  return maxLoras !== undefined && maxLoras > 0 ? Math.max(0, adaptersWithRequest - maxLoras) : 0;
}
