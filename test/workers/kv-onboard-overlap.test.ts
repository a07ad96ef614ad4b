/**
 * Onboarding in the step that needs it (issue 38): a prompt whose prefix went out of the pool
 * into the host tier (G2) comes back. Its blocks are copied in and its remaining tokens prefill
 * in the same engine step, not one step later. Asserted by the order of events, never by time:
 *   - a copier that overlaps the step (the mocker's, a device copy stream): the step starts
 *     before the copy has landed, and no token of that step is delivered before it has;
 *   - a copier that does not (a device pool through kvWriteBlocks): the step starts only after
 *     the copy landed;
 *   - a copy that fails: the step's token for that sequence is dropped and it recomputes from
 *     the pool's own prefix, so the client still gets the same tokens as a cold run.
 * How much time the overlap saves (a step with onboards against a prefill-only step) is
 * measured by bench/onboard-overlap.ts, not here.
 */
import { describe, expect, it } from 'vitest';
import { PolynomialPerfModel } from '../../perf-model/index.js';
import type { PreprocessedRequest } from '../../proto/wire.js';
import { KvTierPolicy } from '../../workers/block-manager/kv-tier-policy.js';
import { EngineLoop } from '../../workers/engine-loop/engine-loop.js';
import type { Engine, StepBatch, StepResult } from '../../workers/engines/engine.js';
import { MockerEngine } from '../../workers/engines/mocker/index.js';
import { KvTierManager, type BlockCopier } from '../../workers/kv-tiers/index.js';
import { onboardCosts, H100_TIER_BANDWIDTHS } from '../../workers/kv-tiers/index.js';
import { range } from './builders.js';

const BS = 16;
const BLOCK_BYTES = 131072 * BS;

/** A copier whose writes land only when the test says so; it logs what happens, in order. */
class GatedCopier implements BlockCopier {
  readonly blockBytes = BLOCK_BYTES;
  readonly virtual = true;
  private readonly gates: Array<{ ids: number[]; land: () => void; fail: (e: Error) => void }> = [];

  constructor(
    readonly log: string[],
    readonly overlapsStep: boolean,
  ) {}

  readBlocks(blockIds: readonly number[]): Promise<Uint8Array[]> {
    return Promise.resolve(blockIds.map(() => new Uint8Array(0)));
  }

  writeBlocks(blockIds: ArrayLike<number>): Promise<void> {
    this.log.push(`write ${blockIds.length}`);
    return new Promise((land, fail) => this.gates.push({ ids: Array.from(blockIds), land, fail }));
  }

  get pending(): number {
    return this.gates.length;
  }

  settle(ok: boolean): void {
    for (const g of this.gates.splice(0)) {
      this.log.push(ok ? `landed ${g.ids.length}` : `failed ${g.ids.length}`);
      if (ok) g.land();
      else g.fail(new Error('copy failed'));
    }
  }
}

/** The mocker, stepping at once, logging each step's prefill sequences as `step seq@startPos+tokens`. */
class LoggingEngine implements Engine {
  readonly inner = new MockerEngine({ numBlocks: 24, blockSize: BS, speedupRatio: 1e6 });
  readonly info = this.inner.info;
  constructor(readonly log: string[]) {}

  async step(batch: StepBatch): Promise<StepResult> {
    const prefills = batch.sequences.filter((s) => s.tokenIds.length > 1 || s.startPos < s.numPromptTokens);
    if (prefills.length > 0) this.log.push(`step ${prefills.map((s) => `${s.startPos}+${s.tokenIds.length}`).join(' ')}`);
    const r = await this.inner.step(batch);
    if (prefills.length > 0) this.log.push('step done');
    return r;
  }

  close(): Promise<void> {
    return this.inner.close();
  }
}

