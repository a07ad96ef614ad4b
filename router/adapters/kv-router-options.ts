/**
 * The KV router's command-line flags, shared by `runtime frontend --router-mode kv` and
 * `runtime router`, and their mapping onto the core's `KvRouterConfig`.
 */
import { Option, type Command } from 'commander';
import { numberInRange } from '../../runtime/index.js';
import { DEFAULT_KV_ROUTER_CONFIG, type KvRouterConfig } from '../kv-router.js';
import { DEFAULT_DISK_HIT_WEIGHT, DEFAULT_HOST_HIT_WEIGHT } from '../cost.js';

export interface KvRouterFlags {
  kvOverlapScoreCredit: number;
  routerPrefillLoadScale: number;
  routerTemperature: number;
  routerReplicaSync: boolean;
  /** Commander's `--no-kv-events`: false means approximate mode. */
  kvEvents: boolean;
  routerMaxKvUsage: number;
  routerHostHitWeight?: number;
  routerDiskHitWeight?: number;
}

export const KV_ROUTER_FLAG_DEFAULTS: KvRouterFlags = {
  kvOverlapScoreCredit: 1,
  routerPrefillLoadScale: 1,
  routerTemperature: 0,
  routerReplicaSync: false,
  kvEvents: true,
  routerMaxKvUsage: DEFAULT_KV_ROUTER_CONFIG.overload.maxKvUsage,
};

export function addKvRouterOptions(cmd: Command): Command {
  const d = KV_ROUTER_FLAG_DEFAULTS;
  return cmd
    .addOption(new Option('--kv-overlap-score-credit <x>', 'kv: blocks of prefill a cached block saves in the cost').argParser(numberInRange(0)).default(d.kvOverlapScoreCredit))
    .addOption(new Option('--router-prefill-load-scale <x>', 'kv: weight of the prefill term against active decode blocks').argParser(numberInRange(0)).default(d.routerPrefillLoadScale))
    .addOption(new Option('--router-temperature <t>', 'kv: 0 = lowest cost wins; above 0, softmax over normalized costs').argParser(numberInRange(0)).default(d.routerTemperature))
    .addOption(new Option('--router-max-kv-usage <f>', 'kv: a worker at or above this KV usage is skipped').argParser(numberInRange(0.01, 1)).default(d.routerMaxKvUsage))
    .option('--router-replica-sync', 'kv: share active-sequence bookings with other router replicas over router_sync', false)
    .option('--no-kv-events', 'kv: ignore worker KV events and learn cache contents from routing decisions (approximate mode)')
    .addOption(new Option('--router-host-hit-weight <x>', `kv: prefill a block in a worker's host KV tier saves, 0..1 (default ${DEFAULT_HOST_HIT_WEIGHT}: 1 − copy/recompute time; docs/kv-tiers.md)`).argParser(numberInRange(0, 1)))
    .addOption(new Option('--router-disk-hit-weight <x>', `kv: prefill a block in a worker's disk KV tier saves, 0..1 (default ${DEFAULT_DISK_HIT_WEIGHT})`).argParser(numberInRange(0, 1)));
}

/** Flags → the core's config; `replicaId` names this process in router_sync. */
export function kvRouterConfigFromFlags(flags: Partial<KvRouterFlags>, replicaId: string): Partial<KvRouterConfig> {
  const f = { ...KV_ROUTER_FLAG_DEFAULTS, ...stripUndefined(flags) };
  return {
    weights: {
      overlapScoreCredit: f.kvOverlapScoreCredit,
      prefillLoadScale: f.routerPrefillLoadScale,
      hostHitWeight: f.routerHostHitWeight ?? DEFAULT_HOST_HIT_WEIGHT,
      diskHitWeight: f.routerDiskHitWeight ?? DEFAULT_DISK_HIT_WEIGHT,
    },
    temperature: f.routerTemperature,
    useKvEvents: f.kvEvents,
    overload: { ...DEFAULT_KV_ROUTER_CONFIG.overload, maxKvUsage: f.routerMaxKvUsage },
    replicaId,
  };
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  const out: Partial<T> = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined) (out as Record<string, unknown>)[k] = v;
  return out;
}
