/**
 * BatchMarshal: flattens a StepBatch into the addon's typed arrays (layouts in
 * native/lib/binding.ts). Buffers grow to the largest batch seen and are reused, so a
 * steady-state step allocates only the subarray views. History is copied only for sequences
 * whose sampling uses penalties; logit bias only for sampled sequences that set it; masks only
 * for sampled sequences with a grammar (one row each); everything else is O(new tokens + block table).
 */
import type { SamplingOptions } from '../../../proto/wire.js';
import { SAMPLING_STRIDE, SEQ_META_STRIDE, SPEC_META_STRIDE, SamplingField, SeqMeta, SpecMeta } from '../../../native/index.js';
import type { StepBatch } from '../engine.js';

export interface MarshalledBatch {
  tokens: Int32Array;
  seqMeta: Int32Array;
  blockTables: Int32Array;
  history: Int32Array;
  sampling: Float64Array;
  /** Logit bias entries of every sampled sequence, back to back (seqMeta biasOffset/biasLen). */
  biasIds: Int32Array;
  biasValues: Float32Array;
  /**
   * Structured output, undefined when no sequence in the batch has a mask: per sequence its
   * row in allowedMasks (-1 = none), and the masks back to back (`maskWords` words each).
   */
  maskRows?: Int32Array;
  allowedMasks?: Uint32Array;
  /** seqId of each sampled row, in batch order. */
  sampledSeqIds: number[];
  /** Multi-LoRA: adapter slot per sequence (-1 = base), undefined when no sequence has one. */
  loraSlots?: Int32Array;
  /** Speculative decoding: SPEC_META_STRIDE fields per sequence, undefined when no sequence drafts or verifies. */
  specMeta?: Int32Array;
}

const SEED_RANGE = 2 ** 53;

function usesPenalties(s: SamplingOptions): boolean {
  return (
    (s.repetitionPenalty !== undefined && s.repetitionPenalty !== 1) ||
    (s.presencePenalty !== undefined && s.presencePenalty !== 0) ||
    (s.frequencyPenalty !== undefined && s.frequencyPenalty !== 0)
  );
}

/** Seeds cross as f64: map any number onto an exact non-negative integer below 2^53. */
function seedOf(s: SamplingOptions, requestSeed: number): number {
  const raw = s.seed ?? requestSeed;
  const n = Number.isFinite(raw) ? Math.trunc(raw) : 0;
  return ((n % SEED_RANGE) + SEED_RANGE) % SEED_RANGE;
}

export class BatchMarshal {
  private tokens: Int32Array = new Int32Array(256);
  private meta: Int32Array = new Int32Array(16 * SEQ_META_STRIDE);
  private tables: Int32Array = new Int32Array(1024);
  private history: Int32Array = new Int32Array(256);
  private sampling: Float64Array = new Float64Array(16 * SAMPLING_STRIDE);
  private biasIds: Int32Array = new Int32Array(0);
  private biasValues: Float32Array = new Float32Array(0);
  private maskRows: Int32Array = new Int32Array(16);
  private masks: Uint32Array = new Uint32Array(0);

  /** @param maskWords words per allowed-token mask row: ceil(model vocab / 32). */
  constructor(private readonly maskWords = 0) {}

