/**
 * `{ns}/decode/kv_prefetch` (layer-wise streaming, docs/disaggregation.md): the frontend hands a
 * decode worker a prefill's early kvTransfer (with kvLayerProgress) before the first token, so
 * the decode worker copies layer ranges as the prefill writes them. The later decode request
 * with the same transferId adopts what was copied; a prefetch never claimed is dropped after
 * the decode worker's --kv-pull-timeout. The prefill's pins keep their release rules.
 */
import type { KvTransferParams } from './wire.js';

/** Endpoint name, under the decode component. */
export const KV_PREFETCH_ENDPOINT = 'kv_prefetch';

export interface KvPrefetchRequest {
  kvTransfer: KvTransferParams;
}

/** The call's one answer: whether the decode worker started copying (false: it will pull whole blocks later). */
export interface KvPrefetchResponse {
  started: boolean;
}
