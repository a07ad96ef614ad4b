import { describe, expect, it } from 'vitest';
import { DECODE_FLOOR_MS, PolynomialPerfModel, activeParamsPerfModel, activeShare, decodeShare, stepTimeModel, type PerfModel } from '../../perf-model/index.js';
import { parameterCounts, parseModelConfig } from '../../workers/models/index.js';

/** Qwen3-30B-A3B's published config (the fields the counts read). */
const QWEN3_30B_A3B = {
  architectures: ['Qwen3MoeForCausalLM'],
  model_type: 'qwen3_moe',
  vocab_size: 151936,
  hidden_size: 2048,
  intermediate_size: 6144,
  num_hidden_layers: 48,
  num_attention_heads: 32,
  num_key_value_heads: 4,
  head_dim: 128,
  max_position_embeddings: 40960,
  num_experts: 128,
  num_experts_per_tok: 8,
  moe_intermediate_size: 768,
  norm_topk_prob: true,
  decoder_sparse_step: 1,
  mlp_only_layers: [],
  tie_word_embeddings: false,
};

describe('active parameters', () => {
  it('Qwen3-30B-A3B: 30.5B parameters, 3.35B read per token (attention + router + 8 of 128 experts per layer)', () => {
    const c = parseModelConfig(QWEN3_30B_A3B);
    expect(c.moe).toEqual({ numExperts: 128, topK: 8, expertIntermediateSize: 768, sharedIntermediateSize: 0, numMoeLayers: 48 });
    // per layer: attention 2048*(4096+2*512) + 4096*2048 + 2 norms = 18,878,464; router 128*2048;
    // an expert 3*2048*768 = 4,718,592; embeddings + lm_head 2*151936*2048 + final norm.
    const attention = 2048 * (4096 + 1024) + 4096 * 2048 + 2 * 2048;
    const embeddings = 2 * 151936 * 2048 + 2048;
    const expert = 3 * 2048 * 768;
    expect(parameterCounts(c)).toEqual({
      total: embeddings + 48 * (attention + 128 * 2048 + 128 * expert),
      active: embeddings + 48 * (attention + 128 * 2048 + 8 * expert),
      experts: { count: 128, topK: 8 },
    });
    expect(parameterCounts(c)).toEqual({ total: 30_532_110_336, active: 3_353_020_416, experts: { count: 128, topK: 8 } });
  });

  it('dense models: active = total; mlp_only_layers stay dense; a shared expert counts in full', () => {
    const dense = parseModelConfig({ ...QWEN3_30B_A3B, architectures: ['Qwen3ForCausalLM'], model_type: 'qwen3', num_experts: undefined, num_experts_per_tok: undefined });
    const d = parameterCounts(dense);
    expect(d.active).toBe(d.total);
    expect(d.experts).toBeUndefined();
    const some = parseModelConfig({ ...QWEN3_30B_A3B, mlp_only_layers: [0, 1] });
    expect(some.moe?.numMoeLayers).toBe(46);
    const shared = parseModelConfig({ ...QWEN3_30B_A3B, architectures: ['Qwen2MoeForCausalLM'], model_type: 'qwen2_moe', shared_expert_intermediate_size: 1024 });
    expect(parameterCounts(shared).active - parameterCounts(parseModelConfig(QWEN3_30B_A3B)).active).toBe(48 * (3 * 2048 * 1024 + 2048));
  });

  it('the mocker charges a MoE its active share of the default fit: 32.106 ms prefill of 1000 tokens -> 3.526 ms', () => {
    const share = activeShare(parameterCounts(parseModelConfig(QWEN3_30B_A3B)));
    expect(share).toBeCloseTo(0.10982, 5);
    const base = new PolynomialPerfModel();
    const moe = activeParamsPerfModel(base, { total: 30_532_110_336, active: 3_353_020_416 });
    expect(moe.prefillMs(1000)).toBeCloseTo(3.526, 3);
    // Counts without the expert layout (an older card): the active share at every batch.
    expect(moe.decodeMs(0.5, 1)).toBeCloseTo(2.889, 3);
    expect(moe.decodeMs(0.5, 8)).toBeCloseTo(2.889, 3);
    expect(moe.decodeMs(0, 1)).toBeGreaterThanOrEqual(DECODE_FLOOR_MS);
    expect(activeParamsPerfModel(base, { total: 10, active: 10 })).toBe(base);
  });

  it('a decode batch reads every expert any of its sequences routed to: Qwen3-30B-A3B at batch 1 / 8 / 64 reads 11.0% / 43.3% / 98.5% of the model (26.31 ms of the fit -> 2.889 / 11.403 / 25.908 ms)', () => {
    const q = { total: 30_532_110_336, active: 3_353_020_416, experts: { count: 128, topK: 8 } };
    // 1 − (1 − 8/128)^B of each layer's experts: 8, 51.61 and 125.94 of 128; one expert over
    // the 48 layers is (total − active) / 120 = 48 × 3 × 2048 × 768 = 226,492,416 parameters.
    const per = (q.total - q.active) / 120;
    expect(per).toBe(48 * 3 * 2048 * 768);
    expect(decodeShare(q, 1)).toBeCloseTo(q.active / q.total, 12);
    expect(decodeShare(q, 8)).toBeCloseTo((q.active + (128 * (1 - (120 / 128) ** 8) - 8) * per) / q.total, 12);
    expect(decodeShare(q, 8)).toBeCloseTo(0.4334, 4);
    expect(decodeShare(q, 64)).toBeCloseTo(0.9847, 4);
    expect(decodeShare(q, 100_000)).toBeLessThanOrEqual(1);
    const moe = activeParamsPerfModel(new PolynomialPerfModel(), q);
    expect(moe.decodeMs(0.5, 1)).toBeCloseTo(2.889, 3);
    expect(moe.decodeMs(0.5, 8)).toBeCloseTo(11.403, 3);
    expect(moe.decodeMs(0.5, 64)).toBeCloseTo(25.908, 3);
    // Prefill is compute: each token multiplies its own top-k, the active share at any length.
    expect(moe.prefillMs(1000)).toBeCloseTo(3.526, 3);
    // Dense counts, or experts that are all active, read the whole model.
    expect(decodeShare({ total: 10, active: 10, experts: { count: 8, topK: 8 } }, 4)).toBe(1);
  });

  it('stepTimeModel, the one derivation the mocker, the router and the planner share: a profile as it is, else the default fit x the active share', () => {
    const q = { total: 30_532_110_336, active: 3_353_020_416 };
    expect(stepTimeModel(q).prefillMs(1000)).toBeCloseTo(3.526, 3);
    expect(stepTimeModel(q).decodeMs(0.5, 8)).toBeCloseTo(2.889, 3);
    expect(stepTimeModel(undefined).prefillMs(1000)).toBeCloseTo(32.106, 3); // no counts: a dense model of unknown size
    expect(stepTimeModel({ total: 10, active: 10 }).prefillMs(1000)).toBeCloseTo(32.106, 3);
    const measured: PerfModel = { prefillMs: () => 50, decodeMs: () => 7 };
    expect(stepTimeModel(q, measured)).toBe(measured);
  });
});
