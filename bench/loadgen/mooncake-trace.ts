/**
 * The Mooncake trace format: JSONL, one request per line,
 * `{"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [..]}`. Each hash id
 * names one block of `blockSize` (512) prompt tokens; requests that list the same ids in the
 * same positions share that prefix. Also a generator of synthetic traces in that format, so
 * the fleet script can replay a prefix-heavy workload without shipping a dataset.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { ConfigError } from '../../runtime/errors.js';
import { Rng, sampleLength } from './rng.js';

export interface TraceEntry {
  timestamp: number;
  input_length: number;
  output_length: number;
  hash_ids: number[];
}

export const MOONCAKE_BLOCK_SIZE = 512;

export function parseTrace(text: string, source = 'trace'): TraceEntry[] {
  const entries: TraceEntry[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = (lines[i] as string).trim();
    if (line === '') continue;
    let raw: Record<string, unknown>;
    try {
      raw = JSON.parse(line) as Record<string, unknown>;
    } catch {
      throw new ConfigError(`${source}:${i + 1}: not JSON`);
    }
    const { timestamp, input_length, output_length } = raw;
    const hashIds = raw.hash_ids ?? [];
    if (typeof timestamp !== 'number' || !Number.isFinite(timestamp) || timestamp < 0) {
      throw new ConfigError(`${source}:${i + 1}: timestamp must be a non-negative number of ms`);
    }
    if (!Number.isInteger(input_length) || (input_length as number) < 1) {
      throw new ConfigError(`${source}:${i + 1}: input_length must be a positive integer`);
    }
    if (!Number.isInteger(output_length) || (output_length as number) < 1) {
      throw new ConfigError(`${source}:${i + 1}: output_length must be a positive integer`);
    }
    if (!Array.isArray(hashIds) || !hashIds.every((h) => Number.isInteger(h))) {
      throw new ConfigError(`${source}:${i + 1}: hash_ids must be an array of integers`);
    }
    entries.push({ timestamp, input_length: input_length as number, output_length: output_length as number, hash_ids: hashIds as number[] });
  }
  if (entries.length === 0) throw new ConfigError(`${source}: no requests`);
  entries.sort((a, b) => a.timestamp - b.timestamp);
  return entries;
}

export function readTrace(file: string): TraceEntry[] {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError(`cannot read trace ${file}: ${(err as Error).message}`);
  }
  return parseTrace(text, file);
}

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
