/**
 * The shapes a LoRA adapter's factors must have for a model: A is [rank, in], B is [out, rank],
 * with in/out the target layer's. Read by the adapter reader (peft-adapter.ts, which checks
 * every header against them before reading a tensor byte) and by makeTinyLora.
 */
import type { LoraTargetModule } from './peft-adapter.js';

export interface LoraModelDims {
  hiddenSize: number;
  intermediateSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
}

/** in/out features of a target module's base weight. */
export function loraTargetDims(d: LoraModelDims, t: LoraTargetModule): { inF: number; outF: number } {
  const q = d.numHeads * d.headDim;
  const kv = d.numKvHeads * d.headDim;
  switch (t) {
    case 'q_proj': return { inF: d.hiddenSize, outF: q };
    case 'k_proj':
    case 'v_proj': return { inF: d.hiddenSize, outF: kv };
    case 'o_proj': return { inF: q, outF: d.hiddenSize };
    case 'gate_proj':
    case 'up_proj': return { inF: d.hiddenSize, outF: d.intermediateSize };
    case 'down_proj': return { inF: d.intermediateSize, outF: d.hiddenSize };
  }
}

/** PEFT's name of one factor. */
export function loraTensorName(layer: number, t: LoraTargetModule, factor: 'A' | 'B'): string {
  const block = t === 'gate_proj' || t === 'up_proj' || t === 'down_proj' ? 'mlp' : 'self_attn';
  return `base_model.model.model.layers.${layer}.${block}.${t}.lora_${factor}.weight`;
}
