/** decideDisagg: the per-request rule, with the worked numbers of policy.ts. */
import { describe, expect, it } from 'vitest';
import { decideDisagg, uncachedTokens } from '../../frontend/disagg/policy.js';

const cfg = { minPrefillTokens: 512, enforce: false };
const pools = { prefillWorkers: 2, decodeWorkers: 2 };

describe('decideDisagg', () => {
  it('the uncached part, not the whole prompt, is compared to the threshold', () => {
    // 2000-token prompt, 1600 cached on the chosen decode worker: 400 < 512 → aggregated.
    expect(decideDisagg({ promptTokens: 2000, cachedTokens: 1600, ...pools }, cfg)).toEqual({ kind: 'agg', reason: 'short_prompt', uncachedTokens: 400 });
    // 1400 cached: 600 ≥ 512 → disaggregated.
    expect(decideDisagg({ promptTokens: 2000, cachedTokens: 1400, ...pools }, cfg)).toEqual({ kind: 'disagg', uncachedTokens: 600 });
    // Exactly the threshold disaggregates.
    expect(decideDisagg({ promptTokens: 512, cachedTokens: 0, ...pools }, cfg).kind).toBe('disagg');
  });

  it('no prefill pool: aggregated, or refused under --enforce-disagg; short prompts are never refused', () => {
    const noPrefill = { promptTokens: 4096, cachedTokens: 0, prefillWorkers: 0, decodeWorkers: 2 };
    expect(decideDisagg(noPrefill, cfg)).toMatchObject({ kind: 'agg', reason: 'no_prefill_workers' });
    expect(decideDisagg(noPrefill, { ...cfg, enforce: true })).toEqual({ kind: 'reject', reason: 'no_prefill_workers' });
    expect(decideDisagg({ ...noPrefill, promptTokens: 100 }, { ...cfg, enforce: true })).toMatchObject({ kind: 'agg', reason: 'short_prompt' });
  });

  it('prefill workers without decode-role workers cannot hand off', () => {
    const noDecode = { promptTokens: 4096, cachedTokens: 0, prefillWorkers: 1, decodeWorkers: 0 };
    expect(decideDisagg(noDecode, cfg)).toMatchObject({ kind: 'agg', reason: 'no_decode_workers' });
    expect(decideDisagg(noDecode, { ...cfg, enforce: true })).toEqual({ kind: 'reject', reason: 'no_decode_workers' });
  });

  it('uncachedTokens clamps odd overlap reports', () => {
    expect(uncachedTokens(100, 250)).toBe(0);
    expect(uncachedTokens(100, -5)).toBe(100);
  });
});
