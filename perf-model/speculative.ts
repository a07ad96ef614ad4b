/**
 * The step time of a verify step (speculative decoding): a decode step whose sequences also
 * bring draft tokens. A decode step already reads every weight once; the drafts add their
 * compute, priced at the prefill curve's margin where the step is:
 *
 *   verifyStepMs = stepTimeMs(shape) + prefillMs(t + x) − prefillMs(t)
 *
 * t = the step's prefill tokens, x = its draft tokens. Worked example (the polynomial default):
 * one decoding sequence at KV usage 0 with 4 drafts: 5.74 + (prefillMs(4) − prefillMs(0)) =
 * 5.74 + 0.0607 = 5.80 ms (drafts are nearly free at batch 1); 64 sequences with 4 drafts each,
 * x = 256: 5.74 + 3.91 = 9.65 ms.
 */
import { stepTimeMs, type PerfModel, type StepShape } from './perf-model.js';

export function verifyStepMs(model: PerfModel, shape: StepShape, draftTokens: number): number {
  const base = stepTimeMs(model, shape);
  if (!(draftTokens > 0)) return base;
  const t = Math.max(0, shape.prefillTokens);
  return base + Math.max(0, model.prefillMs(t + draftTokens) - model.prefillMs(t));
}
