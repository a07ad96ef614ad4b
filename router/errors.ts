/**
 * Typed router errors for adapters. The core itself returns expected outcomes as data
 * (`RouteResult` kind 'all_busy' / 'no_candidates'); an adapter that must throw uses these so
 * the frontend maps codes, not messages, to HTTP (all busy → 503 + Retry-After).
 */
import { TandemError } from '../runtime/errors.js';

export class AllWorkersBusyError extends TandemError {
  override readonly name = 'AllWorkersBusyError';
  constructor(
    readonly retryAfterMs: number,
    message = 'every worker is over its load threshold',
  ) {
    super('resource_exhausted', message);
  }
}
