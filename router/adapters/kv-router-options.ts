/**
 * The KV router's command-line flags, shared by `runtime frontend --router-mode kv` and
 * `runtime router`, and their mapping onto the core's `KvRouterConfig`.
 */
import { Option, type Command } from 'commander';
import { numberInRange } from '../../runtime/index.js';
import { DEFAULT_KV_ROUTER_CONFIG, type KvRouterConfig } from '../kv-router.js';

export interface KvRouterFlags {
  kvOverlapScoreCredit: number;
  routerPrefillLoadScale: number;
  routerTemperature: number;
  routerReplicaSync: boolean;
  /** Commander's `--no-kv-events`: false means approximate mode. */
  kvEvents: boolean;
  routerMaxKvUsage: number;
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
    .option('--no-kv-events', 'kv: ignore worker KV events and learn cache contents from routing decisions (approximate mode)');
}

/** Flags → the core's config; `replicaId` names this process in router_sync. */
export function kvRouterConfigFromFlags(flags: Partial<KvRouterFlags>, replicaId: string): Partial<KvRouterConfig> {
  const f = { ...KV_ROUTER_FLAG_DEFAULTS, ...stripUndefined(flags) };
  return {
    weights: { overlapScoreCredit: f.kvOverlapScoreCredit, prefillLoadScale: f.routerPrefillLoadScale },
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
