/**
 * `--quantization fp8` on a mixture of experts (CPU backend): every expert's gate/up and down, and
 * Qwen2-MoE's shared expert, are quantized at load exactly as the dense linear layers are (e4m3 per
 * row, dynamic per-token activations); the router and the shared expert's gate stay as they are.
 *  - W8A16 equals a reference checkpoint whose every linear layer (experts included) was rounded
 *    to e4m3 x its per-row scale in f32 (workers/models/fp8.ts quantizeWeight) and loaded
 *    unquantized: so the experts the engine computes are the quantized ones. With the experts
 *    left bf16 (the bug this guards) the logits differ by percents, not 1e-5.
 *  - W8A8 stays within fp8-engine.test.ts's bound of the unquantized model.
 */
import { cp, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createNativeEngine, type NativeEngine } from '../../workers/engines/native/index.js';
import { makeTinyModel } from '../../workers/models/index.js';
import { e4m3ToF32, isQuantizedLinear, quantizeWeight } from '../../workers/models/fp8.js';
import { encodeSafetensors, SafetensorsFile, type TensorData } from '../../workers/models/safetensors.js';
import { blocks, seq, tokens, withTempDir } from './helpers.js';

/** As fp8-engine.test.ts: W8A8 against the unquantized model, logits rel L2. */
const W8A8_BOUND = 0.2;

/** Logits of a 9-token prefill, and of one decode step after it. */
async function logitsOf(engine: NativeEngine): Promise<Float32Array> {
  const prompt = tokens(9, 512);
  const a = await engine.stepWithLogits({ sequences: [seq({ tokens: prompt, blockTable: blocks(0, 2) })] });
  const b = await engine.stepWithLogits({ sequences: [seq({ tokens: [7], startPos: 9, blockTable: blocks(0, 2), history: [...prompt, 7] })] });
  return Float32Array.from([...a.logits, ...b.logits]);
}

function relL2(a: Float32Array, b: Float32Array): number {
  let num = 0;
  let den = 0;
  for (let i = 0; i < a.length; i++) {
    num += (a[i]! - b[i]!) ** 2;
    den += b[i]! ** 2;
  }
  return Math.sqrt(num / den);
}

/** A copy of `from` whose linear layers are their per-row e4m3 rounding, stored as f32 (everything else unchanged). */
async function roundedCopy(from: string, to: string): Promise<number> {
  await cp(from, to, { recursive: true });
  const file = SafetensorsFile.fromBytes(await readFile(join(from, 'model.safetensors')));
  let experts = 0;
  const out: TensorData[] = file.names.map((name) => {
    const info = file.info(name);
    if (!isQuantizedLinear(name)) return { name, dtype: info.dtype, shape: info.shape, data: file.raw(name) };
    if (name.includes('.experts.')) experts++;
    const [rows, cols] = info.shape as [number, number];
    const [q, s] = quantizeWeight(name, file.float32(name), rows, cols, 'fp8-channel');
    const scales = new Float32Array(s!.data.buffer.slice(s!.data.byteOffset, s!.data.byteOffset + s!.data.byteLength));
    const values = new Float32Array(rows * cols);
    for (let i = 0; i < values.length; i++) values[i] = Math.fround(e4m3ToF32(q!.data[i]!) * scales[Math.floor(i / cols)]!);
    return { name, dtype: 'F32', shape: [rows, cols], data: new Uint8Array(values.buffer) };
  });
  await writeFile(join(to, 'model.safetensors'), encodeSafetensors(out));
  return experts;
}

describe('--quantization fp8 on a mixture of experts (native CPU engine)', () => {
  let tmp: Awaited<ReturnType<typeof withTempDir>>;

  beforeAll(async () => {
    tmp = await withTempDir();
  });
  afterAll(async () => {
    await tmp.cleanup();
  });

  // qwen3_moe: a dense layer among sparse ones; qwen2_moe: a shared expert with its sigmoid gate.
  for (const arch of ['qwen3_moe', 'qwen2_moe'] as const) {
    it(`${arch}: the experts are quantized like the dense layers (W8A16 = the e4m3-rounded checkpoint), W8A8 near the bf16 model`, async () => {
      const plain = join(tmp.dir, `${arch}-plain`);
      const rounded = join(tmp.dir, `${arch}-rounded`);
      await makeTinyModel({ arch, outDir: plain, dtype: 'bf16', seed: 5 });
      expect(await roundedCopy(plain, rounded)).toBeGreaterThan(0);
      const w8a16 = await createNativeEngine({ modelDir: plain, numBlocks: 8, threads: 2, quantization: 'fp8', fp8Compute: 'w8a16' });
      const w8a8 = await createNativeEngine({ modelDir: plain, numBlocks: 8, threads: 2, quantization: 'fp8' });
      const ref = await createNativeEngine({ modelDir: rounded, numBlocks: 8, threads: 2 });
      const bf16 = await createNativeEngine({ modelDir: plain, numBlocks: 8, threads: 2 });
      try {
        expect(w8a8.model.quantization).toBe('fp8 (quantized at load) weights per channel, activations dynamic per token');
        expect(ref.model.quantization).toBe('none');
        const reference = await logitsOf(ref);
        expect(relL2(await logitsOf(w8a16), reference)).toBeLessThan(1e-5);
        const d = relL2(await logitsOf(w8a8), await logitsOf(bf16));
        expect(d).toBeGreaterThan(0);
        expect(d).toBeLessThan(W8A8_BOUND);
        // The rounding is visible: the bf16 model is not the reference.
        expect(relL2(await logitsOf(bf16), reference)).toBeGreaterThan(1e-3);
      } finally {
        await Promise.all([w8a16.close(), w8a8.close(), ref.close(), bf16.close()]);
      }
    });
  }
});
