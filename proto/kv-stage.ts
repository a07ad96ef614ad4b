/**
 * `{ns}/prefill/kv_stage`: a prefill worker whose KV pool is device memory copies a pinned
 * hand-off's blocks into the host pool its UCX agent serves (issue 24's staged path), so a
 * decode worker that cannot map the device pool (another node, a host pool) can read them.
 * Called by that decode worker before its UCX read; a same-node device peer never calls it, so
 * the hand-off itself costs no device → host copy.
 */

/** Endpoint name, under the prefill component. */
export const KV_STAGE_ENDPOINT = 'kv_stage';

/** Body of a `kv_stage` call: the `transferId` of `KvTransferParams`. */
export interface KvStageRequest {
  transferId: string;
}

/** The call's one answer. */
export interface KvStageResponse {
  /** False when the id is not pinned here (released, timed out, unknown): the read would be wrong. */
  staged: boolean;
}
