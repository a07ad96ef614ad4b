/** Shared builders for the native engine tests: tiny models in temp dirs and step sequences. */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { SamplingOptions } from '../../proto/wire.js';
import type { StepSequence } from '../../workers/engines/engine.js';
import { makeTinyModel, type TinyArch } from '../../workers/models/index.js';

export const GREEDY: SamplingOptions = { temperature: 0 };

export async function withTempDir(): Promise<{ dir: string; cleanup: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'tandem-native-'));
  return { dir, cleanup: () => rm(dir, { recursive: true, force: true }) };
}

export async function tinyModel(root: string, arch: TinyArch, dtype: 'f32' | 'bf16', seed: number, ropeScaling?: 'yarn'): Promise<string> {
  const outDir = join(root, `${arch}-${dtype}-${seed}${ropeScaling !== undefined ? `-${ropeScaling}` : ''}`);
  await makeTinyModel({ arch, outDir, dtype, seed, ...(ropeScaling !== undefined ? { ropeScaling } : {}) });
  return outDir;
}

/** Block ids [first, first + n). */
export function blocks(first: number, n: number): Int32Array {
  return Int32Array.from({ length: n }, (_, i) => first + i);
}

export interface SeqSpec {
  seqId?: number;
  tokens: number[];
  startPos?: number;
  blockTable: Int32Array;
  sample?: boolean;
  sampling?: SamplingOptions;
  logprobs?: number;
  history?: number[];
  numPromptTokens?: number;
  requestSeed?: number;
}

export function seq(spec: SeqSpec): StepSequence {
  const s: StepSequence = {
    seqId: spec.seqId ?? 0,
    tokenIds: Int32Array.from(spec.tokens),
    startPos: spec.startPos ?? 0,
    blockTable: spec.blockTable,
    sample: spec.sample ?? true,
    sampling: spec.sampling ?? GREEDY,
    history: spec.history ?? spec.tokens,
    numPromptTokens: spec.numPromptTokens ?? spec.tokens.length,
    requestSeed: spec.requestSeed ?? 0,
  };
  if (spec.logprobs !== undefined) s.logprobs = spec.logprobs;
  return s;
}

export function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) throw new Error(`length ${a.length} != ${b.length}`);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

/** Deterministic token ids in [0, vocab). */
export function tokens(n: number, vocab: number, salt = 1): number[] {
  return Array.from({ length: n }, (_, i) => (i * 131 + salt * 17 + 7) % vocab);
}
