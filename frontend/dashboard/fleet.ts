/**
 * Fleet: the workers the dashboard lists, per model and pool, from the card feed and the
 * workers' `load_metrics`. Pure: the clock is an argument.
 *
 * A worker's load numbers are only as good as its latest report. Workers re-send their load
 * every `LOAD_REPORT_HEARTBEAT_MS` (proto/wire.ts), so a report older than
 * `LOAD_REPORT_STALE_MS` means the worker stopped reporting: the view shows no load for it
 * (`loadFresh: false`, running / waiting / KV used 0) instead of its last numbers for ever.
 *
 * `view(now)` derives everything (a draining worker silent too long shows as gone, gone
 * workers past retention are left out) without changing anything; `advance(now)` commits
 * those transitions and forgets old gone workers.
 */
import type { ModelInfo } from './snapshot.js';
import { LOAD_REPORT_STALE_MS, type LoadSpecReport, type LoadTierReport, type WorkerRole } from '../../proto/wire.js';
import type { ModelView, PoolRole, PoolView, WorkerSpecView, WorkerState, WorkerTierView, WorkerView } from './snapshot.js';

/** A draining worker silent this long (no load_metrics) is gone. */
export const DRAIN_SILENCE_MS = LOAD_REPORT_STALE_MS;
/** Gone workers stay visible this long. */
export const GONE_RETENTION_MS = 60_000;

/** The pool a card's role serves in (the page's name for it). */
export const POOL_OF: Record<WorkerRole, PoolRole> = { agg: 'aggregated', prefill: 'prefill', decode: 'decode' };
const POOL_ORDER: readonly PoolRole[] = ['aggregated', 'prefill', 'decode'];

export interface LoadSample {
  workerId: string;
  numRunning: number;
  numWaiting: number;
  activeBlocks: number;
  totalBlocks: number;
  /** Workers with KV tiers only (see `readTierReport`). */
  tiers?: LoadTierReport;
  /** Workers that speculate only (see `readSpecReport`). */
  spec?: LoadSpecReport;
}

/** The report's `spec` when it is well formed, else undefined (a worker that does not speculate, or garbage). */
export function readSpecReport(x: unknown): LoadSpecReport | undefined {
  if (typeof x !== 'object' || x === null) return undefined;
  const t = x as Record<string, unknown>;
  const n = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : undefined);
  const [drafts, draftTokens, acceptedTokens] = [t.drafts, t.draftTokens, t.acceptedTokens].map(n);
  if (drafts === undefined || draftTokens === undefined || acceptedTokens === undefined) return undefined;
  return { drafts, draftTokens, acceptedTokens };
}

/** The report's `tiers` when it is well formed, else undefined (a worker without tiers, or garbage). */
export function readTierReport(x: unknown): LoadTierReport | undefined {
  if (typeof x !== 'object' || x === null) return undefined;
  const t = x as Record<string, unknown>;
  const h = t.hitTokens as Record<string, unknown> | null | undefined;
  if (typeof h !== 'object' || h === null) return undefined;
  const n = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : undefined);
  const fields = [t.hostBlocks, t.hostCapacity, t.diskBlocks, t.diskCapacity, t.queryTokens, h.device, h.host, h.disk].map(n);
  if (fields.some((v) => v === undefined)) return undefined;
  const [hostBlocks, hostCapacity, diskBlocks, diskCapacity, queryTokens, device, host, disk] = fields as number[];
  return { hostBlocks: hostBlocks!, hostCapacity: hostCapacity!, diskBlocks: diskBlocks!, diskCapacity: diskCapacity!, queryTokens: queryTokens!, hitTokens: { device: device!, host: host!, disk: disk! } };
}

/** What a card says about its worker beyond role and size. */
export interface CardExtras {
  /** Resident LoRA adapters. */
  loras?: string[];
  /** The worker's name (`workerName`). */
  name?: string;
  /** Its architecture and parameter counts (a MoE's active share). */
  info?: ModelInfo;
}

interface WorkerEntry {
  instanceId: string;
  model: string;
  role: PoolRole;
  state: WorkerState;
  running: number;
  waiting: number;
  kvUsedBlocks: number;
  kvTotalBlocks: number;
  cachedTokens: number;
  promptTokens: number;
  lastSeen: number;
  /** Receipt of the latest load report; 0 before the first. */
  lastLoadAt: number;
  goneAt?: number;
  /** LoRA adapters its card lists. */
  loras?: string[];
  /** Its card's architecture and parameter counts (a MoE's active share). */
  model_info?: ModelInfo;
  /** Its card's `workerName` (`runtime up`'s agg-0, embed-0, …). */
  name?: string;
  /** Its KV tiers, from its latest report that had them. */
  tiers?: LoadTierReport;
  /** Its speculative decoding counters, from its latest report. */
  spec?: LoadSpecReport;
}

export class Fleet {
  private readonly workers = new Map<string, WorkerEntry>();

  cardAdded(model: string, role: WorkerRole, instanceId: string, totalBlocks: number, now: number, card: CardExtras = {}): void {
    const { loras, name, info } = card;
    const existing = this.workers.get(instanceId);
    if (existing && existing.state !== 'gone') {
      existing.state = 'ready';
      existing.kvTotalBlocks ||= totalBlocks;
      existing.lastSeen = now;
      existing.loras = loras;
      existing.model_info = info;
      existing.name = name;
      return;
    }
    this.workers.set(instanceId, {
      instanceId, model, role: POOL_OF[role], state: 'ready', running: 0, waiting: 0, kvUsedBlocks: 0, kvTotalBlocks: totalBlocks,
      cachedTokens: existing?.cachedTokens ?? 0, promptTokens: existing?.promptTokens ?? 0, lastSeen: now, lastLoadAt: 0, loras, name, model_info: info,
    });
  }

