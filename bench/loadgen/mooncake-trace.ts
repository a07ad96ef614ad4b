/**
 * Writing the Mooncake trace format (JSONL, one request per line,
 * `{"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [..]}`; each hash id
 * names one block of `blockSize` (512) prompt tokens), and a generator of synthetic traces in
 * it, so the fleet script can replay a prefix-heavy workload without shipping a dataset.
 * Reading it is the planner's parser (parseMooncakeTrace / readMooncakeTrace in
 * planner/index.ts): one parser for `runtime bench` and `runtime planner simulate`, so a
 * trace one accepts the other accepts too.
 */
import { writeFileSync } from 'node:fs';
import type { TraceEntry } from '../../planner/index.js';
import { Rng, sampleLength } from './rng.js';

export const MOONCAKE_BLOCK_SIZE = 512;

export function formatTrace(entries: readonly TraceEntry[]): string {
  return entries.map((e) => JSON.stringify(e)).join('\n') + '\n';
}

export interface SyntheticTraceOptions {
  requests: number;
  /** Mean arrival rate in requests per second (Poisson). */
  rate: number;
  islMean: number;
  islStd: number;
  oslMean: number;
  oslStd: number;
  /** Distinct shared prefixes (think: system prompts, documents, agents). */
  prefixGroups: number;
  /** Blocks in each group's shared prefix. */
  prefixBlocks: number;
  /** Zipf exponent of group popularity; 0 = uniform. */
  zipf: number;
  blockSize: number;
  seed: number;
}

export const DEFAULT_SYNTHETIC_TRACE: SyntheticTraceOptions = {
  requests: 1000,
  rate: 10,
  islMean: 4096,
  islStd: 1024,
  oslMean: 256,
  oslStd: 64,
  prefixGroups: 16,
  prefixBlocks: 4,
  zipf: 1,
  blockSize: MOONCAKE_BLOCK_SIZE,
  seed: 0,
};

/**
 * Requests pick a prefix group by Zipf popularity and share that group's first
 * `prefixBlocks` hash ids (fewer when the prompt is shorter); the rest of each prompt gets
 * fresh ids, numbered after every group's prefix like Mooncake's global block numbering.
 */
export function makeSyntheticTrace(partial: Partial<SyntheticTraceOptions> = {}): TraceEntry[] {
  const o = { ...DEFAULT_SYNTHETIC_TRACE, ...partial };
  const rng = new Rng(o.seed, 0x54524143);
  const weights: number[] = [];
  for (let g = 0; g < o.prefixGroups; g++) weights.push(1 / Math.pow(g + 1, o.zipf));
  const total = weights.reduce((a, b) => a + b, 0);
  let nextId = o.prefixGroups * o.prefixBlocks;
  let clockMs = 0;
  const entries: TraceEntry[] = [];
  for (let i = 0; i < o.requests; i++) {
    if (i > 0) clockMs += rng.exponential(o.rate) * 1000;
    const isl = sampleLength(rng, o.islMean, o.islStd);
    const osl = sampleLength(rng, o.oslMean, o.oslStd);
    let pick = rng.next() * total;
    let group = 0;
    while (group < o.prefixGroups - 1 && pick >= (weights[group] as number)) pick -= weights[group++] as number;
    const blocks = Math.ceil(isl / o.blockSize);
    const shared = o.prefixGroups > 0 ? Math.min(o.prefixBlocks, blocks) : 0;
    const hashIds: number[] = [];
    for (let b = 0; b < shared; b++) hashIds.push(group * o.prefixBlocks + b);
    for (let b = shared; b < blocks; b++) hashIds.push(nextId++);
    entries.push({ timestamp: Math.round(clockMs), input_length: isl, output_length: osl, hash_ids: hashIds });
  }
  return entries;
}

export function writeSyntheticTrace(file: string, options: Partial<SyntheticTraceOptions> = {}): TraceEntry[] {
  const entries = makeSyntheticTrace(options);
  writeFileSync(file, formatTrace(entries));
  return entries;
}
