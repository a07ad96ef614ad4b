import { describe, expect, it } from 'vitest';
import {
  ModelFormatError,
  SafetensorsFile,
  bf16BitsToF32,
  encodeBf16,
  encodeSafetensors,
  f32ToBf16Bits,
  parseSafetensorsHeader,
} from '../../workers/models/index.js';

describe('bf16', () => {
  it('is the top half of f32, rounded to nearest even', () => {
    expect(f32ToBf16Bits(1.0)).toBe(0x3f80);
    expect(f32ToBf16Bits(-2.0)).toBe(0xc000);
    // 1 + 2^-8 is exactly halfway between bf16 1.0 (even) and 1.0078125 (odd): ties go to even.
    expect(f32ToBf16Bits(1 + 2 ** -8)).toBe(0x3f80);
    // 1.0078125 + 2^-8 is halfway between odd 0x3f81 and even 0x3f82: rounds up to even.
    expect(f32ToBf16Bits(1.0078125 + 2 ** -8)).toBe(0x3f82);
    // just above the halfway point rounds up
    expect(f32ToBf16Bits(1 + 2 ** -8 + 2 ** -12)).toBe(0x3f81);
    expect(f32ToBf16Bits(Infinity)).toBe(0x7f80);
    expect(Number.isNaN(bf16BitsToF32(f32ToBf16Bits(Number.NaN)))).toBe(true);
    // the largest finite f32 overflows to +inf in bf16, as in PyTorch
    expect(f32ToBf16Bits(3.4028234663852886e38)).toBe(0x7f80);
  });

  it('encodes little-endian', () => {
    expect([...encodeBf16(new Float32Array([1.0, -2.0]))]).toEqual([0x80, 0x3f, 0x00, 0xc0]);
  });
});

describe('safetensors', () => {
  const tensors = [
    { name: 'b', dtype: 'F32' as const, shape: [2], data: new Uint8Array(new Float32Array([1.5, -3]).buffer) },
    { name: 'a', dtype: 'BF16' as const, shape: [1, 3], data: encodeBf16(new Float32Array([0.5, 2, -1])) },
  ];

  it('round-trips tensors; the writer sorts by name and aligns the data section to 8', () => {
    const bytes = encodeSafetensors(tensors);
    const file = SafetensorsFile.fromBytes(bytes);
    expect(file.names).toEqual(['a', 'b']);
    expect(file.info('a')).toEqual({ dtype: 'BF16', shape: [1, 3], dataOffsets: [0, 6] });
    expect(file.info('b').dataOffsets).toEqual([6, 14]);
    expect([...file.float32('a')]).toEqual([0.5, 2, -1]);
    expect([...file.float32('b')]).toEqual([1.5, -3]);
    expect(file.header.dataStart % 8).toBe(0);
    expect(encodeSafetensors([...tensors].reverse()).equals(bytes)).toBe(true);
  });

  it('rejects data whose length does not match shape and dtype', () => {
    expect(() => encodeSafetensors([{ name: 'x', dtype: 'F32', shape: [3], data: new Uint8Array(8) }])).toThrow(ModelFormatError);
  });

  it('rejects truncated files, holes between tensors and absurd header lengths', () => {
    const bytes = encodeSafetensors(tensors);
    expect(() => SafetensorsFile.fromBytes(bytes.subarray(0, bytes.length - 1))).toThrow(/data section/);
    const huge = Buffer.alloc(16);
    huge.writeBigUInt64LE(1n << 40n, 0);
    expect(() => parseSafetensorsHeader(huge)).toThrow(ModelFormatError);
    const header = JSON.stringify({ x: { dtype: 'F32', shape: [1], data_offsets: [4, 8] } });
    const holed = Buffer.alloc(8 + header.length + 8);
    holed.writeBigUInt64LE(BigInt(header.length), 0);
    holed.write(header, 8);
    expect(() => parseSafetensorsHeader(holed, holed.length)).toThrow(/does not start/);
    const caught = (() => {
      try {
        parseSafetensorsHeader(holed, holed.length);
      } catch (e) {
        return e as ModelFormatError;
      }
      return undefined;
    })();
    expect(caught?.code).toBe('config_invalid');
  });
});
