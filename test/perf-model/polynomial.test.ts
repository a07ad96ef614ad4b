/**
 * PolynomialPerfModel: the contract, then Dynamo's fit worked by hand.
 *
 *   prefillMs(t) = 4.209989e-7·t² + 1.518344e-2·t + 16.50142
 *     t = 1000: 0.4209989 + 15.18344 + 16.50142            = 32.1058589 ms
 *     t = 4096: 7.0631894810624 + 62.19137024 + 16.50142   = 85.75597972 ms
 *     t = 1:    0.0000004209989 + 0.01518344 + 16.50142    = 16.51660386 ms
 *   decodeMs(p) = max(1, −25.74·p² + 54.01·p + 5.74)       (no batch-size term)
 *     p = 0:    5.74 ms
 *     p = 0.25: −1.60875 + 13.5025 + 5.74                  = 17.63375 ms
 *     p = 0.5:  −6.435 + 27.005 + 5.74                     = 26.31 ms
 *     p = 1:    −25.74 + 54.01 + 5.74                      = 34.01 ms
 */
import { describe, expect, it } from 'vitest';
import { PolynomialPerfModel, stepTimeMs } from '../../perf-model/index.js';
import { perfModelContract } from './perf-model.contract.js';

perfModelContract('polynomial (Dynamo fit)', {
  make: () => new PolynomialPerfModel(),
  prefillAnchors: [
    [1, 16.5166038609989],
    [1000, 32.1058589],
    [4096, 85.75597972106239],
  ],
  decodeAnchors: [
    [0, 1, 5.74],
    [0.25, 1, 17.63375],
    [0.5, 8, 26.31],
    [1, 8, 34.01],
    [1, 256, 34.01],
  ],
});

describe('PolynomialPerfModel', () => {
  const m = new PolynomialPerfModel();

  it('prefill at t=0 is the intercept 16.50142 ms (the fixed cost of a forward pass)', () => {
    expect(m.prefillMs(0)).toBeCloseTo(16.50142, 9);
  });

  it('decode ignores batch size: 1 and 256 sequences at p=0.5 both take 26.31 ms', () => {
    expect(m.decodeMs(0.5, 1)).toBe(m.decodeMs(0.5, 256));
  });

  it('decode is floored at 1 ms: a fit of 2 − 100·p gives −48 at p=0.5, read as 1', () => {
    const steep = new PolynomialPerfModel(undefined, [0, -100, 2]);
    expect(steep.decodeMs(0.5, 1)).toBe(1);
  });

  it('a mixed step (t=1000, 4 decodes at p=0.5) pays 32.1058589 + 26.31 = 58.4158589 ms', () => {
    expect(stepTimeMs(m, { prefillTokens: 1000, numDecodeSeqs: 4, kvUsage: 0.5 })).toBeCloseTo(58.4158589, 6);
  });
});
