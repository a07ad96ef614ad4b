/**
 * Seeded randomness for tie-breaks and softmax sampling. Decisions must be reproducible in
 * tests and simulations, so the router never calls Math.random: it draws from an `Rng` it was
 * given. `SeededRng` is mulberry32: tiny, fast, and good enough for picking among workers.
 */
export interface Rng {
  /** Uniform in [0, 1). */
  next(): number;
}

export class SeededRng implements Rng {
  private state: number;

  constructor(seed: number) {
    this.state = seed >>> 0;
  }

  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
}
