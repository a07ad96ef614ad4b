/**
 * Seeded pseudo-random numbers for the tiny model generator. xoshiro128** seeded through
 * splitmix32: fast, 32-bit only (no BigInt), and identical on every platform, so the same seed
 * always yields byte-identical weights.
 */
export class Prng {
  private s0: number;
  private s1: number;
  private s2: number;
  private s3: number;
  /** A second normal from the last Box-Muller pair, or NaN when none is cached. */
  private spareNormal = Number.NaN;

  constructor(seed: number) {
    let x = seed >>> 0;
    const next = (): number => {
      x = (x + 0x9e3779b9) >>> 0;
      let z = x;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.s0 = next();
    this.s1 = next();
    this.s2 = next();
    this.s3 = next();
  }

  nextUint32(): number {
    const result = Math.imul(rotl(Math.imul(this.s1, 5) >>> 0, 7), 9) >>> 0;
    const t = (this.s1 << 9) >>> 0;
    this.s2 = (this.s2 ^ this.s0) >>> 0;
    this.s3 = (this.s3 ^ this.s1) >>> 0;
    this.s1 = (this.s1 ^ this.s2) >>> 0;
    this.s0 = (this.s0 ^ this.s3) >>> 0;
    this.s2 = (this.s2 ^ t) >>> 0;
    this.s3 = rotl(this.s3, 11);
    return result;
  }

  /** Uniform in (0, 1): never 0, so Math.log in Box-Muller stays finite. */
  nextUnit(): number {
    return (this.nextUint32() + 0.5) / 4294967296;
  }

  /** Standard normal (Box-Muller, both values used). */
  nextNormal(): number {
    if (!Number.isNaN(this.spareNormal)) {
      const v = this.spareNormal;
      this.spareNormal = Number.NaN;
      return v;
    }
    const r = Math.sqrt(-2 * Math.log(this.nextUnit()));
    const theta = 2 * Math.PI * this.nextUnit();
    this.spareNormal = r * Math.sin(theta);
    return r * Math.cos(theta);
  }

  /** Fill `out` with mean + std * N(0, 1). */
  fillNormal(out: Float32Array, mean: number, std: number): Float32Array {
    for (let i = 0; i < out.length; i++) out[i] = mean + std * this.nextNormal();
    return out;
  }
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}
