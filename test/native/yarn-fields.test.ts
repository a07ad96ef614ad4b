/**
 * The YaRN fields of `rope_scaling` beyond the plain case the goldens pin (qwen3-yarn-f32; issue
 * 36; native/src/core/model_config.cc parse_yarn / yarn_inv_freq), on the native CPU engine.
 * Expectations come from transformers' `_compute_yarn_parameters`, not from the engine:
 *  - attention factor (the cos/sin scale, so every q.k score scales by its square):
 *    `attention_factor` when given; else, when both `mscale` and `mscale_all_dim` are set,
 *    get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim); else get_mscale(factor)
 *    = 0.1 ln(factor) + 1. So an explicit attention_factor equal to 0.1 ln 4 + 1 leaves the
 *    logits as plain YaRN's, one of 1 changes them; mscale == mscale_all_dim gives 1 (DeepSeek's
 *    0.707/0.707); mscale or mscale_all_dim alone changes nothing.
 *  - `truncate` (default true) floors/ceils the correction range before clamping it to
 *    [0, head_dim - 1]: false changes the ramp of the tiny config (range 1.08..5.10 vs 1..6), and
 *    changes nothing when both ends are clamped anyway.
 *  - `factor` below 1 is refused naming the field; exactly 1 is accepted and is plain RoPE
 *    (interpolated = extrapolated frequencies, attention factor 1).
 * A multi-token prompt throughout: at one position the single attention weight is 1 whatever the
 * scores' scale, and position 0's rotation is the identity whatever the frequencies.
 */
import { cp, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NativeEngineError } from '../../native/index.js';
import { createNativeEngine } from '../../workers/engines/native/index.js';
import { TINY_DIMS } from '../../workers/models/index.js';
import { TINY_YARN } from '../../workers/models/tiny-arch.js';
import { blocks, maxAbsDiff, seq, tinyModel, tokens, withTempDir } from './helpers.js';

type Config = Record<string, unknown>;

const PROMPT = 20;
const SAME = 1e-6;
const DIFFERENT = 1e-3;

/** transformers' get_mscale. */
function getMscale(scale: number, mscale = 1): number {
  return scale <= 1 ? 1 : 0.1 * mscale * Math.log(scale) + 1;
}

/** transformers' _compute_yarn_parameters inverse frequencies (in f64: only used to tell configs apart). */
function yarnInvFreq(dim: number, base: number, rs: { factor: number; original_max_position_embeddings: number; beta_fast: number; beta_slow: number; truncate?: boolean }): number[] {
  const correctionDim = (rot: number): number => (dim * Math.log(rs.original_max_position_embeddings / (rot * 2 * Math.PI))) / (2 * Math.log(base));
  let low = correctionDim(rs.beta_fast);
  let high = correctionDim(rs.beta_slow);
  if (rs.truncate ?? true) {
    low = Math.floor(low);
    high = Math.ceil(high);
  }
  low = Math.max(low, 0);
  high = Math.min(high, dim - 1);
  if (low === high) high += 0.001;
  return Array.from({ length: dim / 2 }, (_, i) => {
    const posFreq = base ** ((2 * i) / dim);
    const ramp = Math.min(1, Math.max(0, (i - low) / (high - low)));
    const extrapolationFactor = 1 - ramp;
    return (1 / (rs.factor * posFreq)) * (1 - extrapolationFactor) + (1 / posFreq) * extrapolationFactor;
  });
}

