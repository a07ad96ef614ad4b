/**
 * A decision's cost rows as the dashboard and `router_decisions` carry them (proto/dashboard.ts):
 * one shape for the embedded router's listener and the standalone router's event. Under
 * `--router-cost latency` each row also carries what it predicted, so the dashboard can set the
 * winner's predicted TTFT beside the one it measures.
 */
import type { RouterDecisionCandidate } from '../../proto/wire.js';
import type { CostRow } from '../cost.js';

export function decisionCandidates(costs: readonly CostRow[]): RouterDecisionCandidate[] {
  return costs.map((c) => {
    const line: RouterDecisionCandidate = { instanceId: c.instanceId, overlapBlocks: c.cachedBlocks, cost: c.cost };
    if (c.latency !== undefined) {
      line.predictedTtftMs = c.latency.ttftMs;
      line.predictedItlMs = c.latency.itlMs;
    }
    return line;
  });
}
