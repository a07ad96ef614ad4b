/**
 * Speculative decoding through the EngineLoop with the mocker, which models acceptance
 * (`speculative.acceptance`: each draft is the mocker's own next token with that probability):
 * the output is the plain run's, stops and max_tokens never overshoot, structured output keeps
 * every token inside its mask (a mask row per draft), the counters and the load report follow
 * vLLM's definitions, verify steps cost what the perf model charges, and the policy keeps
 * drafts off where they cannot pay.
 */
import { describe, expect, it } from 'vitest';
import { EngineLoop } from '../../../workers/engine-loop/engine-loop.js';
import { MockerEngine, MOCKER_EOS_SEED_BASE } from '../../../workers/engines/mocker/mocker-engine.js';
import type { StepBatch, StepResult } from '../../../workers/engines/engine.js';
import { PerfModelStepCost } from '../../../workers/speculative/index.js';
import { PolynomialPerfModel } from '../../../perf-model/index.js';
import type { LoadMetrics, TokenDelta } from '../../../proto/wire.js';
import { range, request } from '../builders.js';
import { TOY_EOS, TOY_VOCAB, toyProvider } from '../structured-fixtures.js';

class RecordingMocker extends MockerEngine {
  readonly batches: Array<{ drafts: number[]; masks: Map<number, Uint32Array>; result: StepResult }> = [];
  /** Optional: drafts to propose instead of the mocker's (one sequence), and a count of returned tokens. */
  draftsFor: ((n: number) => Int32Array) | undefined;
  onReturned: ((n: number) => void) | undefined;
  override async step(batch: StepBatch): Promise<StepResult> {
    const result = await super.step(batch);
    for (const t of result.sampled) {
      this.onReturned?.(1 + (t.following?.length ?? 0));
      if (t.drafts !== undefined && this.draftsFor !== undefined) t.drafts = this.draftsFor(t.drafts.length);
    }
    const masks = new Map<number, Uint32Array>();
    for (const s of batch.sequences) if (s.allowedTokens) masks.set(s.seqId, s.allowedTokens.slice());
    this.batches.push({ drafts: batch.sequences.map((s) => s.numDraftTokens ?? 0), masks, result });
    return result;
  }
}

function loop(options: { acceptance?: number; vocab?: number; eos?: number[]; sinks?: ConstructorParameters<typeof EngineLoop>[0]['sinks']; maxDrafts?: number; structured?: boolean; maxNumSeqs?: number } = {}) {
  const engine = new RecordingMocker({
    numBlocks: 4096,
    blockSize: 16,
    vocabSize: options.vocab ?? 500,
    speedupRatio: 1e6,
    eosTokenIds: options.eos ?? [],
    ...(options.acceptance !== undefined ? { speculative: { acceptance: options.acceptance } } : {}),
  });
  const l = new EngineLoop({
    engine,
    ...(options.acceptance !== undefined ? { speculative: { maxDraftTokens: options.maxDrafts ?? 4, cost: new PerfModelStepCost(new PolynomialPerfModel()) } } : {}),
    ...(options.structured ? { grammar: toyProvider } : {}),
    ...(options.sinks ? { sinks: options.sinks } : {}),
    scheduler: { maxNumSeqs: options.maxNumSeqs ?? 256 },
  });
  return { engine, loop: l };
}

async function collect(stream: AsyncIterable<TokenDelta>): Promise<TokenDelta[]> {
  const out: TokenDelta[] = [];
  for await (const d of stream) out.push(d);
  return out;
}
const tokensOf = (deltas: TokenDelta[]): number[] => deltas.flatMap((d) => d.tokenIds);
const signal = () => new AbortController().signal;