describe('YaRN rope_scaling fields (native CPU engine, tiny Qwen3)', () => {
  let tmp: Awaited<ReturnType<typeof withTempDir>>;
  let plain: string;
  let baseConfig: Config;
  const cache = new Map<string, Float32Array>();
  let n = 0;

  beforeAll(async () => {
    tmp = await withTempDir();
    plain = await tinyModel(tmp.dir, 'qwen3', 'f32', 41, 'yarn');
    baseConfig = JSON.parse(await readFile(join(plain, 'config.json'), 'utf8')) as Config;
    expect(baseConfig.rope_scaling).toEqual(TINY_YARN);
    expect(baseConfig.rope_theta).toBe(baseConfigTheta());
    expect(baseConfig.head_dim).toBe(TINY_DIMS.qwen3.headDim);
  });
  afterAll(async () => {
    await tmp.cleanup();
  });

  /** A copy of the tiny YaRN model with rope_scaling replaced (null: no scaling). */
  async function withRope(ropeScaling: Config | null): Promise<string> {
    const dir = join(tmp.dir, `v${n++}`);
    await rm(dir, { recursive: true, force: true });
    await cp(plain, dir, { recursive: true });
    await writeFile(join(dir, 'config.json'), JSON.stringify({ ...baseConfig, rope_scaling: ropeScaling }, null, 2));
    return dir;
  }

  /** Logits of a 20-token prefill and one decode step after it, for rope_scaling = TINY_YARN + `fields`. */
  async function logits(fields: Config | null): Promise<Float32Array> {
    const key = JSON.stringify(fields);
    const have = cache.get(key);
    if (have !== undefined) return have;
    const engine = await createNativeEngine({ modelDir: await withRope(fields === null ? null : { ...TINY_YARN, ...fields }), numBlocks: 8, threads: 2 });
    try {
      const prompt = tokens(PROMPT, 512, 3);
      const a = await engine.stepWithLogits({ sequences: [seq({ tokens: prompt, blockTable: blocks(0, 2) })] });
      const b = await engine.stepWithLogits({ sequences: [seq({ tokens: [11], startPos: PROMPT, blockTable: blocks(0, 2), history: [...prompt, 11] })] });
      const out = Float32Array.from([...a.logits, ...b.logits]);
      expect(out.every(Number.isFinite)).toBe(true);
      cache.set(key, out);
      return out;
    } finally {
      await engine.close();
    }
  }

  const YARN = {}; // TINY_YARN as it is

  async function refusal(fields: Config): Promise<NativeEngineError> {
    const err = await createNativeEngine({ modelDir: await withRope({ ...TINY_YARN, ...fields }), numBlocks: 8, threads: 2 }).then(
      async (e) => {
        await e.close();
        return undefined;
      },
      (e: unknown) => e,
    );
    expect(err, `rope_scaling ${JSON.stringify(fields)} should be refused`).toBeInstanceOf(NativeEngineError);
    const e = err as NativeEngineError;
    expect(e.code).toBe('config_invalid');
    expect(e.message.trim().split('\n'), e.message).toHaveLength(1);
    return e;
  }

  it('plain YaRN is not plain RoPE (the comparisons below can see the rope)', async () => {
    expect(maxAbsDiff(await logits(YARN), await logits(null))).toBeGreaterThan(DIFFERENT);
  });

  describe('attention_factor', () => {
    it('equal to the default 0.1 ln(factor) + 1: plain YaRN logits; 1: different ones', async () => {
      const plainYarn = await logits(YARN);
      expect(maxAbsDiff(await logits({ attention_factor: getMscale(TINY_YARN.factor) }), plainYarn)).toBeLessThanOrEqual(SAME);
      expect(maxAbsDiff(await logits({ attention_factor: 1 }), plainYarn)).toBeGreaterThan(DIFFERENT);
    });

    it('takes precedence over mscale / mscale_all_dim', async () => {
      expect(maxAbsDiff(await logits({ attention_factor: 1, mscale: 2, mscale_all_dim: 1 }), await logits({ attention_factor: 1 }))).toBeLessThanOrEqual(SAME);
    });

    it.each([0, -1])('attention_factor %d is config_invalid naming rope_scaling', async (v) => {
      const err = await refusal({ attention_factor: v });
      expect(err.message).toContain("field 'rope_scaling' has invalid yarn parameters");
    });
  });

  describe('mscale / mscale_all_dim', () => {
    it("both equal (DeepSeek's 0.707): attention factor 1, as attention_factor 1 and unlike plain YaRN", async () => {
      const both = await logits({ mscale: 0.707, mscale_all_dim: 0.707 });
      expect(maxAbsDiff(both, await logits({ attention_factor: 1 }))).toBeLessThanOrEqual(SAME);
      expect(maxAbsDiff(both, await logits(YARN))).toBeGreaterThan(DIFFERENT);
    });

    it('mscale 2 over mscale_all_dim 1: get_mscale(4, 2) / get_mscale(4, 1), as that attention_factor', async () => {
      const af = getMscale(TINY_YARN.factor, 2) / getMscale(TINY_YARN.factor, 1);
      expect(af).toBeGreaterThan(1.1); // neither 1 nor plain YaRN's 1.139
      const ratio = await logits({ mscale: 2, mscale_all_dim: 1 });
      expect(maxAbsDiff(ratio, await logits({ attention_factor: af }))).toBeLessThanOrEqual(SAME);
      expect(maxAbsDiff(ratio, await logits(YARN))).toBeGreaterThan(DIFFERENT);
      expect(maxAbsDiff(ratio, await logits({ attention_factor: 1 }))).toBeGreaterThan(DIFFERENT);
    });

    it('either alone changes nothing (transformers uses them only as a pair)', async () => {
      const plainYarn = await logits(YARN);
      expect(maxAbsDiff(await logits({ mscale: 2 }), plainYarn)).toBeLessThanOrEqual(SAME);
      expect(maxAbsDiff(await logits({ mscale_all_dim: 2 }), plainYarn)).toBeLessThanOrEqual(SAME);
    });
  });

  describe('truncate', () => {
    const dim = TINY_DIMS.qwen3.headDim;
    const base = baseConfigTheta();

    it('false: an unrounded correction range, so different frequencies and logits; true is the default', async () => {
      // The formula says the ramp moves (1..6 rounded vs 1.08..5.10).
      const rounded = yarnInvFreq(dim, base, TINY_YARN);
      const exact = yarnInvFreq(dim, base, { ...TINY_YARN, truncate: false });
      expect(maxAbsDiff(rounded, exact) / Math.max(...rounded)).toBeGreaterThan(1e-3);
      const plainYarn = await logits(YARN);
      expect(maxAbsDiff(await logits({ truncate: false }), plainYarn)).toBeGreaterThan(DIFFERENT);
      expect(maxAbsDiff(await logits({ truncate: true }), plainYarn)).toBeLessThanOrEqual(SAME);
    });

    it('false changes nothing when both ends of the range are clamped (beta_fast 100, beta_slow 1e-10)', async () => {
      const clamped = { beta_fast: 100, beta_slow: 1e-10 };
      // Low end below 0 and high end above head_dim - 1 either way: the same frequencies.
      expect(yarnInvFreq(dim, base, { ...TINY_YARN, ...clamped, truncate: false })).toEqual(yarnInvFreq(dim, base, { ...TINY_YARN, ...clamped }));
      const a = await logits({ ...clamped, truncate: false });
      expect(maxAbsDiff(a, await logits(clamped))).toBeLessThanOrEqual(SAME);
      // ... and the clamped range is itself a different rope from the tiny one's.
      expect(maxAbsDiff(a, await logits(YARN))).toBeGreaterThan(DIFFERENT);
    });

    it('not a boolean: config_invalid naming the field', async () => {
      const err = await refusal({ truncate: 'no' });
      expect(err.message).toContain("field 'truncate' must be a boolean");
    });
  });

  describe('factor', () => {
    it.each([0.5, 0])('%d is config_invalid, one line naming rope_scaling.factor', async (factor) => {
      const err = await refusal({ factor });
      expect(err.message).toContain("field 'rope_scaling.factor' must be at least 1 for yarn");
      expect(err.message).toContain('config.json');
    });

    it('exactly 1 is accepted and is plain RoPE', async () => {
      expect(maxAbsDiff(await logits({ factor: 1 }), await logits(null))).toBeLessThanOrEqual(1e-5);
    });
  });

  function baseConfigTheta(): number {
    // buildConfigJson's Qwen rope_theta (the tiny YaRN model keeps it).
    return 1_000_000;
  }
});
