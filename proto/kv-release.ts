/**
 * `{ns}/prefill/kv_release`: a prefill worker frees the blocks it pinned for a transfer
 * (docs/disaggregation.md, step 3). Called by the decode worker after its pull, and by the
 * frontend when a disaggregated request ends before the decode side claimed the blocks.
 * Best effort and idempotent: unclaimed blocks are freed after `--kv-release-timeout` anyway.
 */

/** Endpoint name, under the prefill component. */
export const KV_RELEASE_ENDPOINT = 'kv_release';

/** Body of a `kv_release` call: the `transferId` of `KvTransferParams`. */
export interface KvReleaseRequest {
  transferId: string;
}

/** The call's one answer. */
export interface KvReleaseResponse {
  /** False when the id was unknown: already released, timed out, or never pinned here. */
  released: boolean;
}