  /**
   * A worker deregisters its card first and then drains in-flight streams, so a card that goes
   * while the worker's current report shows running requests is 'draining'; otherwise gone.
   */
  cardRemoved(instanceId: string, now: number): void {
    const w = this.workers.get(instanceId);
    if (!w || w.state === 'gone') return;
    if (w.running > 0 && isFresh(w, now)) w.state = 'draining';
    else markGone(w, now);
  }

  load(m: LoadSample, now: number): void {
    const w = this.workers.get(m.workerId);
    if (!w || w.state === 'gone') return; // unknown until its card comes: it is not routable yet
    w.running = m.numRunning;
    w.waiting = m.numWaiting;
    w.kvUsedBlocks = m.activeBlocks;
    if (m.totalBlocks > 0) w.kvTotalBlocks = m.totalBlocks;
    w.tiers = m.tiers;
    w.spec = m.spec;
    w.lastSeen = w.lastLoadAt = now;
  }

  /** Prompt and cached tokens of a request this frontend finished on `instanceId`. */
  prefixUsage(instanceId: string, cachedTokens: number, promptTokens: number): void {
    const w = this.workers.get(instanceId);
    if (!w || promptTokens <= 0) return;
    w.cachedTokens += cachedTokens;
    w.promptTokens += promptTokens;
  }

  /** Commit what `view` derives: silent draining workers turn gone; old gone ones are forgotten. */
  advance(now: number): void {
    for (const [id, w] of this.workers) {
      if (w.state === 'draining' && !isDrainAlive(w, now)) markGone(w, w.lastLoadAt + DRAIN_SILENCE_MS);
      if (w.state === 'gone' && now - w.goneAt! > GONE_RETENTION_MS) this.workers.delete(id);
    }
  }

  view(now: number): ModelView[] {
    const byModel = new Map<string, Map<PoolRole, PoolView>>();
    const infoOf = new Map<string, ModelInfo>();
    for (const w of this.workers.values()) {
      const v = workerView(w, now);
      if (v.state === 'gone' && now - v.goneAt! > GONE_RETENTION_MS) continue;
      if (w.model_info !== undefined && (!infoOf.has(w.model) || w.state !== 'gone')) infoOf.set(w.model, w.model_info);
      let pools = byModel.get(w.model);
      if (!pools) byModel.set(w.model, (pools = new Map()));
      let pool = pools.get(w.role);
      if (!pool) pools.set(w.role, (pool = { role: w.role, workers: [] }));
      pool.workers.push(v);
    }
    return [...byModel.entries()]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([name, pools]) => ({
        name,
        ...(infoOf.get(name) ?? {}),
        pools: POOL_ORDER.filter((r) => pools.has(r)).map((r) => {
          const pool = pools.get(r)!;
          pool.workers.sort((a, b) => a.instanceId.localeCompare(b.instanceId));
          return pool;
        }),
      }));
  }
}

function isFresh(w: WorkerEntry, now: number): boolean {
  return w.lastLoadAt > 0 && now - w.lastLoadAt < LOAD_REPORT_STALE_MS;
}

function isDrainAlive(w: WorkerEntry, now: number): boolean {
  return now - w.lastLoadAt < DRAIN_SILENCE_MS;
}

function markGone(w: WorkerEntry, at: number): void {
  w.state = 'gone';
  w.goneAt = at;
  w.running = 0;
  w.waiting = 0;
}

function workerView(w: WorkerEntry, now: number): WorkerView {
  let state = w.state;
  let goneAt = w.goneAt;
  if (state === 'draining' && !isDrainAlive(w, now)) {
    state = 'gone';
    goneAt = w.lastLoadAt + DRAIN_SILENCE_MS;
  }
  const fresh = state !== 'gone' && isFresh(w, now);
  return {
    instanceId: w.instanceId,
    ...(w.name !== undefined ? { name: w.name } : {}),
    state,
    running: fresh ? w.running : 0,
    waiting: fresh ? w.waiting : 0,
    kvUsedBlocks: fresh ? w.kvUsedBlocks : 0,
    kvTotalBlocks: w.kvTotalBlocks,
    loadFresh: fresh,
    prefixHitRate: w.promptTokens > 0 ? w.cachedTokens / w.promptTokens : null,
    lastSeen: w.lastSeen,
    ...(goneAt !== undefined ? { goneAt } : {}),
    ...(w.loras !== undefined && w.loras.length > 0 ? { loras: w.loras } : {}),
    ...(w.tiers !== undefined && state !== 'gone' ? { tiers: tierView(w.tiers) } : {}),
    ...(w.spec !== undefined && state !== 'gone' ? { spec: specView(w.spec) } : {}),
  };
}

/** Acceptance as vLLM reports it: accepted / drafted tokens, and tokens per verify step (1 + accepted / drafts). */
function specView(s: LoadSpecReport): WorkerSpecView {
  return {
    drafts: s.drafts,
    draftTokens: s.draftTokens,
    acceptanceRate: s.draftTokens > 0 ? s.acceptedTokens / s.draftTokens : null,
    meanAcceptedLength: s.drafts > 0 ? 1 + s.acceptedTokens / s.drafts : null,
  };
}

/** Occupancy as reported; hit rates as shares of the worker's prefix lookups since it started. */
function tierView(t: LoadTierReport): WorkerTierView {
  const q = t.queryTokens;
  return {
    hostBlocks: t.hostBlocks,
    hostCapacity: t.hostCapacity,
    diskBlocks: t.diskBlocks,
    diskCapacity: t.diskCapacity,
    hitRate: q > 0 ? { device: t.hitTokens.device / q, host: t.hitTokens.host / q, disk: t.hitTokens.disk / q } : null,
  };
}
