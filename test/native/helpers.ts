/** Shared builders for the native engine tests: tiny models in temp dirs, step sequences, and the logits comparisons (prefill + one step, max abs diff, relative L2). */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { SamplingOptions } from '../../proto/wire.js';
import type { StepSequence } from '../../workers/engines/engine.js';
import type { NativeEngine } from '../../workers/engines/native/index.js';
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

/** ||a − b|| / ||b||: relative L2 of `a` against the reference `b`. */
export function relL2(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let num = 0;
  let den = 0;
  for (let i = 0; i < a.length; i++) {
    num += (a[i]! - b[i]!) ** 2;
    den += b[i]! ** 2;
  }
  return Math.sqrt(num / den);
}

/** Logits of a 9-token prefill, and of one decode step after it (two steps on a fresh engine). */
export async function prefillAndStepLogits(engine: NativeEngine): Promise<Float32Array> {
  const prompt = tokens(9, 512);
  const a = await engine.stepWithLogits({ sequences: [seq({ tokens: prompt, blockTable: blocks(0, 2) })] });
  const b = await engine.stepWithLogits({ sequences: [seq({ tokens: [7], startPos: 9, blockTable: blocks(0, 2), history: [...prompt, 7] })] });
  return Float32Array.from([...a.logits, ...b.logits]);
}

/** Deterministic token ids in [0, vocab). */
export function tokens(n: number, vocab: number, salt = 1): number[] {
  return Array.from({ length: n }, (_, i) => (i * 131 + salt * 17 + 7) % vocab);
}
