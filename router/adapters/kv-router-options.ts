/**
 * The KV router's command-line flags, shared by `runtime frontend --router-mode kv` and
 * `runtime router`, and their mapping onto the core's `KvRouterConfig`.
 */
import { Option, type Command } from 'commander';
import { intInRange, numberInRange } from '../../runtime/index.js';
import { ConfigError } from '../../runtime/errors.js';
import { DEFAULT_KV_ROUTER_CONFIG, type KvRouterConfig } from '../kv-router.js';
import { DEFAULT_DISK_HIT_WEIGHT, DEFAULT_HOST_HIT_WEIGHT } from '../cost.js';
import { ROUTER_COST_KINDS, type LatencyCostConfig, type RouterCostKind } from '../latency-cost.js';
import { DEFAULT_PREFIX_AFFINITY } from '../prefix-affinity.js';
import { DEFAULT_LORA_LOAD_MS } from '../lora-affinity.js';
import { loadPerfProfile } from '../../perf-model/index.js';

export interface KvRouterFlags {
  kvOverlapScoreCredit: number;
  routerPrefillLoadScale: number;
  routerTemperature: number;
  routerReplicaSync: boolean;
  /** Commander's `--no-kv-events`: false means approximate mode. */
  kvEvents: boolean;
  routerMaxKvUsage: number;
  /** Opt-in refusal: a worker reporting this KV usage or more is busy; every worker busy → 429. */
  routerBusyThreshold?: number;
  /** Opt-in refusal: a worker reporting this many waiting requests or more is busy. */
  routerMaxWaiting?: number;
  /** Share of the prompt a worker must hold (any tier) to take it while not truly overloaded; 0 = off. */
  routerPrefixAffinity?: number;
  /** Multi-LoRA: ms an adapter load takes on a worker that has not reported its own. */
  routerLoraLoadMs?: number;
  routerHostHitWeight?: number;
  routerDiskHitWeight?: number;
  /** `--router-cost`: blocks (default) or latency (predicted ms; router/latency-cost.ts). */
  routerCost?: RouterCostKind;
  routerItlWeight?: number;
  routerTtftTargetMs?: number;
  routerItlTargetMs?: number;
  /** Perf profile (`runtime profile --out`) the latency cost predicts from; default: the polynomial. */
  routerPerfProfile?: string;
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
    .addOption(new Option('--router-max-kv-usage <f>', 'kv: a worker at or above this KV usage is passed over while another is below it (all above: the least-bad one queues the request)').argParser(numberInRange(0.01, 1)).default(d.routerMaxKvUsage))
    .addOption(new Option('--router-busy-threshold <f>', 'kv, opt-in refusal: a worker reporting this KV usage or more is busy; when every worker is, requests wait (bounded) and then get 429 + Retry-After').argParser(numberInRange(0.01, 1)))
    .addOption(new Option('--router-prefix-affinity <share>', `kv: a worker holding at least this share of the prompt in any KV tier (pool, host, disk) takes it unless over its load threshold, out of KV room or past 2× the mean load of the workers without it; 0 = off (default ${DEFAULT_PREFIX_AFFINITY.minHeldShare})`).argParser(numberInRange(0, 1)))
    .addOption(new Option('--router-lora-load-ms <ms>', `kv, multi-LoRA: what loading an adapter costs a worker that has not reported its own measured load time; a worker without the request's adapter pays it (default ${DEFAULT_LORA_LOAD_MS})`).argParser(numberInRange(0)))
    .addOption(new Option('--router-max-waiting <n>', 'kv, opt-in refusal: a worker reporting this many waiting requests or more is busy (as --router-busy-threshold)').argParser(intInRange(1, 1_000_000)))
    .option('--router-replica-sync', 'kv: share active-sequence bookings with other router replicas over router_sync', false)
    .option('--no-kv-events', 'kv: ignore worker KV events and learn cache contents from routing decisions (approximate mode)')
    .addOption(new Option('--router-host-hit-weight <x>', `kv: prefill a block in a worker's host KV tier saves, 0..1, for every worker (default: each worker's own 1 − onboard/recompute time from its load reports, ${DEFAULT_HOST_HIT_WEIGHT} before it reports; docs/kv-tiers.md)`).argParser(numberInRange(0, 1)))
    .addOption(new Option('--router-disk-hit-weight <x>', `kv: prefill a block in a worker's disk KV tier saves, 0..1, for every worker (default: measured per worker, ${DEFAULT_DISK_HIT_WEIGHT} before it reports)`).argParser(numberInRange(0, 1)))
    .addOption(new Option('--router-cost <kind>', 'kv: blocks = block-count cost; latency = predicted TTFT + weighted ITL in ms, calibrated per worker').choices([...ROUTER_COST_KINDS]).default('blocks'))
    .addOption(new Option('--router-itl-weight <x>', 'kv, latency cost: weight of the ITL penalty against TTFT').argParser(numberInRange(0)).default(1))
    .addOption(new Option('--router-ttft-target-ms <ms>', 'kv, latency cost: a worker predicted over this TTFT is skipped while another is not').argParser(numberInRange(0.001)))
    .addOption(new Option('--router-itl-target-ms <ms>', 'kv, latency cost: a worker predicted over this ITL is skipped while another is not').argParser(numberInRange(0.001)))
    .option('--router-perf-profile <file>', 'kv, latency cost: perf profile the predictions start from (`runtime profile --out`); default: the built-in polynomial');
}

