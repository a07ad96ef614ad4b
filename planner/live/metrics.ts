/**
 * `tandem_planner_*` metrics, registered on the caller's prom-client Registry (the process's
 * status server serves it). Everything is set from Decisions and connector outcomes: the policy
 * core stays unaware of metrics.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { Decision } from '../policy/decision.js';
import type { PoolName } from '../policy/observation.js';

export class PlannerMetrics {
  readonly predictedRate: Gauge;
  readonly predictedIsl: Gauge;
  readonly predictedOsl: Gauge;
  readonly surge: Gauge;
  readonly currentReplicas: Gauge;
  readonly desiredReplicas: Gauge;
  readonly targetReplicas: Gauge;
  readonly decisions: Counter;
  readonly correction: Gauge;
  readonly connectorErrors: Counter;

  constructor(registry: Registry) {
    const registers = [registry];
    this.predictedRate = new Gauge({ name: 'tandem_planner_predicted_request_rate', help: 'predicted requests/s for the next interval', registers });
    this.predictedIsl = new Gauge({ name: 'tandem_planner_predicted_isl_tokens', help: 'predicted mean input tokens for the next interval', registers });
    this.predictedOsl = new Gauge({ name: 'tandem_planner_predicted_osl_tokens', help: 'predicted mean output tokens for the next interval', registers });
    this.surge = new Gauge({ name: 'tandem_planner_surge_ratio', help: 'learnt surge (sla mode): the pools also cover the predicted rate × (1 + this) at the full targets', registers });
    this.currentReplicas = new Gauge({ name: 'tandem_planner_current_replicas', help: 'replicas the pool had at the last decision', labelNames: ['pool'], registers });
    this.desiredReplicas = new Gauge({ name: 'tandem_planner_desired_replicas', help: 'replicas the sizing rule asked for, before constraints', labelNames: ['pool'], registers });
    this.targetReplicas = new Gauge({ name: 'tandem_planner_target_replicas', help: 'replicas the planner ordered, after constraints', labelNames: ['pool'], registers });
    this.decisions = new Counter({ name: 'tandem_planner_decisions_total', help: 'decisions by pool, action and rule', labelNames: ['pool', 'action', 'rule'], registers });
    this.correction = new Gauge({ name: 'tandem_planner_correction_factor', help: 'measured ÷ expected latency (sla mode)', labelNames: ['kind'], registers });
    this.connectorErrors = new Counter({ name: 'tandem_planner_connector_errors_total', help: 'connector calls that failed (retried next interval)', labelNames: ['pool', 'kind'], registers });
  }

  record(d: Decision): void {
    const pool = d.pool;
    this.currentReplicas.set({ pool }, d.current);
    this.desiredReplicas.set({ pool }, d.desired);
    this.targetReplicas.set({ pool }, d.target);
    this.decisions.inc({ pool, action: d.action, rule: d.rule });
    if (d.prediction) {
      this.predictedRate.set(d.prediction.rate);
      this.predictedIsl.set(d.prediction.isl);
      this.predictedOsl.set(d.prediction.osl);
      this.surge.set(d.prediction.surge);
    }
    if (d.corrections) {
      this.correction.set({ kind: 'ttft' }, d.corrections.ttft);
      this.correction.set({ kind: 'itl' }, d.corrections.itl);
    }
  }

  connectorError(pool: PoolName | 'all', kind: string): void {
    this.connectorErrors.inc({ pool, kind });
  }
}
