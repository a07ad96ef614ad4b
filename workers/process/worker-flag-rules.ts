/**
 * The combinations of `runtime worker` flags that cannot run, in one table: the worker checks its
 * flags against it before it starts anything, and `runtime up` checks each worker's command line
 * against it before it starts any child (cli/up.ts), so a bad combination is one line and exit 2
 * instead of every worker failing the same way after the fleet started.
 */
import { checkFlagRules, type FlagRule } from '../../runtime/index.js';
import type { SpeculativeMethod } from '../speculative/index.js';

/** The parsed worker flags the rules read (commander's values: numbers already parsed). */
export interface WorkerRuleFlags {
  engine: 'mocker' | 'native';
  mode: 'agg' | 'prefill' | 'decode';
  task: 'generate' | 'embed';
  kvHostCacheGb?: number;
  kvDiskCacheDir?: string;
  kvDiskCacheGb?: number;
  pooling?: string;
  speculative?: SpeculativeMethod;
  promptLookupMin?: number;
  promptLookupMax?: number;
}

const hostTier = (f: WorkerRuleFlags) => (f.kvHostCacheGb ?? 0) > 0;

export const WORKER_FLAG_RULES: readonly FlagRule<WorkerRuleFlags>[] = [
  {
    broken: (f) => (f.kvDiskCacheDir !== undefined || (f.kvDiskCacheGb ?? 0) > 0) && !hostTier(f),
    message: '--kv-disk-cache-dir / --kv-disk-cache-gb need --kv-host-cache-gb: the disk tier sits below the host tier',
  },
  {
    // The mocker simulates its disk tier; a real one needs somewhere to write.
    broken: (f) => (f.kvDiskCacheGb ?? 0) > 0 && f.kvDiskCacheDir === undefined && f.engine !== 'mocker',
    message: '--kv-disk-cache-gb needs --kv-disk-cache-dir',
  },
  { broken: (f) => f.pooling !== undefined && f.task !== 'embed', message: '--pooling is for embedding workers (--task embed)' },
  { broken: (f) => f.task === 'embed' && f.mode !== 'agg', message: `--task embed serves embeddings whole: it takes no --mode prefill|decode` },
  { broken: (f) => (f.speculative ?? 'off') !== 'off' && f.task === 'embed', message: '--speculative is for generation workers, not --task embed' },
  {
    broken: (f) => f.promptLookupMin !== undefined && f.promptLookupMax !== undefined && f.promptLookupMin > f.promptLookupMax,
    message: '--prompt-lookup-min must not exceed --prompt-lookup-max (the longest n-gram is tried first, down to the shortest)',
  },
];

export function checkWorkerFlags(flags: WorkerRuleFlags, origin?: string): void {
  checkFlagRules(WORKER_FLAG_RULES, flags, origin);
}