  marshal(batch: StepBatch): MarshalledBatch {
    const seqs = batch.sequences;
    let numTokens = 0;
    let numBlocks = 0;
    let numHistory = 0;
    let numBias = 0;
    for (const s of seqs) {
      numTokens += s.tokenIds.length;
      numBlocks += s.blockTable.length;
      if (s.sample && usesPenalties(s.sampling)) numHistory += s.history.length;
      if (s.sample && s.sampling.logitBias !== undefined) numBias += s.sampling.logitBias.length;
    }
    this.tokens = grow(this.tokens, numTokens);
    this.meta = grow(this.meta, seqs.length * SEQ_META_STRIDE);
    this.tables = grow(this.tables, numBlocks);
    this.history = grow(this.history, numHistory);
    this.sampling = growF64(this.sampling, seqs.length * SAMPLING_STRIDE);
    if (this.biasIds.length < numBias) {
      this.biasIds = new Int32Array(Math.max(numBias, this.biasIds.length * 2));
      this.biasValues = new Float32Array(this.biasIds.length);
    }

    const sampledSeqIds: number[] = [];
    let tokenAt = 0;
    let blockAt = 0;
    let historyAt = 0;
    let biasAt = 0;
    for (let i = 0; i < seqs.length; i++) {
      const s = seqs[i]!;
      this.tokens.set(s.tokenIds, tokenAt);
      tokenAt += s.tokenIds.length;
      this.tables.set(s.blockTable, blockAt);
      const m = i * SEQ_META_STRIDE;
      this.meta[m + SeqMeta.numTokens] = s.tokenIds.length;
      this.meta[m + SeqMeta.startPos] = s.startPos;
      this.meta[m + SeqMeta.blockOffset] = blockAt;
      this.meta[m + SeqMeta.numBlocks] = s.blockTable.length;
      this.meta[m + SeqMeta.sample] = s.sample ? 1 : 0;
      this.meta[m + SeqMeta.topLogprobs] = s.logprobs === undefined ? -1 : s.logprobs;
      blockAt += s.blockTable.length;

      const sp = s.sampling;
      let historyLen = 0;
      if (s.sample && usesPenalties(sp)) {
        historyLen = s.history.length;
        if (s.history instanceof Int32Array) this.history.set(s.history, historyAt);
        else for (let j = 0; j < historyLen; j++) this.history[historyAt + j] = s.history[j]!;
      }
      this.meta[m + SeqMeta.historyOffset] = historyAt;
      this.meta[m + SeqMeta.historyLen] = historyLen;
      this.meta[m + SeqMeta.numPrompt] = s.numPromptTokens;
      historyAt += historyLen;

      const bias = s.sample ? sp.logitBias : undefined;
      this.meta[m + SeqMeta.biasOffset] = biasAt;
      this.meta[m + SeqMeta.biasLen] = bias?.length ?? 0;
      if (bias !== undefined) {
        for (const [id, value] of bias) {
          // Out-of-range ids become -1, which the sampler skips (Int32Array would wrap them).
          this.biasIds[biasAt] = Number.isInteger(id) && id >= 0 && id <= 0x7fffffff ? id : -1;
          this.biasValues[biasAt] = value;
          biasAt++;
        }
      }

      const f = i * SAMPLING_STRIDE;
      this.sampling[f + SamplingField.temperature] = sp.temperature ?? 1;
      this.sampling[f + SamplingField.topP] = sp.topP ?? 1;
      this.sampling[f + SamplingField.topK] = sp.topK === undefined || sp.topK < 0 ? 0 : sp.topK;
      this.sampling[f + SamplingField.minP] = sp.minP ?? 0;
      this.sampling[f + SamplingField.presencePenalty] = sp.presencePenalty ?? 0;
      this.sampling[f + SamplingField.frequencyPenalty] = sp.frequencyPenalty ?? 0;
      this.sampling[f + SamplingField.repetitionPenalty] = sp.repetitionPenalty ?? 1;
      this.sampling[f + SamplingField.seed] = seedOf(sp, s.requestSeed);
      if (s.sample) sampledSeqIds.push(s.seqId);
    }
    return {
      tokens: this.tokens.subarray(0, numTokens),
      seqMeta: this.meta.subarray(0, seqs.length * SEQ_META_STRIDE),
      blockTables: this.tables.subarray(0, numBlocks),
      history: this.history.subarray(0, numHistory),
      sampling: this.sampling.subarray(0, seqs.length * SAMPLING_STRIDE),
      biasIds: this.biasIds.subarray(0, numBias),
      biasValues: this.biasValues.subarray(0, numBias),
      ...this.marshalMasks(batch),
      sampledSeqIds,
      ...this.marshalLoras(batch),
      ...this.marshalSpec(batch),
    };
  }

