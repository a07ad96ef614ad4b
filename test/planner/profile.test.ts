/**
 * The pure parts of `runtime profile`: the sweep plan from a worker's limits, ITL from stream
 * arrival times, measurements → a schema-v1 profile, the HTML page and the progress bar.
 */
import { describe, expect, it } from 'vitest';
import { InterpolatedPerfModel, parsePerfProfile } from '../../perf-model/index.js';
import { decodeItl } from '../../planner/profiler/measure.js';
import type { DecodeMeasurement, PrefillMeasurement } from '../../planner/profiler/measure.js';
import { buildProfile, type ProfiledWorker } from '../../planner/profiler/profile-build.js';
import { renderProfileHtml } from '../../planner/profiler/html-report.js';
import { ProgressBar, progressLine } from '../../planner/profiler/progress.js';
import { KV_FILL, planSize, planSweep } from '../../planner/profiler/sweep.js';

const tinyLimits = { contextLength: 2048, kvBlockSize: 16, totalKvBlocks: 1024, maxNumBatchedTokens: 8192 };

describe('profile sweep plan', () => {
  it('prefill ISLs double from 128 up to one step (min of context − 1 and max batched tokens)', () => {
    expect(planSweep(tinyLimits).prefill.map((p) => p.isl)).toEqual([128, 256, 512, 1024, 2047]);
    expect(planSweep({ ...tinyLimits, maxNumBatchedTokens: 512 }).prefill.map((p) => p.isl)).toEqual([128, 256, 512]);
  });

  it('decode: contexts ×4 from 256 below context − 64; concurrency 1, 8, 64 and the most that fit in 90 % of KV', () => {
    const plan = planSweep(tinyLimits);
    const at = (ctx: number) => plan.decode.filter((d) => d.contextLength === ctx).map((d) => d.concurrency);
    // 90 % of 1024 blocks = 921.6. Context 256: osl = ⌈c·256/8192⌉ + 24 = 26 for c ≤ 64, so a
    // stream ends on ⌈282/16⌉ = 18 blocks: c = 51 needs 918, c = 52 needs 936. Context 1984:
    // ⌈2010/16⌉ = 126 blocks a stream, c = 7 needs 882, c = 8 needs 1008.
    expect(at(256)).toEqual([1, 8, 51]);
    expect(at(1024)).toEqual([1, 8, 13]);
    expect(at(1984)).toEqual([1, 7]);
    for (const d of plan.decode) {
      expect(d.concurrency * Math.ceil((d.contextLength + d.osl) / 16)).toBeLessThanOrEqual(KV_FILL * 1024);
    }
    expect(planSize(plan)).toBe(5 * 3 + (1 + 8 + 51) + (1 + 8 + 13) + (1 + 7));
  });

  it('a stream never runs past the context length: with KV to spare, context 1984 stops at 165 streams', () => {
    // 1984 + osl ≤ 2048 → osl = ⌈c·1984/8192⌉ + 24 ≤ 64 → c ≤ 165 (⌈39.96⌉ = 40; c = 166 gives 41)
    const plan = planSweep({ ...tinyLimits, totalKvBlocks: 100_000 });
    expect(plan.decode.filter((d) => d.contextLength === 1984).map((d) => d.concurrency)).toEqual([1, 8, 64, 165]);
    for (const d of plan.decode) expect(d.contextLength + d.osl).toBeLessThanOrEqual(2048);
  });

  it('--quick keeps the ends; explicit lists are clipped to what the worker can take', () => {
    const quick = planSweep(tinyLimits, { quick: true });
    expect(quick.prefill.map((p) => p.isl)).toEqual([128, 2047]);
    expect(quick.prefill.map((p) => p.samples)).toEqual([3, 3]); // a median that one stalled request cannot move
    expect(quick.decode.map((d) => [d.contextLength, d.concurrency])).toEqual([[256, 1], [256, 54], [1984, 1], [1984, 7]]); // quick: 12 steady steps, so 17 blocks a 256-stream
    const given = planSweep(tinyLimits, { isls: [64, 4096], contexts: [128, 5000], concurrencies: [2, 500] });
    expect(given.prefill.map((p) => p.isl)).toEqual([64]);
    expect(given.decode.map((d) => [d.contextLength, d.concurrency])).toEqual([[128, 2]]);
  });
});

describe('decode ITL from arrival times', () => {
  it('reads only the window where every stream decodes', () => {
    // Stream A: first token at 10, then one token every 10 ms to 100. Stream B is prefilled later:
    // first token at 50 (A decodes alone 10..50, faster steps do not count), then every 20 ms... the
    // window is 50..100: A gets tokens at 60,70,80,90,100 (5 tokens / 50 ms = 10 ms), B's deltas at
    // 50 (reference), 70, 90 → 2 tokens / 40 ms = 20 ms, and 110 is after A ended.
    const a = { sentAt: 0, times: [10, 20, 30, 40, 50, 60, 70, 80, 90, 100], counts: Array(10).fill(1) };
    const b = { sentAt: 0, times: [50, 70, 90, 110], counts: [1, 1, 1, 1] };
    const r = decodeItl([a, b]);
    expect(r.itlMs).toBeCloseTo((10 + 20) / 2, 9);
    expect(r.windowTokens).toBeCloseTo((5 + 2) / 2, 9);
  });

  it('counts every token of a coalesced delta', () => {
    const a = { sentAt: 5, times: [0, 10, 40], counts: [1, 1, 6] };
    // one stream: window = its whole life; 7 tokens after the first in 40 ms
    expect(decodeItl([a]).itlMs).toBeCloseTo(40 / 7, 9);
  });
});

