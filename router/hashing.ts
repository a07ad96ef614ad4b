/**
 * Block hashing of docs/design.md "KV events and block hashing", identical to Dynamo's:
 *   local_hash = XXH3-64(seed 1337, token ids as u32 LE)
 *   seq_hash[0] = local_hash[0]
 *   seq_hash[i] = XXH3-64(seed 1337, u64 LE seq_hash[i-1] ‖ u64 LE local_hash[i])
 * Only full blocks are hashed. Hashes are u64 carried as bigint here and as decimal strings on
 * the wire (see proto/wire.ts).
 */
import { xxh3 } from '@node-rs/xxhash';

export const KV_HASH_SEED = 1337n;

/** XXH3-64 of a byte view with the project seed. */
export function xxh3Seeded(bytes: Uint8Array): bigint {
  return xxh3.xxh64(bytes, KV_HASH_SEED);
}

/** The same hash over input fed in pieces (`update`, then `digest`): large files are never held whole. */
export function xxh3SeededStream(): xxh3.Xxh3 {
  return xxh3.Xxh3.withSeed(KV_HASH_SEED);
}

/**
 * LoRA: the adapter identity as vLLM's integer `lora_id`, from its name and the content hash
 * of its weights (workers/lora/peft-adapter.ts): 53 bits of XXH3(utf8 name ‖ 0 ‖ content hash),
 * so it is exact as a JSON number. Every worker that loads the same files under the same name
 * computes the same id.
 */
export function loraIdOf(name: string, contentHash: string): number {
  return Number(xxh3Seeded(Buffer.from(`${name}\u0000${contentHash}`, 'utf8')) & 0x1fffffffffffffn);
}

const loraPair = new BigUint64Array(2);
const loraPairBytes = new Uint8Array(loraPair.buffer);

/**
 * The local hash a block computed under adapter `loraId` is keyed by: XXH3(u64 LE tokens hash ‖
 * u64 LE lora_id). The chain runs over these, so the same tokens under two adapters (or under an
 * adapter and the base model) share no block, in the worker's cache or the router's index, while
 * one adapter's blocks chain and share exactly as the base model's do. Base blocks keep the
 * tokens-only hash (Dynamo's).
 */
export function loraLocalHash(local: bigint, loraId: number): bigint {
  loraPair[0] = local;
  loraPair[1] = BigInt(loraId);
  return xxh3Seeded(loraPairBytes);
}

/** Local (tokens-only) hash of each full block of `tokens`; keyed by the adapter when `loraId` is given. */
export function localBlockHashes(tokens: ArrayLike<number>, blockSize: number, loraId?: number): bigint[] {
  const numFull = Math.floor(tokens.length / blockSize);
  const out: bigint[] = new Array(numFull);
  const scratch = new Uint32Array(blockSize);
  const bytes = new Uint8Array(scratch.buffer);
  for (let b = 0; b < numFull; b++) {
    const base = b * blockSize;
    for (let i = 0; i < blockSize; i++) scratch[i] = tokens[base + i]! >>> 0;
    out[b] = xxh3Seeded(bytes);
    if (loraId !== undefined) out[b] = loraLocalHash(out[b]!, loraId);
  }
  return out;
}

// One scratch pair for every chain step: hashing is synchronous, so reuse is safe and saves
// two allocations per block on the routing hot path.
const chainPair = new BigUint64Array(2);
const chainPairBytes = new Uint8Array(chainPair.buffer);

/** Chained sequence hash of one block from its parent's sequence hash and its local hash. */
export function chainHash(parentSeqHash: bigint | undefined, localHash: bigint): bigint {
  if (parentSeqHash === undefined) return localHash;
  chainPair[0] = parentSeqHash;
  chainPair[1] = localHash;
  return xxh3Seeded(chainPairBytes);
}

/** Sequence hashes for a list of local hashes, optionally continuing from a parent. */
export function sequenceHashes(localHashes: readonly bigint[], parent?: bigint): bigint[] {
  const out: bigint[] = new Array(localHashes.length);
  let prev = parent;
  for (let i = 0; i < localHashes.length; i++) {
    prev = chainHash(prev, localHashes[i]!);
    out[i] = prev;
  }
  return out;
}

/** Both hash lists for the full blocks of a token sequence (under adapter `loraId` when given). */
export function blockHashes(tokens: ArrayLike<number>, blockSize: number, loraId?: number): { local: bigint[]; seq: bigint[] } {
  const local = localBlockHashes(tokens, blockSize, loraId);
  return { local, seq: sequenceHashes(local) };
}
