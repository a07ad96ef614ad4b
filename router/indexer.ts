/**
 * The role every prefix index plays for the router: given a request's block chain, how many
 * leading blocks each worker already holds. `RadixIndexer` (fed by worker KV events) and
 * `ApproxIndexer` (learned from the router's own decisions) implement it.
 */
import type { InstanceId, KvEventData } from '../proto/wire.js';

/** Overlap depth per worker: number of leading request blocks it holds. Absent = 0. */
export interface OverlapScores {
  readonly depths: ReadonlyMap<InstanceId, number>;
  /** Deepest depth any worker reached (0 when nothing matched). */
  readonly maxDepth: number;
}

export interface IndexStats {
  /** Distinct cached blocks (tree nodes). */
  nodes: number;
  /** (worker, block) pairs: what "indexed blocks" counts in benchmarks. */
  entries: number;
  workers: number;
  /** Blocks per worker. */
  perWorker: Record<InstanceId, number>;
  /** Bytes in the bitset slab; JS objects come on top of this. */
  slabBytes: number;
}

/** Hash of a block as the indexers accept it: u64 as bigint or as a decimal string. */
export type BlockHashInput = readonly bigint[] | readonly string[];

export interface KvIndexer {
  /** Walk the request's chain of LOCAL block hashes and report each worker's overlap depth. */
  findMatches(localHashes: BlockHashInput): OverlapScores;
  /** Forget every block of `workerId` (its instance went away). */
  removeWorker(workerId: InstanceId): void;
  stats(): IndexStats;
}

/** A worker's cached blocks as Stored events, parents before children. */
export interface WorkerBlocksDump {
  workerId: InstanceId;
  events: KvEventData[];
}

/** Serializable snapshot of an event-fed index. */
export interface IndexDump {
  version: 1;
  workers: WorkerBlocksDump[];
}

/** Normalize hash input to bigints without copying when it already is. */
export function toBigints(hashes: BlockHashInput): readonly bigint[] {
  if (hashes.length === 0 || typeof hashes[0] === 'bigint') return hashes as readonly bigint[];
  return (hashes as readonly string[]).map((h) => BigInt(h));
}
