/**
 * MockerEngine: an Engine that keeps no KV and runs no model. A step waits as long as the
 * perf model predicts for its shape (divided by speedupRatio) and returns deterministic
 * tokens. It is how the fleet is tested and simulated without GPUs.
 *
 * Timing: simulated time below 1 ms is not slept (timers cannot do better than ~1 ms); it is
 * carried as debt and slept once it reaches a whole millisecond, while the step just yields
 * with setImmediate. Oversleep is credited back (up to 5 ms). So speedup 1000 runs near
 * compute-free, yet the long-run rate stays true.
 *
 * EOS: the mocker emits an EOS id (the first of eosTokenIds) only when asked:
 *   - engine-wide: `eosAfterTokens: n` → the output token at index n (the n+1-th) is EOS;
 *   - per request: sampling.seed = MOCKER_EOS_SEED_BASE + n → likewise for that request.
 * Otherwise EOS ids are never sampled. Output index = position − numPromptTokens, so a
 * migrated request (prior outputs folded into its prompt) counts from its new prompt.
 *
 * Structured output: with `allowedTokens` the usual choice stands if allowed (an asked-for EOS
 * included), else the first allowed token after it (wrapping), skipping EOS while any other
 * token is allowed; so EOS comes by chance only when the grammar allows nothing else (closing
 * mode at a complete match).
 */
import type { Engine, EngineDrafter, EngineInfo, SampledToken, StepBatch, StepResult, StepSequence, TokenSample } from '../engine.js';
import { DECODE_FLOOR_MS, NATIVE_CPU_LORA_COST, PolynomialPerfModel, loraStepFactor, verifyStepMs, type LoraCost, type PerfModel, type StepShape } from '../../../perf-model/index.js';
import { UnavailableError } from '../../../runtime/index.js';
import { applyMockLogitBias, mockDraftHits, mockLogprob, mockTokenAt, nextAllowedToken } from './tokens.js';

/** A request seed at or above this asks for EOS after (seed − base) output tokens. */
export const MOCKER_EOS_SEED_BASE = 1_000_000_000;

/** Oversleep carried forward as credit at most this much, so a stall does not cause a burst. */
const MAX_CREDIT_MS = 5;

export interface MockerConfig {
  numBlocks: number;
  blockSize?: number;
  /** Default 32000. */
  vocabSize?: number;
  /** Engine-wide token seed; default 0. */
  seed?: number;
  /** Divides simulated time; default 1 (real time). */
  speedupRatio?: number;
  perfModel?: PerfModel;
  /** EOS ids: never sampled by chance; the first one is emitted when EOS is asked for. */
  eosTokenIds?: number[];
  eosAfterTokens?: number;
  /** Layers the modelled forward pass is split into for `onLayers` (default 1). */
  numLayers?: number;
  /**
   * Called after each modelled layer of a step with how many layers are done (1..numLayers):
   * the step's time is spent layer by layer, so a prefill worker can publish per-layer
   * readiness (workers/disagg/layer-ready.ts) while the step still runs.
   */
  onLayers?: (batch: StepBatch, layersDone: number) => void;
  /** Extra step time of LoRA adapters in a batch; default NATIVE_CPU_LORA_COST. */
  loraCost?: LoraCost;
  /**
   * Speculative decoding, modelled: drafts are the mocker's own next tokens, each right with
   * probability `acceptance` (independently, by a hash of its position), so acceptance is a
   * parameter a fleet or planner bench sets. Verify steps cost what the perf model charges.
   */
  speculative?: { acceptance: number };
}

export class MockerEngine implements Engine {
  readonly info: EngineInfo;
  readonly perfModel: PerfModel;
  readonly speedupRatio: number;
  private readonly seed: number;
  private readonly eosTokenIds: number[];
  private readonly eosAfterTokens: number | undefined;
  private readonly numLayers: number;
  private readonly onLayers: ((batch: StepBatch, layersDone: number) => void) | undefined;
  private debtMs = 0;
  private closed = false;
  private readonly loraCost: LoraCost;
  private readonly loraSlots = new Set<number>();
  private readonly draftAcceptance: number;
  /** Speculative decoding: the mocker keeps no per-sequence drafter state (its drafts are a hash). */
  readonly drafter: EngineDrafter | undefined;
  /** Sum of simulated (unscaled) step time, for tests and reports. */
  simulatedMs = 0;
  numSteps = 0;

