/**
 * FP8 through the Engine contract (NativeEngine on the CPU backend): make-tiny's three FP8
 * formats load and say what they are; `--quantization none` of an FP8 checkpoint and the FP8
 * model computed W8A16 give the same logits (both are the dequantized weights in f32), and W8A8
 * stays near them; `--quantization fp8` quantizes a bf16 checkpoint; an FP8 KV cache takes a
 * quarter of the f32 pool's bytes per token (twice the blocks of a bf16 pool in one budget), and
 * KV moves between an f32 pool and an e4m3 pool converting with the model's scales: the e4m3
 * pool's bytes after the move are the e4m3 encodings of the f32 values (in layer 0, the bytes its
 * own prefill writes).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { createNativeEngine } from '../../workers/engines/native/index.js';
import { FP8_FORMATS, makeTinyModel } from '../../workers/models/index.js';
import { f32ToE4m3 } from '../../workers/models/fp8.js';
import { blocks, prefillAndStepLogits, relL2, seq, tokens, withTempDir } from './helpers.js';

/**
 * W8A8 against the dequantized model, logits rel L2. Measured 0.107 (channel) to 0.138 (block) on
 * make-tiny's qwen3 (hidden 64, random weights): each of the 8 quantized GEMMs rounds its
 * activations to 3 mantissa bits (~3.6% RMS each) and a random 2-layer model keeps most of it.
 * The arithmetic itself is checked exactly in native/tests/fp8_checks.h (GEMM vs a double reference).
 */
const W8A8_BOUND = 0.2;



