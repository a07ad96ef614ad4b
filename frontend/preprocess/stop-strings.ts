/**
 * Stop-string matching over streamed text. Text arrives in pieces; a stop string can span
 * pieces, so the matcher holds back the longest tail that could still grow into a stop string
 * and releases it once it cannot. Pure: no tokenizer, no I/O.
 *
 * Invariant: every stop-string occurrence lies inside `pending` when it completes, because any
 * text that was a prefix of a stop string was held rather than released.
 */
export class StopStringMatcher {
  private readonly stops: readonly string[];
  private readonly maxHold: number;
  private pending = '';
  private matchedStop: string | undefined;

  /**
   * @param stops stop strings; empty ones are ignored
   * @param includeStop emit the matched stop string itself (vLLM's include_stop_str_in_output)
   */
  constructor(
    stops: readonly string[],
    private readonly includeStop = false,
  ) {
    this.stops = stops.filter((s) => s.length > 0);
    this.maxHold = this.stops.reduce((m, s) => Math.max(m, s.length - 1), 0);
  }

  get hasStops(): boolean {
    return this.stops.length > 0;
  }

  /** The stop string that matched; after a match the matcher accepts nothing more. */
  get matched(): string | undefined {
    return this.matchedStop;
  }

  /** Text currently held back. */
  get heldText(): string {
    return this.pending;
  }

  /** Add text; returns the part safe to emit now (up to the stop, when one matched). */
  push(text: string): string {
    if (this.matchedStop !== undefined) return '';
    if (this.stops.length === 0) return text;
    const buf = this.pending + text;
    let at = -1;
    let matched: string | undefined;
    for (const stop of this.stops) {
      const i = buf.indexOf(stop);
      // Earliest occurrence wins; at the same position the longer string (it contains the other).
      if (i >= 0 && (at < 0 || i < at || (i === at && stop.length > matched!.length))) {
        at = i;
        matched = stop;
      }
    }
    if (matched !== undefined) {
      this.matchedStop = matched;
      this.pending = '';
      return buf.slice(0, this.includeStop ? at + matched.length : at);
    }
    const hold = this.holdLength(buf);
    this.pending = hold > 0 ? buf.slice(buf.length - hold) : '';
    return hold > 0 ? buf.slice(0, buf.length - hold) : buf;
  }

  /** Release held text: the stream ended without completing a stop string. */
  flush(): string {
    const text = this.pending;
    this.pending = '';
    return text;
  }

  /** Longest suffix of `buf` that is a proper prefix of some stop string. */
  private holdLength(buf: string): number {
    const limit = Math.min(this.maxHold, buf.length);
    for (let k = limit; k > 0; k--) {
      const from = buf.length - k;
      for (const stop of this.stops) {
        if (stop.length > k && sameRun(buf, from, stop, k)) return k;
      }
    }
    return 0;
  }
}

/** buf[from, from + k) === stop[0, k), without allocating. */
function sameRun(buf: string, from: number, stop: string, k: number): boolean {
  for (let i = 0; i < k; i++) if (buf.charCodeAt(from + i) !== stop.charCodeAt(i)) return false;
  return true;
}
