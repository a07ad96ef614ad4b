/**
 * FP8 E4M3 in TypeScript (workers/models/fp8.ts) against a table written from the OCP 8-bit
 * floating point spec (E4M3: bias 7, no infinities, NaN = S.1111.111, largest finite 448,
 * subnormals m x 2^-9), a brute-force nearest-value search, and make-tiny's FP8 checkpoints:
 * every format's tensors, scales and config, each weight within one e4m3 rounding of the draw
 * the unquantized model has.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FP8_FORMATS, SafetensorsFile, e4m3ToF32, f32ToE4m3, makeTinyModel } from '../../workers/models/index.js';

/** The spec's value of a code, from the definition. */
function specValue(b: number): number {
  const s = b & 0x80 ? -1 : 1;
  const e = (b >> 3) & 15;
  const m = b & 7;
  if (e === 15 && m === 7) return Number.NaN;
  return s * (e === 0 ? (m / 8) * 2 ** -6 : (1 + m / 8) * 2 ** (e - 7));
}

describe('e4m3 codec', () => {
  it('decodes the spec table: zero, subnormals, the normal range, NaN', () => {
    const table: Array<[number, number]> = [
      [0x00, 0], [0x01, 2 ** -9], [0x07, 7 * 2 ** -9], [0x08, 2 ** -6], [0x38, 1], [0x39, 1.125], [0x40, 2],
      [0x77, 240], [0x78, 256], [0x7e, 448], [0xb8, -1], [0xfe, -448],
    ];
    for (const [code, value] of table) {
      expect(e4m3ToF32(code), `0x${code.toString(16)}`).toBe(value);
      expect(f32ToE4m3(value), `${value}`).toBe(code);
    }
    expect(Object.is(e4m3ToF32(0x80), -0)).toBe(true);
    expect(e4m3ToF32(0x7f)).toBeNaN();
    expect(e4m3ToF32(0xff)).toBeNaN();
  });

  it('every code decodes to the spec value and every finite code round-trips', () => {
    for (let c = 0; c < 256; c++) {
      const want = specValue(c);
      if (Number.isNaN(want)) continue;
      expect(e4m3ToF32(c)).toBe(want);
      expect(f32ToE4m3(want)).toBe(c);
    }
  });

  it('rounds to nearest even, across the subnormal boundary and into zero, and saturates', () => {
    expect(f32ToE4m3(1.0625)).toBe(0x38); // tie: even
    expect(f32ToE4m3(1.1875)).toBe(0x3a); // tie: even
    expect(f32ToE4m3(2 ** -10)).toBe(0x00); // half the smallest subnormal: even zero
    expect(f32ToE4m3(3 * 2 ** -10)).toBe(0x02);
    expect(f32ToE4m3(7.5 * 2 ** -9)).toBe(0x08); // largest subnormal | smallest normal: even
    expect(f32ToE4m3(-(2 ** -12))).toBe(0x80); // negative zero
    expect(f32ToE4m3(460)).toBe(0x7e);
    expect(f32ToE4m3(464)).toBe(0x7e); // saturates: 480 is not finite in e4m3
    expect(f32ToE4m3(1e30)).toBe(0x7e);
    expect(f32ToE4m3(Number.POSITIVE_INFINITY)).toBe(0x7e);
    expect(f32ToE4m3(Number.NEGATIVE_INFINITY)).toBe(0xfe);
    expect(f32ToE4m3(Number.NaN) & 0x7f).toBe(0x7f);
  });

  it('matches a nearest-value search (ties to even) over random values of every magnitude', () => {
    let x = 12345;
    const next = () => {
      x = (Math.imul(x, 1103515245) + 12345) >>> 0;
      return x / 2 ** 32;
    };
    const f32 = new Float32Array(1);
    for (let i = 0; i < 5000; i++) {
      f32[0] = (next() * 2 - 1) * 2 ** (next() * 24 - 14);
      const v = f32[0];
      let best = 0;
      let bestD = Number.POSITIVE_INFINITY;
      for (let c = 0; c <= 0x7e; c++) {
        const d = Math.abs(specValue(c) - Math.abs(v));
        if (d < bestD || (d === bestD && c % 2 === 0)) {
          best = c;
          bestD = d;
        }
      }
      if (Math.abs(v) >= 448) best = 0x7e;
      expect(f32ToE4m3(v), `${v}`).toBe(best | (v < 0 || Object.is(v, -0) ? 0x80 : 0));
    }
  });
});