describe('FP8 on the native CPU engine', () => {
  let tmp: Awaited<ReturnType<typeof withTempDir>>;
  const dirs: Record<string, string> = {};
  let plain: string;

  beforeAll(async () => {
    tmp = await withTempDir();
    for (const format of FP8_FORMATS) {
      dirs[format] = join(tmp.dir, format);
      await makeTinyModel({ arch: 'qwen3', outDir: dirs[format], dtype: 'bf16', seed: 5, quantize: format });
    }
    plain = join(tmp.dir, 'plain');
    await makeTinyModel({ arch: 'qwen3', outDir: plain, dtype: 'bf16', seed: 5 });
  });
  afterAll(async () => {
    await tmp.cleanup();
  });

  for (const format of FP8_FORMATS) {
    it(`${format}: loads as FP8, W8A16 equals the dequantized checkpoint, W8A8 stays within ${W8A8_BOUND * 100}% (logits rel L2)`, async () => {
      const fp8 = await createNativeEngine({ modelDir: dirs[format]!, numBlocks: 8, threads: 2 });
      const w8a16 = await createNativeEngine({ modelDir: dirs[format]!, numBlocks: 8, threads: 2, fp8Compute: 'w8a16' });
      const dequantized = await createNativeEngine({ modelDir: dirs[format]!, numBlocks: 8, threads: 2, quantization: 'none' });
      try {
        expect(fp8.model.quantization).toMatch(/^(fp8|compressed-tensors fp8) weights per (128x128 block|32x32 block|channel|tensor)/);
        expect(fp8.deviceDescription).toContain('FP8 weights kept as e4m3');
        expect(dequantized.model.quantization).toContain('dequantized at load');
        const [a, b, c] = [await prefillAndStepLogits(fp8), await prefillAndStepLogits(w8a16), await prefillAndStepLogits(dequantized)];
        expect(relL2(b, c)).toBeLessThan(1e-5);
        expect(relL2(a, c)).toBeLessThan(W8A8_BOUND);
        expect(relL2(a, c)).toBeGreaterThan(0); // the activations were quantized
      } finally {
        await Promise.all([fp8.close(), w8a16.close(), dequantized.close()]);
      }
    });
  }

  it('--quantization fp8 quantizes a bf16 checkpoint (per channel, dynamic per token) close to it', async () => {
    const q = await createNativeEngine({ modelDir: plain, numBlocks: 8, threads: 2, quantization: 'fp8' });
    const ref = await createNativeEngine({ modelDir: plain, numBlocks: 8, threads: 2 });
    try {
      expect(q.model.quantization).toBe('fp8 (quantized at load) weights per channel, activations dynamic per token');
      expect(ref.model.quantization).toBe('none');
      const d = relL2(await prefillAndStepLogits(q), await prefillAndStepLogits(ref));
      expect(d).toBeGreaterThan(0);
      expect(d).toBeLessThan(W8A8_BOUND);
    } finally {
      await Promise.all([q.close(), ref.close()]);
    }
  });

  it('an FP8 KV cache: a quarter of the f32 bytes per token, twice the bf16 blocks in one budget, and the layout says fp8_e4m3', async () => {
    const budget = 1 << 20;
    const [f32, bf16, fp8] = await Promise.all(
      (['auto', 'bf16', 'fp8'] as const).map((kvCacheDtype) => createNativeEngine({ modelDir: plain, memoryBudgetBytes: budget, threads: 1, kvCacheDtype })),
    );
    try {
      expect([f32!.model.kvDtype, bf16!.model.kvDtype, fp8!.model.kvDtype]).toEqual(['f32', 'bf16', 'fp8_e4m3']);
      expect(fp8!.info.kvBytesPerToken * 4).toBe(f32!.info.kvBytesPerToken);
      expect(fp8!.info.numBlocks).toBe(2 * bf16!.info.numBlocks);
      expect(fp8!.kvLayoutName).toMatch(/;fp8_e4m3$/);
      expect(fp8!.deviceDescription).toContain('KV cache fp8_e4m3');
      // Close to the f32 pool's logits: e4m3 keeps 3 mantissa bits of K and V.
      const d = relL2(await prefillAndStepLogits(fp8!), await prefillAndStepLogits(f32!));
      expect(d).toBeGreaterThan(0);
      expect(d).toBeLessThan(0.1);
    } finally {
      await Promise.all([f32!.close(), bf16!.close(), fp8!.close()]);
    }
  });

  it('KV moves from an f32 pool into an e4m3 pool as e4m3 encodings of the f32 values; layer 0 as the e4m3 pool writes it', async () => {
    const src = await createNativeEngine({ modelDir: plain, numBlocks: 8, blockSize: 16, threads: 1 });
    const dst = await createNativeEngine({ modelDir: plain, numBlocks: 8, blockSize: 16, threads: 1, kvCacheDtype: 'fp8' });
    try {
      expect(dst.model.kvScales.every((s) => s === 1)).toBe(true); // no k_scale / v_scale in make-tiny
      const prompt = tokens(20, 512);
      await src.step({ sequences: [seq({ tokens: prompt, blockTable: blocks(0, 2), sample: false })] });
      await dst.step({ sequences: [seq({ tokens: prompt, blockTable: blocks(4, 2), sample: false })] });
      const moved = new Uint8Array(2 * src.model.kvBytesPerBlock);
      await src.kvReadBlocks(Int32Array.from([0, 1]), moved);
      await dst.kvWriteBlocks(Int32Array.from([0, 1]), moved, src.kvCopyLayout);
      const srcF32 = new Float32Array(moved.buffer, moved.byteOffset, moved.byteLength / 4);
      const pool = new Uint8Array(dst.kvPool());
      const block = dst.model.kvBytesPerBlock;
      const row = dst.model.kvBytesPerToken / dst.model.numLayers / 2; // e4m3: one byte per element
      // Block layout [layer][k|v][slot][row]; only the 20 written tokens count.
      for (let b = 0; b < 2; b++) {
        const slots = Math.min(16, 20 - 16 * b);
        for (let layer = 0; layer < dst.model.numLayers; layer++) {
          for (let kv = 0; kv < 2; kv++) {
            const at = (layer * 2 + kv) * 16 * row;
            const got = pool.subarray(b * block + at, b * block + at + slots * row);
            const f32 = srcF32.subarray((b * block + at), (b * block + at) + slots * row); // f32 block = 4x the bytes, same element order
            expect(Array.from(got)).toEqual(Array.from(f32, (v) => f32ToE4m3(v)));
            // Layer 0 saw no attention yet, so the e4m3 pool's own prefill wrote the same bytes;
            // later layers differ there by the FP8 cache's effect on the earlier layers' outputs.
            if (layer === 0) {
              const own = pool.subarray((4 + b) * block + at, (4 + b) * block + at + slots * row);
              expect(Buffer.from(got).equals(Buffer.from(own))).toBe(true);
            }
          }
        }
      }
    } finally {
      await Promise.all([src.close(), dst.close()]);
    }
  });
});
