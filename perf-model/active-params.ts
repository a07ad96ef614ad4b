/**
 * A mixture of experts reads and multiplies only its active parameters per token (attention,
 * embeddings, the router and the top-k experts), while it must hold all of them. Memory (how
 * many workers a model needs, the KV left beside the weights) follows the total. Step time:
 *   - prefill is compute: each token multiplies its own top-k experts, so it follows the active
 *     share;
 *   - decode is weight reads: a step reads every expert some sequence of the batch routed to,
 *     and B sequences touch a share 1 − (1 − k/E)^B of a layer's E experts (routing taken as
 *     uniform), so its share grows from the active share at batch 1 to nearly the whole model:
 *
 *       decodeShare(B) = (active + (E·(1 − (1 − k/E)^B) − k) · perExpert) / total
 *       perExpert      = (total − active) / (E − k)   (one expert's parameters over all MoE layers)
 *
 *     Counts without `experts` (older cards) keep the active share at every batch.
 * `activeParamsPerfModel` charges those shares of what a base model predicts for a dense model
 * of the same total size: the default fit knows no model, so this is the reading of "the same
 * fleet, serving a MoE". A profile measured on the real model (`runtime profile`) is that
 * model's own and is used as it is. `stepTimeModel` is the one place that choice is made: the
 * mocker sleeps what it returns, the KV router's latency cost and the planner predict with it,
 * from the same counts (the model card's `parameters`, `parameterCounts` of workers/models).
 *
 * Worked example (Qwen3-30B-A3B's shape: 30,532,110,336 parameters, 3,353,020,416 active,
 * share 0.10982; 128 experts, top-8): the default fit's prefill of 1000 tokens, 32.106 ms,
 * becomes 3.526 ms; its decode at KV usage 0.5, 26.31 ms, becomes 2.889 ms at batch 1, and at
 * batch 8 (40.3% of the experts touched: share 0.4334) 11.403 ms, at batch 64 (98.4%: share
 * 0.9847) 25.908 ms. Never below DECODE_FLOOR_MS.
 */
import { DECODE_FLOOR_MS, type PerfModel } from './perf-model.js';
import { PolynomialPerfModel } from './polynomial.js';

export interface ParameterCounts {
  total: number;
  active: number;
  /** A mixture of experts: routed experts per MoE layer and how many each token takes. */
  experts?: { count: number; topK: number };
}

/** active / total, 1 for a dense model (or counts that say nothing). */
export function activeShare(p: ParameterCounts): number {
  if (!(p.total > 0) || !(p.active > 0) || p.active >= p.total) return 1;
  return p.active / p.total;
}

/** The share of the model a decode step of `batchSize` sequences reads (see the header). */
export function decodeShare(p: ParameterCounts, batchSize: number): number {
  const share = activeShare(p);
  const e = p.experts;
  if (share === 1 || e === undefined || !(e.count > e.topK) || !(e.topK >= 1)) return share;
  const b = Math.max(1, batchSize);
  const touched = e.count * (1 - (1 - e.topK / e.count) ** b);
  const perExpert = (p.total - p.active) / (e.count - e.topK);
  return Math.min(1, (p.active + Math.max(0, touched - e.topK) * perExpert) / p.total);
}

export function activeParamsPerfModel(base: PerfModel, params: ParameterCounts): PerfModel {
  const share = activeShare(params);
  if (share === 1) return base;
  return {
    prefillMs: (tokens) => base.prefillMs(tokens) * share,
    decodeMs: (kvUsage, batchSize) => Math.max(DECODE_FLOOR_MS, base.decodeMs(kvUsage, batchSize) * decodeShare(params, batchSize)),
  };
}

const DEFAULT_FIT: PerfModel = new PolynomialPerfModel();

/**
 * A worker's step-time model from its model's size: `measured` (a profile of that model) as it
 * is; else the default fit charged the active share of `params`; with neither, the default fit
 * (a dense model: the fit knows no size).
 */
export function stepTimeModel(params: ParameterCounts | undefined, measured?: PerfModel): PerfModel {
  if (measured !== undefined) return measured;
  return params === undefined ? DEFAULT_FIT : activeParamsPerfModel(DEFAULT_FIT, params);
}