/**
 * `kvRouterConfigFromFlags` plus what needs I/O: the latency cost's perf profile, read once at
 * start (a bad file is a ConfigError, exit 2).
 */
export async function loadKvRouterConfig(flags: Partial<KvRouterFlags>, replicaId: string): Promise<Partial<KvRouterConfig>> {
  const config = kvRouterConfigFromFlags(flags, replicaId);
  if (flags.routerPerfProfile === undefined || flags.routerPerfProfile === '') return config;
  try {
    const perfModel = await loadPerfProfile(flags.routerPerfProfile);
    return { ...config, latency: { ...config.latency, perfModel } };
  } catch (err) {
    throw new ConfigError(`--router-perf-profile: ${(err as Error).message}`);
  }
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
    // Either weight given by hand: it applies to every worker, whatever their reports say.
    measuredTierWeights: f.routerHostHitWeight === undefined && f.routerDiskHitWeight === undefined,
    prefixAffinity: { ...DEFAULT_PREFIX_AFFINITY, ...(f.routerPrefixAffinity !== undefined ? { minHeldShare: f.routerPrefixAffinity } : {}) },
    loraLoadMs: f.routerLoraLoadMs ?? DEFAULT_LORA_LOAD_MS,
    temperature: f.routerTemperature,
    useKvEvents: f.kvEvents,
    overload: { ...DEFAULT_KV_ROUTER_CONFIG.overload, maxKvUsage: f.routerMaxKvUsage },
    ...(f.routerBusyThreshold !== undefined || f.routerMaxWaiting !== undefined
      ? { refusal: { ...(f.routerBusyThreshold !== undefined ? { kvUsage: f.routerBusyThreshold } : {}), ...(f.routerMaxWaiting !== undefined ? { maxWaiting: f.routerMaxWaiting } : {}) } }
      : {}),
    replicaId,
    cost: f.routerCost ?? 'blocks',
    latency: latencyFromFlags(f),
  };
}

function latencyFromFlags(f: Partial<KvRouterFlags>): Partial<LatencyCostConfig> {
  return {
    ...(f.routerItlWeight !== undefined ? { itlWeight: f.routerItlWeight } : {}),
    ...(f.routerTtftTargetMs !== undefined ? { ttftTargetMs: f.routerTtftTargetMs } : {}),
    ...(f.routerItlTargetMs !== undefined ? { itlTargetMs: f.routerItlTargetMs } : {}),
  };
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  const out: Partial<T> = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined) (out as Record<string, unknown>)[k] = v;
  return out;
}