async function run(loop: EngineLoop, id: string, prompt: number[], log?: string[]): Promise<number[]> {
  const req: PreprocessedRequest = { requestId: id, model: 'm', tokenIds: prompt, sampling: { temperature: 0, seed: 42 }, stop: { maxTokens: 2, stopTokenIds: [], ignoreEos: true } };
  const out: number[] = [];
  for await (const d of loop.generate(req, new AbortController().signal)) {
    if (d.tokenIds.length > 0) log?.push(`token ${id}`);
    out.push(...d.tokenIds);
  }
  return out;
}

async function setup(overlapsStep: boolean) {
  const log: string[] = [];
  const copier = new GatedCopier(log, overlapsStep);
  const policy = new KvTierPolicy({ hostBlocks: 64, diskBlocks: 0 });
  const tiers = new KvTierManager({ policy, costs: onboardCosts(new PolynomialPerfModel(), BLOCK_BYTES, H100_TIER_BANDWIDTHS), copier });
  const loop = new EngineLoop({ engine: new LoggingEngine(log), kvTiers: tiers });
  const prompt = range(1, 8 * BS + 1);
  const cold = await run(loop, 'cold', prompt);
  // Other prompts push the first one out of the 24-block pool into G2.
  for (let i = 0; i < 3; i++) await run(loop, `f${i}`, range(1000 * (i + 1), 12 * BS));
  expect(policy.host.size).toBeGreaterThanOrEqual(8);
  log.length = 0;
  return { log, copier, loop, prompt, cold, tiers };
}

/** Lets the loop run until it waits for the gated copy. */
async function untilWrite(copier: GatedCopier): Promise<void> {
  while (copier.pending === 0) await new Promise((r) => setImmediate(r));
  for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
}

describe('host-tier onboarding runs in the step that admits it', () => {
  it('overlapping copier: the step with the 1 remaining token starts before the copy lands; its token waits for the copy', async () => {
    const { log, copier, loop, prompt, cold } = await setup(true);
    const warm = run(loop, 'warm', prompt, log);
    await untilWrite(copier);
    // The copy of 8 blocks is issued, the step that prefills token 128 (after them) already ran.
    expect(log).toEqual(['write 8', `step ${8 * BS}+1`, 'step done']);
    copier.settle(true);
    expect(await warm).toEqual(cold);
    expect(log.slice(0, 5)).toEqual(['write 8', `step ${8 * BS}+1`, 'step done', 'landed 8', 'token warm']);
    await loop.close();
  });

  it('non-overlapping copier: the step starts only once the copy has landed', async () => {
    const { log, copier, loop, prompt, cold } = await setup(false);
    const warm = run(loop, 'warm', prompt, log);
    await untilWrite(copier);
    expect(log).toEqual(['write 8']);
    copier.settle(true);
    expect(await warm).toEqual(cold);
    expect(log.slice(0, 4)).toEqual(['write 8', 'landed 8', `step ${8 * BS}+1`, 'step done']);
    await loop.close();
  });

  it('a failed copy drops that step token and recomputes the whole prompt: same output as cold, nothing counted cached', async () => {
    const { log, copier, loop, prompt, cold, tiers } = await setup(true);
    const usage: number[] = [];
    const req: PreprocessedRequest = { requestId: 'warm', model: 'm', tokenIds: prompt, sampling: { temperature: 0, seed: 42 }, stop: { maxTokens: 2, stopTokenIds: [], ignoreEos: true } };
    const warm = (async () => {
      const out: number[] = [];
      for await (const d of loop.generate(req, new AbortController().signal)) {
        out.push(...d.tokenIds);
        if (d.usage && d.finishReason) usage.push(d.usage.cachedTokens);
      }
      return out;
    })();
    await untilWrite(copier);
    copier.settle(false);
    expect(await warm).toEqual(cold);
    expect(log).toContain(`step 0+${8 * BS + 1}`);
    expect(usage).toEqual([0]);
    expect(tiers.stats().onboardFailures).toBe(1);
    await loop.close();
  });
});
