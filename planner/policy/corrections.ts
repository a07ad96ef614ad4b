/**
 * Correction factors: measured ÷ expected TTFT and ITL, smoothed. What the model misses
 * (prefix-cache hits make TTFT shorter, uneven routing makes queues longer) shows up here and
 * is folded back by dividing the target: aim for T / factor. Clamped so one bad interval (or a
 * broken metric) cannot drive the pool to its max or its min.
 *
 * Worked: smoothing 0.5, factor 1; measured 600 ms vs expected 400 → ratio 1.5 → factor 1.25;
 * a TTFT target of 500 ms is then sized as 400 ms.
 */
export const CORRECTION_BOUNDS = [0.5, 3] as const;

export class CorrectionFactors {
  ttft = 1;
  itl = 1;

  constructor(readonly smoothing = 0.5) {}

  observeTtft(measuredMs: number | undefined, expectedMs: number | undefined): void {
    this.ttft = this.fold(this.ttft, measuredMs, expectedMs);
  }

  observeItl(measuredMs: number | undefined, expectedMs: number | undefined): void {
    this.itl = this.fold(this.itl, measuredMs, expectedMs);
  }

  private fold(current: number, measured: number | undefined, expected: number | undefined): number {
    if (measured === undefined || expected === undefined || !(measured > 0) || !(expected > 0)) return current;
    const ratio = Math.min(CORRECTION_BOUNDS[1], Math.max(CORRECTION_BOUNDS[0], measured / expected));
    return (1 - this.smoothing) * current + this.smoothing * ratio;
  }
}
