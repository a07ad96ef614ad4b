/**
 * InterpolatedPerfModel (profile mode): the contract for both decode shapes, the interpolation
 * worked by hand, and the profile schema (version 1) with its file loader.
 *
 * 1-D profile: prefill tokens [128, 1024, 4096] → ms [18.4, 33.0, 95.1];
 *              decode kvUsage [0, 0.5, 1] → ms [5.7, 26.3, 34.0]
 *   prefill t=576  (halfway 128..1024): 18.4 + 14.6·(448/896)            = 25.7 ms
 *   prefill t=5632 (past 4096): last slope 62.1/3072 ms/token × 1536     → 95.1 + 31.05 = 126.15 ms
 *   prefill t=1    (below 128): held at the first point                  = 18.4 ms
 *   decode  p=0.25: 5.7 + 20.6·0.5 = 16.0 ms;  p=0.75: 26.3 + 7.7·0.5    = 30.15 ms
 *
 * Grid profile: decode kvUsage [0, 0.5, 1] × batchSize [1, 8, 64, 256]
 *   ms = [[5, 6, 9, 20], [8, 10, 15, 30], [10, 13, 22, 45]]
 *   p=0.25, batch=36 (halfway 8..64): row p=0 → 6 + 3·0.5 = 7.5; row p=0.5 → 10 + 5·0.5 = 12.5;
 *                                     halfway between rows                 = 10.0 ms
 *   batch 1024 (past 256) at p=1: held at the last column                  = 45 ms
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { InterpolatedPerfModel, PerfProfileError, loadPerfProfile, parsePerfProfile, perfModelFromProfile, type PerfProfile } from '../../perf-model/index.js';
import { perfModelContract } from './perf-model.contract.js';

/** Points deliberately unsorted: the schema allows any order. */
const LINEAR: PerfProfile = {
  version: 1,
  prefill: { tokens: [4096, 128, 1024], ms: [95.1, 18.4, 33.0] },
  decode: { kvUsage: [0, 0.5, 1], ms: [5.7, 26.3, 34.0] },
};

const GRID: PerfProfile = {
  version: 1,
  prefill: { tokens: [16, 512, 8192], ms: [12, 20, 140] },
  decode: {
    kvUsage: [0, 0.5, 1],
    batchSize: [1, 8, 64, 256],
    ms: [
      [5, 6, 9, 20],
      [8, 10, 15, 30],
      [10, 13, 22, 45],
    ],
  },
};

perfModelContract('interpolated (1-D decode profile)', {
  make: () => new InterpolatedPerfModel(LINEAR),
  prefillAnchors: [
    [128, 18.4],
    [1024, 33.0],
    [4096, 95.1],
  ],
  decodeAnchors: [
    [0, 1, 5.7],
    [0.5, 1, 26.3],
    [1, 1, 34.0],
    [0.5, 64, 26.3],
  ],
});

perfModelContract('interpolated (kvUsage × batchSize grid)', {
  make: () => new InterpolatedPerfModel(GRID),
  prefillAnchors: [
    [16, 12],
    [512, 20],
    [8192, 140],
  ],
  decodeAnchors: GRID.decode.kvUsage.flatMap((kv, i) =>
    (GRID.decode as { batchSize: number[]; ms: number[][] }).batchSize.map((b, j): [number, number, number] => [kv, b, (GRID.decode as { ms: number[][] }).ms[i]![j]!]),
  ),
});

