/** Typed failures of a supervised child's start-up, with the child's name and where its log is. */
import { TandemError } from '../errors.js';

/** The child exited before printing what we waited for. */
export class ChildExitedError extends TandemError {
  override readonly name = 'ChildExitedError';
  constructor(
    readonly child: string,
    readonly exitCode: number | null,
    readonly signal: NodeJS.Signals | null,
    what: string,
    logHint: string,
  ) {
    super('unavailable', `${child} exited (code ${exitCode}, signal ${signal}) before '${what}'; ${logHint}`);
  }
}

/** The child is running but did not print what we waited for in time. */
export class ChildStartTimeoutError extends TandemError {
  override readonly name = 'ChildStartTimeoutError';
  constructor(
    readonly child: string,
    what: string,
    timeoutMs: number,
    logHint: string,
  ) {
    super('deadline_exceeded', `${child}: no '${what}' within ${timeoutMs} ms; ${logHint}`);
  }
}
