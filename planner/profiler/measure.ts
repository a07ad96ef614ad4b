/**
 * The profiler's I/O: streams sent over the request plane straight to one worker's generate
 * endpoint (no frontend, no router), timed on arrival. Every prompt is fresh random token ids,
 * so no request starts with a prefix another already cached.
 *
 * Prefill: one request at a time with max_tokens 1; TTFT is send → first token.
 * Decode: `concurrency` streams at once. Their prefills are staggered over several steps, so ITL
 * is read only inside the window where every stream is decoding: from the last first-token to
 * the first stream end. Per stream, ITL = window time ÷ tokens it received in the window; the
 * point's ITL is the mean over streams.
 */
import type { PreprocessedRequest, TokenDelta } from '../../proto/wire.js';
import type { CallTarget, RequestPlaneClient } from '../../runtime/index.js';
import { SeededRandom } from '../../runtime/random.js';
import type { DecodePoint, PrefillPoint } from './sweep.js';

export interface ProfileTarget extends CallTarget {
  /** Served model name (the card's). */
  model: string;
  /** Token ids are drawn from [0, vocabSize) minus `avoidTokenIds` (EOS). */
  vocabSize: number;
  avoidTokenIds: number[];
}

export interface PrefillMeasurement {
  isl: number;
  /** Median over samples, ms. */
  ttftMs: number;
  /** isl ÷ TTFT. */
  tokensPerS: number;
  samplesMs: number[];
}

export interface DecodeMeasurement {
  contextLength: number;
  concurrency: number;
  /** Mean context of a stream inside the window: its prompt plus half its output. */
  meanContext: number;
  /** concurrency × ⌈meanContext ÷ block⌉ ÷ total blocks: the KV share the worker had in use. */
  kvUsage: number;
  itlMs: number;
  /** Output tokens per second of the worker: concurrency × 1000 ÷ ITL. */
  tokensPerS: number;
  /** Steps (tokens per stream) the ITL was read from. */
  windowTokens: number;
}

/** Arrival times of one stream's deltas, ms since the stream was sent. */
interface StreamTrace {
  sentAt: number;
  times: number[];
  counts: number[];
  tokens: number;
}

export class WorkerProber {
  private seq = 0;
  private readonly rng: SeededRandom;

  constructor(
    private readonly client: RequestPlaneClient,
    private readonly target: ProfileTarget,
    seed = 1,
    private readonly timeoutMs = 300_000,
  ) {
    this.rng = new SeededRandom(seed);
  }

  /** One throw-away request: connection set-up and first-call costs are not measured. */
  async warmUp(): Promise<void> {
    await this.stream(16, 2);
  }

  async prefill(point: PrefillPoint, onRequest: () => void): Promise<PrefillMeasurement> {
    const samplesMs: number[] = [];
    for (let i = 0; i < point.samples; i++) {
      const t = await this.stream(point.isl, 1);
      samplesMs.push(t.times[0]!);
      onRequest();
    }
    const ttftMs = median(samplesMs);
    return { isl: point.isl, ttftMs, tokensPerS: (point.isl * 1000) / ttftMs, samplesMs };
  }

  async decode(point: DecodePoint, kv: { blockSize: number; totalBlocks: number }, onRequest: () => void): Promise<DecodeMeasurement> {
    const traces = await Promise.all(
      Array.from({ length: point.concurrency }, () =>
        this.stream(point.contextLength, point.osl).then((t) => {
          onRequest();
          return t;
        }),
      ),
    );
    const { itlMs, windowTokens } = decodeItl(traces);
    const meanContext = point.contextLength + point.osl / 2;
    const kvUsage = Math.min(1, (point.concurrency * Math.ceil(meanContext / kv.blockSize)) / kv.totalBlocks);
    return { contextLength: point.contextLength, concurrency: point.concurrency, meanContext, kvUsage, itlMs, tokensPerS: (point.concurrency * 1000) / itlMs, windowTokens };
  }

  private async stream(isl: number, maxTokens: number): Promise<StreamTrace> {
    const requestId = `profile-${process.pid}-${++this.seq}`;
    const request: PreprocessedRequest = {
      requestId,
      model: this.target.model,
      tokenIds: this.randomTokens(isl),
      sampling: { seed: this.seq },
      stop: { maxTokens, stopTokenIds: [], ignoreEos: true },
    };
    const sentAt = performance.now();
    const trace: StreamTrace = { sentAt, times: [], counts: [], tokens: 0 };
    // No early `break`: leaving the loop cancels the call (an RST_STREAM); see the request plane README.
    for await (const delta of this.client.call<PreprocessedRequest, TokenDelta>(this.target, request, { requestId, timeoutMs: this.timeoutMs })) {
      const n = delta.tokenIds.length;
      if (n === 0) continue;
      trace.times.push(performance.now() - sentAt);
      trace.counts.push(n);
      trace.tokens += n;
    }
    if (trace.tokens !== maxTokens) throw new Error(`profile: ${requestId} returned ${trace.tokens} of ${maxTokens} tokens`);
    return trace;
  }

  private randomTokens(n: number): number[] {
    const avoid = new Set(this.target.avoidTokenIds);
    const out = new Array<number>(n);
    for (let i = 0; i < n; i++) {
      let t: number;
      do t = Math.floor(this.rng.next() * this.target.vocabSize);
      while (avoid.has(t));
      out[i] = t;
    }
    return out;
  }
}

/**
 * ITL over the window where every stream decodes. A stream's window tokens are those whose
 * delta arrived after the window opened (the delta that opens it is the reference, not
 * counted); windowTokens is their mean. Falls back to each stream's whole decode when the
 * window holds fewer than two deltas of some stream.
 */
export function decodeItl(traces: ReadonlyArray<{ sentAt: number; times: number[]; counts: number[] }>): { itlMs: number; windowTokens: number } {
  const abs = traces.map((t) => t.times.map((x) => x + t.sentAt));
  const open = Math.max(...abs.map((a) => a[0]!));
  const close = Math.min(...abs.map((a) => a[a.length - 1]!));
  let sumItl = 0;
  let sumTokens = 0;
  for (let s = 0; s < traces.length; s++) {
    const times = abs[s]!;
    const counts = traces[s]!.counts;
    let first = -1;
    let last = -1;
    let tokens = 0;
    for (let i = 0; i < times.length; i++) {
      if (times[i]! < open || times[i]! > close) continue;
      if (first < 0) first = times[i]!;
      else tokens += counts[i]!;
      last = times[i]!;
    }
    if (tokens < 2 || last <= first) {
      // No usable window: the whole decode of this stream (first token excluded).
      first = times[0]!;
      last = times[times.length - 1]!;
      tokens = counts.reduce((a, b) => a + b, 0) - counts[0]!;
    }
    sumItl += (last - first) / Math.max(1, tokens);
    sumTokens += tokens;
  }
  return { itlMs: sumItl / traces.length, windowTokens: sumTokens / traces.length };
}

export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}
