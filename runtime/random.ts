/**
 * The one seeded random generator: xoshiro128** (32-bit state words, no BigInt), seeded through
 * splitmix32, identical on every platform. Everything that must reproduce from a seed draws
 * from it: the tiny model's weights (pinned by the golden fixtures' weight hashes), the
 * router's tie-breaks and softmax picks, the planner's synthetic traces and profiler prompts,
 * and `runtime bench`'s workloads and arrivals.
 *
 * A light public surface of runtime/ (imports nothing), so the router core and preprocessing
 * code can use it without loading the runtime (docs/design.md, "Public surfaces").
 */

/** What a consumer of randomness needs: uniform draws in [0, 1). The router takes this. */
export interface Rng {
  next(): number;
}

/** splitmix32's finalizer: spreads (seed, salt) into well-mixed bits. */
function mix32(z: number): number {
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
  return (z ^ (z >>> 16)) >>> 0;
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}

export class SeededRandom implements Rng {
  private s0: number;
  private s1: number;
  private s2: number;
  private s3: number;
  /** The second normal of the last Box-Muller pair, or NaN when none is cached. */
  private spareNormal = Number.NaN;

  /**
   * `salt` forks independent streams from one seed (salt 0 is the plain seed), so that, for
   * example, adding warm-up requests does not shift the prompts of the measured requests.
   */
  constructor(seed: number, salt = 0) {
    let x = (seed ^ (salt === 0 ? 0 : mix32(salt | 0))) >>> 0;
    const next = (): number => {
      x = (x + 0x9e3779b9) >>> 0;
      return mix32(x);
    };
    this.s0 = next();
    this.s1 = next();
    this.s2 = next();
    this.s3 = next();
  }

  /** An independent stream derived from this generator's next draw and `salt`. */
  fork(salt: number): SeededRandom {
    return new SeededRandom(this.nextUint32(), salt);
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

  /** Uniform in [0, 1). */
  next(): number {
    return this.nextUint32() / 4294967296;
  }

  /** Uniform in (0, 1): never 0, so a logarithm of it stays finite. */
  nextUnit(): number {
    return (this.nextUint32() + 0.5) / 4294967296;
  }

  /** Uniform integer in [lo, hi). */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo));
  }

  /** Normal(mean, std) by Box-Muller, both values of a pair used; std ≤ 0 returns the mean and draws nothing. */
  normal(mean = 0, std = 1): number {
    if (std <= 0) return mean;
    if (!Number.isNaN(this.spareNormal)) {
      const z = this.spareNormal;
      this.spareNormal = Number.NaN;
      return mean + std * z;
    }
    const r = Math.sqrt(-2 * Math.log(this.nextUnit()));
    const theta = 2 * Math.PI * this.nextUnit();
    this.spareNormal = r * Math.sin(theta);
    return mean + std * (r * Math.cos(theta));
  }

  /** Fill `out` with Normal(mean, std). */
  fillNormal(out: Float32Array, mean: number, std: number): Float32Array {
    for (let i = 0; i < out.length; i++) out[i] = this.normal(mean, std);
    return out;
  }

  /** Exponential with the given rate (events per unit): the gap of a Poisson process. */
  exponential(rate: number): number {
    return -Math.log(this.nextUnit()) / rate;
  }

  /** Poisson count with mean `lambda`: exact below 30, normal approximation above. */
  poisson(lambda: number): number {
    if (lambda <= 0) return 0;
    if (lambda > 30) return Math.max(0, Math.round(lambda + Math.sqrt(lambda) * this.normal()));
    const limit = Math.exp(-lambda);
    let k = 0;
    let p = this.next();
    while (p > limit) {
      k++;
      p *= this.next();
    }
    return k;
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
