/**
 * Speculative decoding's metrics on `/metrics`, under vLLM's names so existing dashboards and
 * benchmark scrapers read them unchanged (counters, exposed with `_total` as vLLM's are):
 *
 *   vllm:spec_decode_num_drafts_total                    verify steps of one sequence
 *   vllm:spec_decode_num_draft_tokens_total              drafts verified
 *   vllm:spec_decode_num_accepted_tokens_total           drafts accepted
 *   vllm:spec_decode_num_accepted_tokens_per_pos_total   {position="i"}: verify steps whose draft i (0-based) was accepted
 *
 * Read from the loop's running totals on each scrape. Acceptance rate = accepted / draft tokens;
 * mean acceptance length = 1 + accepted / drafts.
 */
import { Counter, type Registry } from 'prom-client';
import type { SpecTotals } from '../speculative/index.js';

export class SpecMetrics {
  constructor(registry: Registry, model: string, totals: () => SpecTotals | undefined) {
    const base = { model_name: model };
    const counter = (name: string, help: string, value: (t: SpecTotals) => number) => {
      let prev = 0;
      return new Counter({
        name,
        help,
        labelNames: ['model_name'],
        registers: [registry],
        collect() {
          const t = totals();
          if (t === undefined) return;
          // Exposed from the start (at 0), as vLLM's are.
          const v = value(t);
          this.inc(base, v > prev ? v - prev : 0);
          prev = v;
        },
      });
    };
    counter('vllm:spec_decode_num_drafts_total', 'Speculative decoding: verify steps (one per sequence with drafts per step)', (t) => t.drafts);
    counter('vllm:spec_decode_num_draft_tokens_total', 'Speculative decoding: draft tokens verified', (t) => t.draftTokens);
    counter('vllm:spec_decode_num_accepted_tokens_total', 'Speculative decoding: draft tokens accepted', (t) => t.acceptedTokens);
    const prevPos: number[] = [];
    new Counter({
      name: 'vllm:spec_decode_num_accepted_tokens_per_pos_total',
      help: 'Speculative decoding: verify steps whose draft at this position (0-based) was accepted',
      labelNames: ['model_name', 'position'],
      registers: [registry],
      collect() {
        const t = totals();
        if (t === undefined) return;
        t.acceptedPerPos.forEach((v, i) => {
          const d = v - (prevPos[i] ?? 0);
          // Every position is exposed from the start, at 0 until a draft there is accepted.
          this.inc({ ...base, position: String(i) }, d > 0 ? d : 0);
          prevPos[i] = v;
        });
      },
    });
  }
}