  private specMeta: Int32Array = new Int32Array(16 * SPEC_META_STRIDE);

  /** Speculative decoding: drafts to verify and drafts to propose, keyed by seqId for the drafter. */
  private marshalSpec(batch: StepBatch): { specMeta?: Int32Array } {
    const seqs = batch.sequences;
    if (!seqs.some((s) => (s.numDraftTokens ?? 0) > 0 || s.proposeDrafts !== undefined)) return {};
    this.specMeta = grow(this.specMeta, seqs.length * SPEC_META_STRIDE);
    for (let i = 0; i < seqs.length; i++) {
      const s = seqs[i]!;
      const m = i * SPEC_META_STRIDE;
      this.specMeta[m + SpecMeta.numDrafts] = s.numDraftTokens ?? 0;
      this.specMeta[m + SpecMeta.proposeDrafts] = s.proposeDrafts ?? 0;
      // The drafter follows every sequence it was told about, whether it drafts for it this step or not.
      this.specMeta[m + SpecMeta.draftKey] = s.proposeDrafts !== undefined ? s.seqId : -1;
    }
    return { specMeta: this.specMeta.subarray(0, seqs.length * SPEC_META_STRIDE) };
  }

  private loraSlots: Int32Array = new Int32Array(16);

  private marshalLoras(batch: StepBatch): { loraSlots?: Int32Array } {
    const seqs = batch.sequences;
    if (!seqs.some((s) => s.loraSlot !== undefined)) return {};
    this.loraSlots = grow(this.loraSlots, seqs.length);
    for (let i = 0; i < seqs.length; i++) this.loraSlots[i] = seqs[i]!.loraSlot ?? -1;
    return { loraSlots: this.loraSlots.subarray(0, seqs.length) };
  }

  /**
   * The batch's structured-output masks as the addon's maskRows/allowedMasks, or {} when no
   * sampled sequence has one. Separate from marshal() so masks filled while the forward pass
   * runs (deferMasks) are marshalled after it started.
   */
  marshalMasks(batch: StepBatch): { maskRows?: Int32Array; allowedMasks?: Uint32Array } {
    const seqs = batch.sequences;
    // A verify sequence brings one row per sampled position (numDraftTokens + 1).
    let numMasks = 0;
    for (const s of seqs) if (s.sample && s.allowedTokens !== undefined) numMasks += 1 + (s.numDraftTokens ?? 0);
    if (numMasks === 0) return {};
    const words = this.maskWords;
    this.maskRows = grow(this.maskRows, seqs.length);
    if (this.masks.length < numMasks * words) this.masks = new Uint32Array(Math.max(numMasks, 2 * (this.masks.length / Math.max(1, words))) * words);
    let maskAt = 0;
    for (let i = 0; i < seqs.length; i++) {
      const s = seqs[i]!;
      const mask = s.sample ? s.allowedTokens : undefined;
      if (mask === undefined) {
        this.maskRows[i] = -1;
        continue;
      }
      // A shorter mask (grammar vocabulary smaller than the model's padded one) leaves the
      // padding ids disallowed: the copy is zero-filled past it.
      const rows = 1 + (s.numDraftTokens ?? 0);
      const width = mask.length / rows;
      this.maskRows[i] = maskAt;
      for (let r = 0; r < rows; r++) {
        const row = this.masks.subarray(maskAt * words, (maskAt + 1) * words);
        const src = mask.subarray(r * width, (r + 1) * width);
        if (width >= words) row.set(src.subarray(0, words));
        else {
          row.set(src);
          row.fill(0, width);
        }
        maskAt++;
      }
    }
    return { maskRows: this.maskRows.subarray(0, seqs.length), allowedMasks: this.masks.subarray(0, numMasks * words) };
  }
}

function grow(a: Int32Array, n: number): Int32Array {
  return a.length >= n ? a : new Int32Array(Math.max(n, a.length * 2));
}

function growF64(a: Float64Array, n: number): Float64Array {
  return a.length >= n ? a : new Float64Array(Math.max(n, a.length * 2));
}
