/**
 * The one failure of this folder: a profile that cannot be read or does not match the schema.
 * Its code is the runtime's `config_invalid` (a bad profile is a configuration mistake of the
 * process pointed at it); perf-model imports no runtime, so callers that need a TandemError
 * (the worker, the planner) wrap it at their edge.
 */
export class PerfProfileError extends Error {
  override readonly name = 'PerfProfileError';
  readonly code = 'config_invalid' as const;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}
