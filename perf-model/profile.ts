/**
 * The profile schema (version 1) and its validation. A profile is measured step times; see
 * README.md for the JSON and what each field means. Points need not be sorted.
 *
 *   { "version": 1,
 *     "prefill": { "tokens": [128, 1024, 4096], "ms": [18.4, 33.0, 95.1] },
 *     "decode":  { "kvUsage": [0, 0.5, 1], "ms": [5.7, 26.3, 34.0] } }
 *
 * or a decode grid over KV usage and batch size (ms[i][j] at kvUsage[i], batchSize[j]):
 *     "decode":  { "kvUsage": [0, 1], "batchSize": [1, 64], "ms": [[5, 9], [20, 34]] }
 *
 * "version" may be left out (read as 1, the files written before it existed); any other
 * version is refused rather than misread.
 */
import { isObject } from '../proto/wire.js';
import { PerfProfileError } from './errors.js';
import { InterpolatedPerfModel } from './interpolated.js';

export const PERF_PROFILE_VERSION = 1;

export type DecodeProfile =
  | { kvUsage: number[]; ms: number[] }
  | { kvUsage: number[]; batchSize: number[]; ms: number[][] };

export interface PerfProfile {
  version?: typeof PERF_PROFILE_VERSION;
  prefill: { tokens: number[]; ms: number[] };
  decode: DecodeProfile;
}

/** Checks a parsed JSON value against the schema; PerfProfileError names the first fault. */
export function parsePerfProfile(raw: unknown): PerfProfile {
  if (!isObject(raw)) throw new PerfProfileError('perf profile: expected a JSON object');
  const version = raw['version'] ?? PERF_PROFILE_VERSION;
  if (version !== PERF_PROFILE_VERSION) {
    throw new PerfProfileError(`perf profile: unsupported version ${JSON.stringify(version)} (this build reads version ${PERF_PROFILE_VERSION})`);
  }
  const prefill = raw['prefill'];
  const decode = raw['decode'];
  if (!isObject(prefill) || !isObject(decode)) throw new PerfProfileError('perf profile: needs "prefill" and "decode" sections');

  const tokens = points(prefill['tokens'], 'prefill.tokens', (v) => v >= 0, '≥ 0');
  const prefillMs = points(prefill['ms'], 'prefill.ms', (v) => v > 0, '> 0');
  sameLength(tokens, prefillMs, 'prefill.tokens', 'prefill.ms');

  const kvUsage = points(decode['kvUsage'], 'decode.kvUsage', (v) => v >= 0 && v <= 1, 'in 0..1');
  if (decode['batchSize'] === undefined) {
    const ms = points(decode['ms'], 'decode.ms', (v) => v > 0, '> 0');
    sameLength(kvUsage, ms, 'decode.kvUsage', 'decode.ms');
    return { version: PERF_PROFILE_VERSION, prefill: { tokens, ms: prefillMs }, decode: { kvUsage, ms } };
  }
  const batchSize = points(decode['batchSize'], 'decode.batchSize', (v) => v >= 1, '≥ 1');
  const rows = decode['ms'];
  if (!Array.isArray(rows) || rows.length !== kvUsage.length) {
    throw new PerfProfileError('perf profile: decode.ms must be a kvUsage × batchSize grid (one row per kvUsage point)');
  }
  const ms = rows.map((row, i) => {
    const r = points(row, `decode.ms[${i}]`, (v) => v > 0, '> 0');
    sameLength(batchSize, r, 'decode.batchSize', `decode.ms[${i}]`);
    return r;
  });
  return { version: PERF_PROFILE_VERSION, prefill: { tokens, ms: prefillMs }, decode: { kvUsage, batchSize, ms } };
}

/** Validates a parsed profile (from JSON) into a model; PerfProfileError on a bad shape. */
export function perfModelFromProfile(raw: unknown): InterpolatedPerfModel {
  return new InterpolatedPerfModel(parsePerfProfile(raw));
}

function points(v: unknown, what: string, ok: (x: number) => boolean, rule: string): number[] {
  if (!Array.isArray(v) || v.length === 0) throw new PerfProfileError(`perf profile: ${what} must be a non-empty array of numbers`);
  for (const x of v) {
    if (typeof x !== 'number' || !Number.isFinite(x)) throw new PerfProfileError(`perf profile: ${what} points must be finite numbers`);
    if (!ok(x)) throw new PerfProfileError(`perf profile: ${what} points must be ${rule} (got ${x})`);
  }
  return v as number[];
}

function sameLength(a: readonly number[], b: readonly number[], aName: string, bName: string): void {
  if (a.length !== b.length) throw new PerfProfileError(`perf profile: ${aName} and ${bName} need the same number of points (${a.length} vs ${b.length})`);
}