describe('speculative decoding with the mocker', () => {
  it('20 requests at acceptance 0.7: the same tokens as plain decoding, in fewer steps, with acceptance near 0.7 per draft', async () => {
    const plain = loop();
    const spec = loop({ acceptance: 0.7 });
    const run = (l: EngineLoop) => Promise.all(Array.from({ length: 20 }, (_, i) => collect(l.generate(request(`r${i}`, range(10 + i, 12 + i), 40), signal()))));
    const [a, b] = [await run(plain.loop), await run(spec.loop)];
    expect(b.map(tokensOf)).toEqual(a.map(tokensOf));
    expect(b.map((d) => d[d.length - 1]!.usage)).toEqual(a.map((d) => d[d.length - 1]!.usage));
    expect(spec.engine.numSteps).toBeLessThan(plain.engine.numSteps);
    const t = spec.loop.stats().specTotals!;
    expect(t.drafts).toBeGreaterThan(0);
    // Position 0 is accepted with probability 0.7: over hundreds of drafts, within 0.1.
    expect(t.acceptedPerPos[0]! / t.drafts).toBeGreaterThan(0.6);
    expect(t.acceptedPerPos[0]! / t.drafts).toBeLessThan(0.8);
    // Later positions need every earlier draft accepted too.
    for (let p = 1; p < t.acceptedPerPos.length; p++) expect(t.acceptedPerPos[p]!).toBeLessThanOrEqual(t.acceptedPerPos[p - 1]!);
    expect(t.acceptedTokens).toBe(t.acceptedPerPos.reduce((x, y) => x + y, 0));
    await plain.loop.close();
    await spec.loop.close();
  });

  it('EOS inside a verify step ends the output at EOS: nothing after it is delivered', async () => {
    for (const n of [0, 1, 2, 5, 9]) {
      const { loop: l } = loop({ acceptance: 1, eos: [499] });
      const deltas = await collect(l.generate(request(`e${n}`, range(1, 8), 30, { sampling: { seed: MOCKER_EOS_SEED_BASE + n }, stop: { maxTokens: 30, stopTokenIds: [499], ignoreEos: false } }), signal()));
      const out = tokensOf(deltas);
      expect(out).toHaveLength(n + 1);
      expect(out[n]).toBe(499);
      expect(deltas[deltas.length - 1]!.finishReason).toBe('stop');
      expect(deltas[deltas.length - 1]!.usage!.completionTokens).toBe(n + 1);
      await l.close();
    }
  });

  it('max_tokens is never overshot, whatever the acceptance (1..9 tokens, every draft right)', async () => {
    const { loop: l } = loop({ acceptance: 1, maxDrafts: 6 });
    for (let max = 1; max <= 9; max++) {
      const deltas = await collect(l.generate(request(`m${max}`, range(3, 5), max), signal()));
      expect(tokensOf(deltas)).toHaveLength(max);
      expect(deltas[deltas.length - 1]!.finishReason).toBe('length');
    }
    await l.close();
  });

  it('structured output: every returned token lies in its own mask row, and the output equals plain decoding', async () => {
    const spec = { kind: 'choice' as const, choices: ['abcabcabcabc', 'ab', 'bcbcbcbcbcbc'] };
    const plain = loop({ vocab: TOY_VOCAB, eos: [TOY_EOS], structured: true });
    const withDrafts = loop({ vocab: TOY_VOCAB, eos: [TOY_EOS], structured: true, acceptance: 0.8 });
    const req = (id: string) => ({ ...request(id, [10, 11, 12], 20), stop: { maxTokens: 20, stopTokenIds: [TOY_EOS], ignoreEos: false }, structured: spec });
    const a = await collect(plain.loop.generate(req('a'), signal()));
    // The mocker's own drafts ignore the grammar (it would cut them); these know the output,
    // with every third draft wrong, so rows after accepted and rejected drafts both occur.
    const expected = tokensOf(a);
    let returned = 0;
    withDrafts.engine.draftsFor = (n) => Int32Array.from(expected.slice(returned, returned + n).map((t, i) => ((returned + i) % 3 === 2 ? (t + 1) % TOY_VOCAB : t)));
    withDrafts.engine.onReturned = (n) => (returned += n);
    const b = await collect(withDrafts.loop.generate(req('a'), signal()));
    expect(tokensOf(b)).toEqual(tokensOf(a));
    expect(b[b.length - 1]!.finishReason).toBe('stop');
    // Every token returned by a verify step was sampled under its own row.
    let verified = 0;
    for (const step of withDrafts.engine.batches) {
      for (const t of step.result.sampled) {
        const mask = step.masks.get(t.seqId);
        if (mask === undefined) continue;
        const rows = [t.tokenId, ...(t.following ?? []).map((f) => f.tokenId)];
        const words = mask.length / Math.max(1, step.drafts[0]! + 1);
        rows.forEach((id, j) => expect((mask[j * words + (id >>> 5)]! >>> (id & 31)) & 1).toBe(1));
        verified += rows.length - 1;
      }
    }
    expect(verified).toBeGreaterThan(0);
    await plain.loop.close();
    await withDrafts.loop.close();
  });

  it('verify steps cost what the perf model charges: the mocker simulated more time per step, less per token', async () => {
    const plain = loop();
    const spec = loop({ acceptance: 0.9 });
    await collect(plain.loop.generate(request('p', range(1, 30), 60), signal()));
    await collect(spec.loop.generate(request('s', range(1, 30), 60), signal()));
    expect(spec.engine.simulatedMs / spec.engine.numSteps).toBeGreaterThan(plain.engine.simulatedMs / plain.engine.numSteps);
    expect(spec.engine.simulatedMs).toBeLessThan(plain.engine.simulatedMs);
    await plain.loop.close();
    await spec.loop.close();
  });

  it('the load report carries the counters (vLLM definitions): drafts, draft tokens, accepted tokens', async () => {
    const reports: LoadMetrics[] = [];
    const { loop: l } = loop({ acceptance: 0.5, sinks: { onLoadMetrics: (m) => reports.push(m) } });
    await collect(l.generate(request('x', range(1, 10), 30), signal()));
    const last = reports[reports.length - 1]!.spec!;
    const totals = l.stats().specTotals!;
    expect(last).toEqual({ drafts: totals.drafts, draftTokens: totals.draftTokens, acceptedTokens: totals.acceptedTokens });
    expect(last.draftTokens).toBeGreaterThan(last.acceptedTokens);
    const plain = loop({ sinks: { onLoadMetrics: (m) => reports.push(m) } });
    reports.length = 0;
    await collect(plain.loop.generate(request('y', range(1, 10), 3), signal()));
    expect(reports.every((m) => m.spec === undefined)).toBe(true);
    await l.close();
    await plain.loop.close();
  });

  it('at batch 200 and acceptance 0.02 drafts cannot pay (0.02 tokens for 0.015 ms, against 200 / 34 ms): only probes verify', async () => {
    const { loop: l, engine } = loop({ acceptance: 0.02 });
    await Promise.all(Array.from({ length: 200 }, (_, i) => collect(l.generate(request(`b${i}`, range(i * 3, 8), 48), signal()))));
    // Once the batch is large and the estimates have learnt the acceptance, a step verifies
    // only probes: one draft per 50 decodes.
    const steady = engine.batches.filter((b) => b.result.sampled.length >= 150).slice(10);
    expect(steady.length).toBeGreaterThan(10);
    for (const b of steady) expect(b.drafts.reduce((x, y) => x + y, 0)).toBeLessThanOrEqual(Math.floor(b.result.sampled.length / 50));
    await l.close();
  });
});
