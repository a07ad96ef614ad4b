/**
 * Load mode: react to what the workers report, no model, no prediction. Dynamo's rule: one
 * worker up when a signal crosses its scale-up threshold, one down when every signal is below
 * its scale-down threshold.
 *
 *   prefill signal = queued prefill tokens per worker ÷ context length
 *                    (how many full-context prompts each worker has waiting)
 *   decode signal  = mean KV usage
 *   agg            = both signals on the one pool
 *
 * Worked (throughput thresholds 5 / 0.2, context 8192): 4 prefill workers with 196,608 queued
 * tokens → 196608 / 4 / 8192 = 6 > 5 → 5 workers.
 */
import type { LoadThresholds } from './config.js';
import type { Rule } from './decision.js';
import type { PoolName, PoolObservation } from './observation.js';

export interface LoadDecision {
  desired: number;
  rule: Extract<Rule, 'load.up' | 'load.down' | 'load.within'>;
  reason: string;
}

export function prefillQueueLoad(pool: PoolObservation, contextLength: number): number {
  return pool.queuedPrefillTokens / Math.max(1, pool.ready) / contextLength;
}

export function loadDecision(name: PoolName, pool: PoolObservation, t: LoadThresholds, contextLength: number): LoadDecision {
  const current = pool.replicas;
  const q = prefillQueueLoad(pool, contextLength);
  const kv = pool.kvUsage;
  const qText = `prefill queue ${q.toFixed(2)} (up > ${t.prefillQueueUp}, down < ${t.prefillQueueDown})`;
  const kvText = `KV ${kv.toFixed(2)} (up > ${t.kvUp}, down < ${t.kvDown})`;
  const usesQueue = name !== 'decode';
  const usesKv = name !== 'prefill';
  const text = [usesQueue ? qText : '', usesKv ? kvText : ''].filter(Boolean).join(', ');
  const up = (usesQueue && q > t.prefillQueueUp) || (usesKv && kv > t.kvUp);
  const down = (!usesQueue || q < t.prefillQueueDown) && (!usesKv || kv < t.kvDown);
  if (up) return { desired: current + 1, rule: 'load.up', reason: `${text} → +1` };
  if (down) return { desired: current - 1, rule: 'load.down', reason: `${text} → −1` };
  return { desired: current, rule: 'load.within', reason: `${text} → keep` };
}