describe('InterpolatedPerfModel worked examples', () => {
  const lin = new InterpolatedPerfModel(LINEAR);
  const grid = new InterpolatedPerfModel(GRID);

  it('prefill t=576 lies halfway between 18.4 and 33.0: 25.7 ms', () => {
    expect(lin.prefillMs(576)).toBeCloseTo(25.7, 9);
  });

  it('prefill t=5632 extends the last segment: 95.1 + 31.05 = 126.15 ms', () => {
    expect(lin.prefillMs(5632)).toBeCloseTo(126.15, 9);
  });

  it('prefill below the smallest measured prompt holds its time: t=1 → 18.4 ms', () => {
    expect(lin.prefillMs(1)).toBe(18.4);
  });

  it('decode p=0.25 → 16.0 ms and p=0.75 → 30.15 ms (linear in KV usage)', () => {
    expect(lin.decodeMs(0.25, 1)).toBeCloseTo(16.0, 9);
    expect(lin.decodeMs(0.75, 1)).toBeCloseTo(30.15, 9);
  });

  it('grid: p=0.25, batch 36 is bilinear → 10.0 ms; batch 1024 holds the last column → 45 ms', () => {
    expect(grid.decodeMs(0.25, 36)).toBeCloseTo(10.0, 9);
    expect(grid.decodeMs(1, 1024)).toBe(45);
    expect(grid.decodeMs(0, 0.5)).toBe(5);
  });

  it('reproduces a measured dip rather than smoothing it away (monotone only if the points are)', () => {
    const dip = new InterpolatedPerfModel({ prefill: { tokens: [100, 200, 300], ms: [10, 8, 12] }, decode: { kvUsage: [0], ms: [3] } });
    expect(dip.prefillMs(200)).toBe(8);
    expect(dip.prefillMs(150)).toBeCloseTo(9, 9);
    expect(dip.decodeMs(0.7, 4)).toBe(3); // one decode point: constant
  });
});

describe('perf profile schema (version 1)', () => {
  const base = { prefill: { tokens: [0, 100], ms: [10, 20] }, decode: { kvUsage: [0, 1], ms: [5, 6] } };

  it('a profile without "version" is read as version 1', () => {
    expect(parsePerfProfile(base).version).toBe(1);
    expect(perfModelFromProfile(base).prefillMs(50)).toBeCloseTo(15, 9);
  });

  it.each([
    ['another version', { ...base, version: 2 }, /unsupported version 2/],
    ['not an object', [1, 2], /expected a JSON object/],
    ['no decode section', { prefill: base.prefill }, /needs "prefill" and "decode"/],
    ['unequal prefill arrays', { ...base, prefill: { tokens: [1, 2], ms: [1] } }, /same number of points/],
    ['an empty array', { ...base, prefill: { tokens: [], ms: [] } }, /non-empty array/],
    ['a non-number point', { ...base, decode: { kvUsage: [0, '1'], ms: [5, 6] } }, /finite numbers/],
    ['KV usage above 1', { ...base, decode: { kvUsage: [0, 50], ms: [5, 6] } }, /in 0\.\.1/],
    ['a zero time', { ...base, prefill: { tokens: [0, 100], ms: [0, 20] } }, /> 0/],
    ['a ragged grid', { ...base, decode: { kvUsage: [0, 1], batchSize: [1, 8], ms: [[1, 2], [3]] } }, /same number of points/],
    ['a grid with a row missing', { ...base, decode: { kvUsage: [0, 1], batchSize: [1, 8], ms: [[1, 2]] } }, /grid/],
    ['batch size 0', { ...base, decode: { kvUsage: [0], batchSize: [0], ms: [[1]] } }, /≥ 1/],
  ])('rejects %s with a config_invalid PerfProfileError', (_what, raw, message) => {
    let caught: unknown;
    try {
      parsePerfProfile(raw);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(PerfProfileError);
    expect(caught).toMatchObject({ code: 'config_invalid', name: 'PerfProfileError' });
    expect((caught as Error).message).toMatch(message);
  });

  it('loads a profile file; a malformed, unparsable or missing file is a config_invalid error naming the path', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tandem-profile-'));
    try {
      const good = join(dir, 'good.json');
      await writeFile(good, JSON.stringify({ version: 1, ...base }));
      expect((await loadPerfProfile(good)).prefillMs(50)).toBeCloseTo(15, 6);
      const bad = join(dir, 'bad.json');
      await writeFile(bad, JSON.stringify({ prefill: { tokens: [1, 2], ms: [1] }, decode: { kvUsage: [0], ms: [1] } }));
      await expect(loadPerfProfile(bad)).rejects.toMatchObject({ code: 'config_invalid', message: expect.stringContaining('bad.json') });
      const garbled = join(dir, 'garbled.json');
      await writeFile(garbled, '{ "prefill": ');
      await expect(loadPerfProfile(garbled)).rejects.toMatchObject({ code: 'config_invalid', message: expect.stringContaining('invalid JSON') });
      await expect(loadPerfProfile(join(dir, 'missing.json'))).rejects.toMatchObject({ code: 'config_invalid', message: expect.stringContaining('cannot read') });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