const worker: ProfiledWorker = { model: 'tiny', engine: 'mocker', contextLength: 2048, kvBlockSize: 16, totalKvBlocks: 1024, kvCapacityTokens: 16384, maxNumBatchedTokens: 8192 };
const prefill: PrefillMeasurement[] = [
  { isl: 1024, ttftMs: 40, tokensPerS: 25600, samplesMs: [40] },
  { isl: 128, ttftMs: 20, tokensPerS: 6400, samplesMs: [20] },
  { isl: 256, ttftMs: 19, tokensPerS: 13474, samplesMs: [19] }, // noise below the 128 point
];
const dm = (contextLength: number, concurrency: number, kvUsage: number, itlMs: number): DecodeMeasurement => ({
  contextLength, concurrency, meanContext: contextLength + 16, kvUsage, itlMs, tokensPerS: (concurrency * 1000) / itlMs, windowTokens: 20,
});
const decode = [dm(256, 1, 0.017, 6), dm(256, 8, 0.14, 8), dm(256, 51, 0.9, 30), dm(1984, 1, 0.125, 9), dm(1984, 6, 0.75, 25)];

describe('profile file', () => {
  const report = buildProfile(worker, prefill, decode, '2026-11-24T00:00:00.000Z', 12.5);

  it('is schema v1: the perf-model parser accepts it, and prefill never falls as ISL grows', () => {
    const parsed = parsePerfProfile(JSON.parse(JSON.stringify(report)));
    expect(parsed.version).toBe(1);
    expect(report.prefill).toEqual({ tokens: [128, 256, 1024], ms: [20, 20, 40] });
    expect(report.worker.kvCapacityTokens).toBe(16384);
    expect(report.measured.decode).toHaveLength(5);
  });

  it('the decode grid gives back every measured ITL at its own KV usage and batch size', () => {
    const model = new InterpolatedPerfModel(parsePerfProfile(report));
    for (const d of decode) expect(model.decodeMs(d.kvUsage, d.concurrency)).toBeCloseTo(d.itlMs, 6);
    expect(report.decode).toMatchObject({ kvUsage: [0.017, 0.125, 0.14, 0.75, 0.9], batchSize: [1, 6, 8, 51] });
    // Between measured points it interpolates in (context, concurrency): batch 1 at KV 0.07 is
    // context 0.07 · 16384 = 1146.9, between the batch-1 points at context 0.017 · 16384 = 278.5
    // (6 ms) and 0.125 · 16384 = 2048 (9 ms).
    const x1 = 0.017 * 16384;
    const x2 = 0.125 * 16384;
    expect(model.decodeMs(0.07, 1)).toBeCloseTo(6 + ((0.07 * 16384 - x1) * 3) / (x2 - x1), 3);
  });

  it('renders a self-contained HTML page: four inline SVG charts, one line per context on the decode charts', () => {
    const html = renderProfileHtml(report);
    expect(html.match(/<svg /g)).toHaveLength(4);
    expect(html).not.toMatch(/<script|<link|src=|https?:\/\/(?!www\.w3\.org\/2000\/svg)/);
    for (const t of ['TTFT vs ISL', 'Prefill throughput vs ISL', 'ITL vs concurrency', 'Decode throughput vs concurrency']) expect(html).toContain(t);
    expect(html.match(/data-name="context 256"/g)).toHaveLength(2);
    expect(html.match(/data-name="context 1984"/g)).toHaveLength(2);
  });
});

describe('progress bar', () => {
  it('draws done / total', () => {
    expect(progressLine(6, 24, 'prefill ISL 128', 12)).toBe('[###---------]  25%  6/24 requests  prefill ISL 128');
  });

  it('on a TTY rewrites one line; elsewhere prints on a new phase and at most every period', () => {
    const tty: string[] = [];
    const a = new ProgressBar(4, { isTTY: true, write: (s: string) => tty.push(s) });
    a.phase('x');
    a.tick();
    a.tick();
    a.finish('done');
    expect(tty.slice(0, 3).every((s) => s.startsWith('\r') && !s.includes('\n'))).toBe(true);
    expect(tty[3]).toMatch(/done\n$/);

    const lines: string[] = [];
    let t = 0;
    const b = new ProgressBar(10, { isTTY: false, write: (s: string) => lines.push(s) }, () => t, 1000);
    b.phase('p1'); // printed (new phase)
    b.tick(); // t=0: too soon
    t = 1500;
    b.tick(); // printed (period)
    b.phase('p2'); // printed (new phase)
    for (let i = 0; i < 8; i++) b.tick(); // only the last (done) prints
    expect(lines).toHaveLength(4);
    expect(lines.every((s) => s.startsWith('profile: [') && s.endsWith('\n'))).toBe(true);
    expect(lines[3]).toContain('10/10');
  });
});
