/** bf16 bits of an f32 rounded to nearest even (NaN aside), as the native kernels round. */
export function round_bf16(f: number): number {
  const u = new Uint32Array(new Float32Array([f]).buffer)[0]!;
  return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
}
