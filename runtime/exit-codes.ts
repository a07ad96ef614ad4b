/**
 * The process exit codes every `runtime` command uses, in one table (documented in
 * docs/operations.md). Supervisors can tell "fix the command line" (2) from "something this
 * process needs is not there yet, retry later" (4) from a bug (1).
 */
export const EXIT_CODES = {
  /** Clean exit: help, version, or a drained shutdown after SIGTERM/SIGINT. */
  ok: 0,
  /** An unexpected internal failure (a bug): the message and stack trace are printed. */
  internal: 1,
  /** Bad usage or configuration: an unknown flag, a bad value, a model directory that is not one. */
  config: 2,
  /** The discovery lease was lost for longer than its TTL: the process drained and stopped. */
  leaseLost: 3,
  /** Start-up failed on something outside the process: a port in use, etcd or NATS unreachable. */
  unavailable: 4,
  /** A second SIGTERM/SIGINT during the drain: exited at once. */
  interrupted: 130,
} as const;
export type ExitCode = (typeof EXIT_CODES)[keyof typeof EXIT_CODES];
