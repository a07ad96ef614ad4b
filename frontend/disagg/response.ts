/**
 * Debugging fields that name the workers of a disaggregated request. Headers
 * (`x-prefill-worker-id`, `x-decode-worker-id`, hex) go on every disaggregated response and
 * name the workers chosen before the first byte; the unary JSON body also carries
 * `nvext: {prefill_worker_id, decode_worker_id, disagg_path}` with the workers that actually
 * served (after any re-prefill, fallback or migration). Aggregated responses carry neither.
 */
import type { DisaggPrepared } from './disaggregator.js';

export const PREFILL_WORKER_HEADER = 'x-prefill-worker-id';
export const DECODE_WORKER_HEADER = 'x-decode-worker-id';

export function disaggHeaders(prepared: { disagg?: DisaggPrepared }): Record<string, string> {
  const d = prepared.disagg;
  if (!d) return {};
  return { [PREFILL_WORKER_HEADER]: d.route.prefillInstance, [DECODE_WORKER_HEADER]: d.route.decodeInstance };
}

export interface DisaggNvext {
  prefill_worker_id: string | null;
  decode_worker_id: string | null;
  /** 'disagg', or 'fallback' when no prefill worker could serve and the request ran aggregated. */
  disagg_path: 'disagg' | 'fallback';
}

export function disaggNvext(d: DisaggPrepared): DisaggNvext {
  return { prefill_worker_id: d.trace.prefillWorkerId ?? null, decode_worker_id: d.trace.decodeWorkerId ?? null, disagg_path: d.trace.path };
}