  constructor(config: MockerConfig) {
    this.info = {
      kind: 'mocker',
      vocabSize: config.vocabSize ?? 32000,
      kvBytesPerToken: 0,
      numBlocks: config.numBlocks,
      blockSize: config.blockSize ?? 16,
    };
    this.perfModel = config.perfModel ?? new PolynomialPerfModel();
    this.speedupRatio = config.speedupRatio ?? 1;
    if (!(this.speedupRatio > 0)) throw new RangeError('speedupRatio must be > 0');
    this.seed = config.seed ?? 0;
    this.eosTokenIds = config.eosTokenIds ?? [];
    this.eosAfterTokens = config.eosAfterTokens;
    this.numLayers = Math.max(1, Math.floor(config.numLayers ?? 1));
    this.onLayers = config.onLayers;
    this.loraCost = config.loraCost ?? NATIVE_CPU_LORA_COST;
    this.draftAcceptance = config.speculative?.acceptance ?? 0;
    if (!(this.draftAcceptance >= 0 && this.draftAcceptance <= 1)) throw new RangeError('speculative.acceptance must be in [0, 1]');
    this.drafter = config.speculative !== undefined ? { method: 'mocker', begin: () => undefined, end: () => undefined } : undefined;
  }

  async step(batch: StepBatch): Promise<StepResult> {
    if (this.closed) throw new UnavailableError('mocker engine is closed');
    const ms = verifyStepMs(this.perfModel, this.shapeOf(batch), draftTokensOf(batch)) * loraStepFactor(this.loraCost, distinctLoraSlots(batch));
    this.simulatedMs += ms;
    this.numSteps++;
    // The simulated forward pass starts now; masks are filled while it "runs" (the timer),
    // then the tokens are chosen among them.
    const forward = this.onLayers === undefined ? this.wait(ms / this.speedupRatio) : this.layerByLayer(batch, ms / this.speedupRatio, this.onLayers);
    batch.prepareSampling?.();
    const sampled: SampledToken[] = [];
    for (const s of batch.sequences) if (s.sample) sampled.push(this.sample(s));
    await forward;
    return { sampled };
  }

  async close(): Promise<void> {
    this.closed = true;
  }

  /** Multi-LoRA: the mocker keeps no factors, only which slots are filled (for the step cost). */
  async loadLora(slot: number): Promise<void> {
    this.loraSlots.add(slot);
  }

  async unloadLora(slot: number): Promise<void> {
    this.loraSlots.delete(slot);
  }

  /** The step shape the perf model sees; a single new token past the prompt is a decode. */
  shapeOf(batch: StepBatch): StepShape {
    let prefillTokens = 0;
    let numDecodeSeqs = 0;
    for (const s of batch.sequences) {
      const drafts = s.numDraftTokens ?? 0;
      if (s.tokenIds.length - drafts === 1 && s.startPos >= s.numPromptTokens) numDecodeSeqs++;
      else prefillTokens += s.tokenIds.length;
    }
    return { prefillTokens, numDecodeSeqs, kvUsage: batch.kvUsage ?? 0 };
  }

  /**
   * The token(s) the mocker samples for one sequence: one, or in a verify step one per
   * position after the last token and after each draft, kept while they equal the drafts.
   */
  private sample(s: StepSequence): SampledToken {
    const k = s.numDraftTokens ?? 0;
    const first = s.startPos + s.tokenIds.length - k;  // position of the token sampled after the last real one
    const words = k > 0 && s.allowedTokens !== undefined ? s.allowedTokens.length / (k + 1) : 0;
    const row = (j: number): Uint32Array | undefined => (k > 0 && s.allowedTokens !== undefined ? s.allowedTokens.subarray(j * words, (j + 1) * words) : s.allowedTokens);
    const out: SampledToken = { seqId: s.seqId, ...this.tokenAt(s, first, row(0)) };
    for (let j = 0; j < k; j++) {
      const kept = j === 0 ? out.tokenId : out.following![j - 1]!.tokenId;
      if (kept !== s.tokenIds[s.tokenIds.length - k + j]) break;
      (out.following ??= []).push(this.tokenAt(s, first + j + 1, row(j + 1)));
    }
    const propose = s.proposeDrafts ?? 0;
    if (propose > 0) {
      // After this step the sequence ends at position first + returned - 1; drafts predict the positions after it.
      const next = first + 1 + (out.following?.length ?? 0);
      out.drafts = mockDraftHits(this.seed, s.requestSeed, next, propose, this.draftAcceptance, this.info.vocabSize, this.eosTokenIds);
      out.draftScores = new Float32Array(propose).fill(NaN);
    }
    return out;
  }

