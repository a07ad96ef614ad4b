/**
 * Admission at the HTTP edge, shared by every route that runs work on workers: the gate's
 * verdict becomes the 503 the client sees (and the metric of why), and an admitted request's
 * controller is registered so a drain that runs out of time can cut it.
 */
import type { ServerResponse } from 'node:http';
import type { AdmissionGate } from '../admission.js';
import { ApiError } from '../errors.js';
import type { FrontendMetrics } from '../metrics.js';

/** Books a slot for this request or throws the overload / shutdown error; the caller releases once. */
export function admitOrThrow(gate: AdmissionGate, metrics: FrontendMetrics, res: ServerResponse, controller: AbortController): void {
  const verdict = gate.tryAdmit();
  if (verdict === 'full') {
    metrics.rejected.inc({ reason: 'max_inflight' });
    throw new ApiError('overloaded', `the frontend is at its limit of ${gate.maxInflight} requests in flight; retry later`);
  }
  if (verdict === 'draining') {
    metrics.rejected.inc({ reason: 'draining' });
    // This process is going away: the client should open its next connection elsewhere.
    res.setHeader('connection', 'close');
    throw new ApiError('unavailable', 'the frontend is shutting down; retry the request');
  }
  gate.onCut(controller);
}
