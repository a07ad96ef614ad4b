/** Shared by the disaggregation benchmarks: a tiny model that admits long prompts, flags, metrics. */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { makeTinyModel } from '../workers/models/index.js';
import type { Fleet } from './fleet/index.js';
import { runBench, type BenchOptions } from './loadgen/index.js';

/**
 * The tiny Llama with max_position_embeddings raised to `positions`: the mocker only needs the
 * model's shape (vocab, EOS, context), so 4k and 16k-token prompts fit.
 */
export async function longContextModel(dir: string, positions = 32768): Promise<string> {
  await makeTinyModel({ arch: 'llama', outDir: dir, dtype: 'f32', seed: 0 });
  const file = join(dir, 'config.json');
  const config = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
  config.max_position_embeddings = positions;
  writeFileSync(file, JSON.stringify(config, null, 2));
  return dir;
}

/** `--name value` from argv, or the fallback when the flag is absent. */
export function flagValue(args: readonly string[], name: string, fallback: string): string {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1]! : fallback;
}

/** GET `${url}/metrics` as text. */
export async function scrapeMetrics(url: string): Promise<string> {
  return (await fetch(`${url}/metrics`)).text();
}

/**
 * The sum of every sample of metric `name` (histogram `_sum`/`_count` lines are other names),
 * optionally only the series whose label text contains `label` (e.g. 'path="disagg"').
 */
export function metricSum(text: string, name: string, label?: string): number {
  let total = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (!/^[ {]/.test(rest) || (label !== undefined && !rest.includes(label))) continue;
    total += Number(rest.slice(rest.lastIndexOf(' ') + 1));
  }
  return total;
}

/**
 * A fixed-length random load through a fleet's frontend (token-id prompts of exactly `isl`
 * tokens, `osl` tokens out, EOS ignored, Poisson arrivals at `rate`): the disaggregation
 * benches' shared workload. Returns runBench's report.
 */
export async function randomLoad(fleet: Fleet, plan: { isl: number; osl: number; rate: number; requests: number }) {
  const { report } = await runBench({
    url: fleet.url,
    model: fleet.model,
    tokenizer: fleet.modelDir,
    promptFormat: 'ids',
    workload: 'random',
    isl: plan.isl,
    islStd: 0,
    osl: plan.osl,
    oslStd: 0,
    maxTokens: plan.osl,
    ignoreEos: true,
    rate: plan.rate,
    requests: plan.requests,
    warmup: 0,
    seed: 5,
    progress: 'off',
    timeoutS: 300,
  } as BenchOptions);
  return report;
}