describe('make-tiny --quantize', () => {
  let dir: string;
  let plain: SafetensorsFile;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tandem-fp8-tiny-'));
    await makeTinyModel({ arch: 'llama', outDir: join(dir, 'plain'), dtype: 'f32', seed: 3 });
    plain = await SafetensorsFile.read(join(dir, 'plain', 'model.safetensors'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const scaleOf: Record<(typeof FP8_FORMATS)[number], { suffix: string; shape: (rows: number, cols: number) => number[]; method: string }> = {
    'fp8-block': { suffix: 'weight_scale_inv', shape: (r, c) => [Math.ceil(r / 32), Math.ceil(c / 32)], method: 'fp8' },
    'fp8-channel': { suffix: 'weight_scale', shape: (r) => [r, 1], method: 'compressed-tensors' },
    'fp8-tensor': { suffix: 'weight_scale', shape: () => [], method: 'fp8' },
  };

  for (const format of FP8_FORMATS) {
    it(`${format}: linear layers e4m3 with scales of the format's shape, each weight within one e4m3 rounding of the f32 draw`, async () => {
      const out = join(dir, format);
      const info = await makeTinyModel({ arch: 'llama', outDir: out, dtype: 'f32', seed: 3, quantize: format });
      expect(info.quantize).toBe(format);
      const config = JSON.parse(await readFile(join(out, 'config.json'), 'utf8')) as { quantization_config: { quant_method: string; weight_block_size?: number[] } };
      expect(config.quantization_config.quant_method).toBe(scaleOf[format].method);
      if (format === 'fp8-block') expect(config.quantization_config.weight_block_size).toEqual([32, 32]);
      const st = await SafetensorsFile.read(join(out, 'model.safetensors'));
      // Embeddings, norms and the LM head are untouched.
      expect(st.info('model.embed_tokens.weight').dtype).toBe('F32');
      expect(st.info('lm_head.weight').dtype).toBe('F32');
      expect(st.info('model.norm.weight').dtype).toBe('F32');
      const name = 'model.layers.1.mlp.down_proj.weight';
      const [rows, cols] = st.info(name).shape as [number, number];
      expect(st.info(name).dtype).toBe('F8_E4M3');
      const scale = st.info(name.replace('weight', scaleOf[format].suffix));
      expect(scale.shape).toEqual(scaleOf[format].shape(rows, cols));
      const q = st.raw(name);
      const s = st.float32(name.replace('weight', scaleOf[format].suffix));
      const w = plain.float32(name);
      const bn = format === 'fp8-block' ? 32 : format === 'fp8-channel' ? 1 : rows;
      const bk = format === 'fp8-block' ? 32 : cols;
      const kb = Math.ceil(cols / bk);
      let worst = 0;
      for (let r = 0; r < rows; r++) {
        for (let c = 0; c < cols; c++) {
          const sc = s[Math.floor(r / bn) * kb + Math.floor(c / bk)]!;
          const err = Math.abs(e4m3ToF32(q[r * cols + c]!) * sc - w[r * cols + c]!);
          // Half an e4m3 step: 2^-4 relative in the normal range, 2^-10 x scale below it.
          worst = Math.max(worst, err / Math.max(Math.abs(w[r * cols + c]!) / 16, sc * 2 ** -10));
        }
      }
      expect(worst).toBeLessThanOrEqual(1.0001);
    });
  }
});
