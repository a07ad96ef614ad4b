/** The mocker's per-adapter step cost: a batch with adapters takes loraStepFactor × the base step. */
import { describe, expect, it } from 'vitest';
import { MockerEngine } from '../../workers/engines/mocker/index.js';
import { NATIVE_CPU_LORA_COST, loraStepFactor } from '../../perf-model/index.js';
import type { StepSequence } from '../../workers/engines/engine.js';

function batch(slots: Array<number | undefined>): StepSequence[] {
  return slots.map((slot, i) => ({
    seqId: i,
    tokenIds: Int32Array.of(5),
    startPos: 40,
    blockTable: Int32Array.from({ length: 3 }, (_, b) => i * 3 + b),
    sample: true,
    sampling: { temperature: 0 },
    history: [],
    numPromptTokens: 40,
    requestSeed: i,
    ...(slot !== undefined ? { loraSlot: slot } : {}),
  }));
}

async function simulated(engine: MockerEngine, seqs: StepSequence[]): Promise<number> {
  const before = engine.simulatedMs;
  await engine.step({ sequences: seqs, kvUsage: 0.1 });
  return engine.simulatedMs - before;
}

describe('mocker LoRA cost', () => {
  it('grows with the distinct adapters of the step, as the perf model says', async () => {
    const engine = new MockerEngine({ numBlocks: 128, speedupRatio: 1e6 });
    await engine.loadLora(0);
    const base = await simulated(engine, batch(Array(16).fill(undefined)));
    const one = await simulated(engine, batch(Array(16).fill(0)));
    const four = await simulated(engine, batch(Array.from({ length: 16 }, (_, i) => i % 4)));
    const sixteen = await simulated(engine, batch(Array.from({ length: 16 }, (_, i) => i)));
    expect(one / base).toBeCloseTo(loraStepFactor(NATIVE_CPU_LORA_COST, 1), 6);
    expect(four / base).toBeCloseTo(loraStepFactor(NATIVE_CPU_LORA_COST, 4), 6);
    expect(sixteen / base).toBeCloseTo(loraStepFactor(NATIVE_CPU_LORA_COST, 16), 6);
    expect(sixteen).toBeGreaterThan(four);
    expect(four).toBeGreaterThan(one);
    expect(one).toBeGreaterThan(base);
  });
});
