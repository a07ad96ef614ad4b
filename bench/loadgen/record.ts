/**
 * One measured request and the values derived from it. Times are milliseconds from the
 * start of the measured run. Only raw observations are stored; TTFT, ITL and TPOT are
 * computed from them in one place (here).
 */

export interface RequestRecord {
  /** Launch order within the measured run. */
  index: number;
  session: number;
  turn: number;
  /** When the load model wanted it sent (open loop and trace); null in closed loop. */
  scheduledMs: number | null;
  startMs: number;
  endMs: number;
  ok: boolean;
  errorKind: string | null;
  errorMessage: string | null;
  /** Arrival of every chunk that carried text. */
  chunkTimesMs: Float64Array;
  /** Prompt tokens the workload built, and what the server counted (usage), when it said. */
  islRequested: number;
  islReported: number | null;
  oslRequested: number;
  oslReported: number | null;
  cachedTokens: number | null;
  /** Sequences the request carried: the embeddings batch size; absent = 1 (generation). */
  sequences?: number;
}

export function sequences(r: RequestRecord): number {
  return r.sequences ?? 1;
}

export function ttftMs(r: RequestRecord): number | null {
  return r.chunkTimesMs.length > 0 ? (r.chunkTimesMs[0] as number) - r.startMs : null;
}

export function e2eMs(r: RequestRecord): number {
  return r.endMs - r.startMs;
}

/** Input length: the server's count when reported, else what we built. */
export function isl(r: RequestRecord): number {
  return r.islReported ?? r.islRequested;
}

/** Output length: usage.completion_tokens, else one token per text chunk. */
export function osl(r: RequestRecord): number {
  return r.oslReported ?? r.chunkTimesMs.length;
}

/**
 * Time per output token after the first: (last token - first token) / (osl - 1).
 * Uses the last text chunk, not the stream end, so trailing usage/[DONE] frames do not count.
 */
export function tpotMs(r: RequestRecord): number | null {
  const n = osl(r);
  const c = r.chunkTimesMs;
  if (c.length === 0 || n < 2) return null;
  return ((c[c.length - 1] as number) - (c[0] as number)) / (n - 1);
}

/** Mean gap between consecutive text chunks (equals TPOT when each chunk is one token). */
export function meanItlMs(r: RequestRecord): number | null {
  const c = r.chunkTimesMs;
  if (c.length < 2) return null;
  return ((c[c.length - 1] as number) - (c[0] as number)) / (c.length - 1);
}

/** Append every inter-chunk gap of `r` to `out` starting at `at`; returns the new length. */
export function writeItlGaps(r: RequestRecord, out: Float64Array, at: number): number {
  const c = r.chunkTimesMs;
  for (let i = 1; i < c.length; i++) out[at++] = (c[i] as number) - (c[i - 1] as number);
  return at;
}

/** Time from when the request should have started to when it did. */
export function scheduleLagMs(r: RequestRecord): number | null {
  return r.scheduledMs === null ? null : r.startMs - r.scheduledMs;
}
