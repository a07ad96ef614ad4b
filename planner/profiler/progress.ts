/**
 * The profiler's progress bar on stderr. On a TTY it is one line rewritten in place (`\r`); on
 * anything else (a pipe, a CI log) it prints a plain line when the phase changes and at most
 * every `periodMs`, so logs stay readable. The bar text is a pure function.
 */

export interface ProgressSink {
  write(text: string): unknown;
  isTTY?: boolean;
}

/** `[########------------]  40%  12/30 requests  decode ctx 1024 × 64` */
export function progressLine(done: number, total: number, label: string, width = 24): string {
  const frac = total > 0 ? Math.min(1, done / total) : 1;
  const filled = Math.round(frac * width);
  const pct = String(Math.floor(frac * 100)).padStart(3);
  return `[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${pct}%  ${done}/${total} requests  ${label}`;
}

export class ProgressBar {
  private done = 0;
  private label = '';
  private lastPrintMs = -Infinity;
  private lastLabel = '';
  private readonly tty: boolean;

  constructor(
    private readonly total: number,
    private readonly out: ProgressSink = process.stderr,
    private readonly now: () => number = () => performance.now(),
    private readonly periodMs = 2000,
  ) {
    this.tty = out.isTTY === true;
  }

  phase(label: string): void {
    this.label = label;
    this.render();
  }

  tick(n = 1): void {
    this.done += n;
    this.render();
  }

  finish(message: string): void {
    if (this.tty) this.out.write(`\r\x1b[2K${message}\n`);
    else this.out.write(`profile: ${message}\n`);
  }

  private render(): void {
    const line = progressLine(this.done, this.total, this.label);
    if (this.tty) {
      this.out.write(`\r\x1b[2K${line}`);
      return;
    }
    const t = this.now();
    if (this.label !== this.lastLabel || t - this.lastPrintMs >= this.periodMs || this.done === this.total) {
      this.lastLabel = this.label;
      this.lastPrintMs = t;
      this.out.write(`profile: ${line}\n`);
    }
  }
}
