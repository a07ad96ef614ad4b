/**
 * How a process counts the signals that stop it: the first starts a graceful stop (drain), a
 * second means "now". One Ctrl-C can arrive twice: the terminal sends SIGINT to its whole
 * foreground process group, and a wrapper in that group forwards what it got to its child as
 * well (npm and npx forward SIGINT and SIGTERM to the command they run). So a repeat of the same
 * signal within `DUPLICATE_SIGNAL_MS` of the first is that same Ctrl-C, not a second one; a
 * person pressing Ctrl-C again is slower than that. Pure: the clock is an argument.
 */

/** A repeat of the first signal this soon after it is a copy (a wrapper's forward), not a second press. */
export const DUPLICATE_SIGNAL_MS = 500;

export type StopSignalAction = 'drain' | 'duplicate' | 'now';

export class StopSignals {
  private first: { signal: string; atMs: number } | undefined;

  constructor(private readonly duplicateMs = DUPLICATE_SIGNAL_MS) {}

  /** What to do with `signal`, received at `nowMs`. */
  receive(signal: string, nowMs: number): StopSignalAction {
    if (this.first === undefined) {
      this.first = { signal, atMs: nowMs };
      return 'drain';
    }
    return signal === this.first.signal && nowMs - this.first.atMs < this.duplicateMs ? 'duplicate' : 'now';
  }
}
