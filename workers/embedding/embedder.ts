/**
 * An embedder turns tokenized inputs into pooled vectors. Two implementations, one contract
 * (test/workers/embedder.contract.ts): the native engine's pooling step, and the mocker's
 * deterministic vectors, so fleets can be tested without weights.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { EmbeddingPooling } from '../../proto/wire.js';
import type { NativeEngine } from '../engines/native/index.js';
import { xxh3Seeded } from '../../router/index.js';
import { SeededRandom } from '../../runtime/random.js';
import type { PerfModel } from '../../perf-model/index.js';
import { CancelledError } from '../../runtime/errors.js';

export interface Embedder {
  /** Length of every vector. */
  readonly dimensions: number;
  /**
   * One vector per input (each non-empty), [inputs.length × dimensions], in order. The result
   * of an input does not depend on the other inputs of the batch (up to float rounding on the
   * native engine). Once `signal` aborts the call may stop early (the native engine before its
   * next forward pass) and reject with a `cancelled` error.
   */
  embed(inputs: readonly ArrayLike<number>[], signal?: AbortSignal): Promise<Float32Array>;
  close(): Promise<void>;
}

/** The native engine's pooling step (Engine::embed): runs on a native thread. */
export class NativeEmbedder implements Embedder {
  readonly dimensions: number;

  constructor(
    private readonly engine: NativeEngine,
    private readonly pooling: EmbeddingPooling,
    private readonly normalize: boolean,
  ) {
    this.dimensions = engine.model.hiddenSize;
  }

  embed(inputs: readonly ArrayLike<number>[], signal?: AbortSignal): Promise<Float32Array> {
    let total = 0;
    for (const input of inputs) total += input.length;
    const tokens = new Int32Array(total);
    const lengths = new Int32Array(inputs.length);
    let at = 0;
    inputs.forEach((input, i) => {
      tokens.set(input, at);
      at += input.length;
      lengths[i] = input.length;
    });
    return this.engine.embed(tokens, lengths, this.pooling, this.normalize, signal);
  }

  close(): Promise<void> {
    return this.engine.close();
  }
}

export interface MockEmbedderTiming {
  /** The prefill time of a batch's tokens is what one embedding call takes (default: none). */
  perfModel: PerfModel;
  /** Simulated time is divided by this (the mocker's --speedup-ratio). */
  speedupRatio: number;
}

/**
 * Deterministic vectors from a hash of the tokens (the router's XXH3 seeds the project's one
 * generator): mean pooling averages per-token vectors seeded by each token id (so inputs that
 * share tokens are close), last-token pooling takes one vector seeded by the whole sequence.
 * Normalized like the native engine. Same tokens, same vector, in any batch.
 */
export class MockEmbedder implements Embedder {
  /** Milliseconds of simulated compute so far (before the speedup ratio). */
  simulatedMs = 0;

  constructor(
    readonly dimensions: number,
    private readonly pooling: EmbeddingPooling,
    private readonly normalize: boolean,
    /** Spend the time the perf model predicts for a prefill of the batch's tokens, like the mocker engine. */
    private readonly timing?: MockEmbedderTiming,
  ) {}

  async embed(inputs: readonly ArrayLike<number>[], signal?: AbortSignal): Promise<Float32Array> {
    if (this.timing !== undefined) {
      let tokens = 0;
      for (const input of inputs) tokens += input.length;
      const ms = this.timing.perfModel.prefillMs(tokens);
      this.simulatedMs += ms;
      // An abort ends the wait early (the native engine stops between passes).
      await sleep(ms / this.timing.speedupRatio, undefined, signal ? { signal } : {}).catch(() => undefined);
    }
    if (signal?.aborted) throw new CancelledError('embed: cancelled by the caller');
    const d = this.dimensions;
    const out = new Float32Array(inputs.length * d);
    const acc = new Float64Array(d);
    inputs.forEach((input, i) => {
      acc.fill(0);
      if (this.pooling === 'mean') {
        for (let t = 0; t < input.length; t++) addSeededVector(acc, seedOf([input[t]!]), 1 / input.length);
      } else {
        addSeededVector(acc, seedOf(input), 1);
      }
      let norm = 0;
      for (let j = 0; j < d; j++) norm += acc[j]! * acc[j]!;
      const scale = this.normalize ? 1 / Math.max(Math.sqrt(norm), 1e-12) : 1;
      for (let j = 0; j < d; j++) out[i * d + j] = acc[j]! * scale;
    });
    return out;
  }

  async close(): Promise<void> {}
}

function seedOf(tokens: ArrayLike<number>): number {
  const bytes = new Uint8Array(Uint32Array.from(tokens).buffer);
  return Number(xxh3Seeded(bytes) & 0xffffffffn);
}

/** acc += weight × (components uniform in [-1, 1) from SeededRandom(seed)). */
function addSeededVector(acc: Float64Array, seed: number, weight: number): void {
  const rng = new SeededRandom(seed);
  for (let j = 0; j < acc.length; j++) acc[j]! += weight * (rng.next() * 2 - 1);
}
