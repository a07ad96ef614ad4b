/**
 * The extra step time of LoRA adapters in a batch, as a multiple of the base model's step:
 * factor = 1 + fixed + perAdapter × distinct adapters (1 with none). Adapters add a shrink and
 * an expand after every linear layer: a fixed share for launching them over the batch, and a
 * share per adapter for streaming its factors. The mocker multiplies its predicted step by it.
 */
export interface LoraCost {
  /** Share of the base step added once any sequence has an adapter. */
  fixed: number;
  /** Share added per distinct adapter in the step. */
  perAdapter: number;
}

/**
 * Fitted to bench/results/native-lora-bench.json (0.5B shape, rank 16 on all seven linear
 * layers, decode batch 16 on the native CPU engine): 1 adapter 0.99×, 4 adapters 1.15×,
 * 16 adapters 1.31× the base step; a line through them (1.02×, 1.08×, 1.32×).
 */
export const NATIVE_CPU_LORA_COST: LoraCost = { fixed: 0, perAdapter: 0.02 };

export function loraStepFactor(cost: LoraCost, distinctAdapters: number): number {
  return distinctAdapters <= 0 ? 1 : 1 + cost.fixed + cost.perAdapter * distinctAdapters;
}
