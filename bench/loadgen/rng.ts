/**
 * Seeded randomness for workloads and arrivals. Every random choice in a run flows from
 * `--seed`, so two runs with the same flags send the same prompts at the same offsets.
 * Streams are forked by a salt so that, for example, adding warm-up requests does not shift
 * the prompts of the measured requests.
 */

/** splitmix64-style mixing on 32-bit halves: turns (seed, salt) into a well-spread state. */
function mix32(a: number): number {
  a = Math.imul(a ^ (a >>> 16), 0x85ebca6b);
  a = Math.imul(a ^ (a >>> 13), 0xc2b2ae35);
  return (a ^ (a >>> 16)) >>> 0;
}

export class Rng {
  private s0: number;
  private s1: number;
  private s2: number;
  private s3: number;
  private spareNormal: number | undefined;

  constructor(seed: number, salt = 0) {
    const base = mix32((seed | 0) ^ mix32(salt | 0) ^ 0x9e3779b9);
    this.s0 = mix32(base + 1) | 1;
    this.s1 = mix32(base + 2);
    this.s2 = mix32(base + 3);
    this.s3 = mix32(base + 4);
  }

  /** An independent stream derived from this generator's seed material and `salt`. */
  fork(salt: number): Rng {
    return new Rng(this.nextUint32(), salt);
  }

  /** xoshiro128** step. */
  nextUint32(): number {
    const result = Math.imul(rotl(Math.imul(this.s1, 5), 7), 9) >>> 0;
    const t = this.s1 << 9;
    this.s2 ^= this.s0;
    this.s3 ^= this.s1;
    this.s1 ^= this.s2;
    this.s0 ^= this.s3;
    this.s2 ^= t;
    this.s3 = rotl(this.s3, 11);
    return result;
  }

  /** Uniform in [0, 1). */
  next(): number {
    return this.nextUint32() / 4294967296;
  }

  /** Uniform integer in [lo, hi). */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo));
  }

  /** Normal(mean, std) by Box-Muller; std 0 returns the mean exactly. */
  normal(mean: number, std: number): number {
    if (std <= 0) return mean;
    if (this.spareNormal !== undefined) {
      const z = this.spareNormal;
      this.spareNormal = undefined;
      return mean + std * z;
    }
    let u = 0;
    while (u === 0) u = this.next();
    const v = this.next();
    const r = Math.sqrt(-2 * Math.log(u));
    this.spareNormal = r * Math.sin(2 * Math.PI * v);
    return mean + std * r * Math.cos(2 * Math.PI * v);
  }

  /** Exponential with the given rate (events per unit); the gap of a Poisson process. */
  exponential(rate: number): number {
    let u = 0;
    while (u === 0) u = this.next();
    return -Math.log(u) / rate;
  }

  /** In-place Fisher-Yates shuffle. */
  shuffle<T>(items: T[]): T[] {
    for (let i = items.length - 1; i > 0; i--) {
      const j = this.int(0, i + 1);
      const tmp = items[i] as T;
      items[i] = items[j] as T;
      items[j] = tmp;
    }
    return items;
  }
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}

/** A length drawn from Normal(mean, std), rounded and clamped to [min, max]. */
export function sampleLength(rng: Rng, mean: number, std: number, min = 1, max = Number.MAX_SAFE_INTEGER): number {
  const v = Math.round(rng.normal(mean, std));
  return Math.min(max, Math.max(min, v));
}