  /** The mocker's token at `position` of a sequence (its request's EOS, logit bias and mask applied). */
  private tokenAt(s: StepSequence, position: number, allowed: Uint32Array | undefined): TokenSample {
    const outputIndex = position - s.numPromptTokens;
    const eosAt = this.eosIndexFor(s);
    const bias = s.sampling.logitBias;
    let tokenId =
      eosAt !== undefined && outputIndex === eosAt
        ? this.eosTokenIds[0]!
        : mockTokenAt(this.seed, s.requestSeed, position, this.info.vocabSize, this.eosTokenIds);
    if (bias !== undefined && bias.length > 0) {
      tokenId = applyMockLogitBias(tokenId, bias, this.info.vocabSize, (avoid) => mockTokenAt(this.seed, s.requestSeed, position, this.info.vocabSize, [...this.eosTokenIds, ...avoid]));
    }
    if (allowed !== undefined) tokenId = nextAllowedToken(allowed, tokenId, this.info.vocabSize, this.eosTokenIds);
    const out: TokenSample = { tokenId };
    if (s.logprobs !== undefined) {
      const lp = mockLogprob(this.seed, s.requestSeed, position);
      out.logprob = lp;
      if (s.logprobs > 0) {
        const top: Array<{ tokenId: number; logprob: number }> = [{ tokenId, logprob: lp }];
        for (let j = 1; j < s.logprobs; j++) {
          top.push({ tokenId: (tokenId + j) % this.info.vocabSize, logprob: lp - j * 0.5 });
        }
        out.topLogprobs = top;
      }
    }
    return out;
  }

  private eosIndexFor(s: StepSequence): number | undefined {
    if (this.eosTokenIds.length === 0) return undefined;
    const seed = s.sampling.seed;
    if (seed !== undefined && seed >= MOCKER_EOS_SEED_BASE) return seed - MOCKER_EOS_SEED_BASE;
    return this.eosAfterTokens;
  }

  private async layerByLayer(batch: StepBatch, ms: number, onLayers: (batch: StepBatch, layersDone: number) => void): Promise<void> {
    for (let layer = 1; layer <= this.numLayers; layer++) {
      await this.wait(ms / this.numLayers);
      onLayers(batch, layer);
    }
  }

  private async wait(ms: number): Promise<void> {
    this.debtMs += ms;
    if (this.debtMs < DECODE_FLOOR_MS) {
      await new Promise<void>((resolve) => setImmediate(resolve));
      return;
    }
    // Timers oversleep; charge what really elapsed (bounded credit) so the average holds.
    const start = performance.now();
    await new Promise<void>((resolve) => setTimeout(resolve, Math.floor(this.debtMs)));
    this.debtMs = Math.max(-MAX_CREDIT_MS, this.debtMs - (performance.now() - start));
  }
}

function draftTokensOf(batch: StepBatch): number {
  let n = 0;
  for (const s of batch.sequences) n += s.numDraftTokens ?? 0;
  return n;
}

function distinctLoraSlots(batch: StepBatch): number {
  let first: number | undefined;
  let set: Set<number> | undefined;
  for (const s of batch.sequences) {
    if (s.loraSlot === undefined) continue;
    if (first === undefined) first = s.loraSlot;
    else if (s.loraSlot !== first) (set ??= new Set([first])).add(s.loraSlot);
  }
  return set?.size ?? (first === undefined ? 0 : 1);
}
