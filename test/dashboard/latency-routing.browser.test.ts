/**
 * `--router-cost latency` over a real fleet, end to end: `runtime up` (2 mocker workers, the
 * flag forwarded to the frontend), streamed requests through the `openai` SDK, and the dashboard
 * in chromium. Every decision's cost rows carry predictions (the frontend's debug log line
 * "routed by predicted latency", one per request, with `latency.ttftMs` on every row), and the
 * Routing panel shows each decision's predicted TTFT beside the measured one
 * (`data-predicted-ttft-ms`, `data-measured-ttft-ms` on the decision).
 *
 * The model's accuracy is tested in virtual time (test/router/latency-estimator.test.ts); here
 * the bound is only a sanity one (a loaded 2-core box adds its own delays): predicted and
 * measured within 10× of each other.
 */
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { attr, chromiumPath, dashboardOnUp, screenshot } from './browser.js';

const MODEL = 'tiny-llama';
const CHROMIUM = chromiumPath();
const suite = CHROMIUM ? describe : describe.skip;
if (!CHROMIUM) process.stderr.write('latency routing browser test SKIPPED: chromium not found (apt-get install chromium, or set CHROMIUM_BIN)\n');

interface CostLine {
  instanceId: string;
  cost: number;
  latency?: { ttftMs: number; itlMs: number; ttftRatio: number };
}

/** The frontend's "routed by predicted latency" records in `up`'s output (`[frontend] {json}`). */
function latencyDecisions(out: string): Array<{ requestId: string; worker: string; costs: CostLine[] }> {
  const found = [];
  for (const m of out.matchAll(/^\[frontend\] (\{.*"msg":"routed by predicted latency".*\})$/gm)) found.push(JSON.parse(m[1]!) as { requestId: string; worker: string; costs: CostLine[] });
  return found;
}

suite(`--router-cost latency end to end (${CHROMIUM ?? 'missing'})`, () => {
  const dashboard = dashboardOnUp('tandem-latency-routing-', (port) => [
    '--engine', 'mocker', '--model', 'tiny', '--workers', '2', '--http-port', String(port), '--speedup-ratio', '1', '--log-level', 'debug',
    '--router-mode', 'kv', '--router-cost', 'latency', '--router-itl-weight', '2',
  ]);

  it('routes every request, logs each decision with predictions on every cost row, and the dashboard shows predicted vs measured TTFT', async () => {
    const page = dashboard.page();
    const up = dashboard.up();
    await expect.poll(() => attr(page, 'conn-status', 'data-state'), { timeout: 15_000 }).toBe('live');
    const client = new OpenAI({ baseURL: `${up.url}/v1`, apiKey: 'none', maxRetries: 0 });
    const ids: Array<{ requestId: string; worker: string }> = [];
    for (let i = 0; i < 12; i++) {
      const { data: stream, response } = await client.chat.completions
        .create({ model: MODEL, stream: true, max_tokens: 16, messages: [{ role: 'user', content: `question ${i}: ${'tell me about routing '.repeat(4 + i)}` }] })
        .withResponse();
      let text = '';
      for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
      expect(text.length).toBeGreaterThan(0);
      ids.push({ requestId: response.headers.get('x-request-id')!, worker: response.headers.get('x-worker-instance-id')! });
    }
    expect(new Set(ids.map((r) => r.worker)).size).toBeGreaterThanOrEqual(1);

    // The frontend logged each decision with its predictions on every candidate's row.
    await expect.poll(() => latencyDecisions(up.proc.output()).length, { timeout: 10_000 }).toBeGreaterThanOrEqual(ids.length);
    const logged = new Map(latencyDecisions(up.proc.output()).map((d) => [d.requestId, d]));
    for (const { requestId, worker } of ids) {
      const d = logged.get(requestId);
      expect(d, `no latency decision logged for ${requestId}`).toBeDefined();
      expect(d!.worker).toBe(worker);
      expect(d!.costs).toHaveLength(2);
      for (const row of d!.costs) {
        expect(row.latency!.ttftMs).toBeGreaterThan(0);
        expect(row.latency!.itlMs).toBeGreaterThan(0);
        // The latency cost is milliseconds: TTFT plus the weighted ITL penalty.
        expect(row.cost).toBeGreaterThanOrEqual(row.latency!.ttftMs);
      }
    }

    // The Routing panel: the newest decisions carry the winner's predicted and the measured TTFT.
    const last = ids[ids.length - 1]!;
    const sel = `[data-testid="decision-${last.requestId}"]`;
    await expect.poll(async () => page.locator(sel).getAttribute('data-measured-ttft-ms'), { timeout: 10_000 }).not.toBeNull();
    const predicted = Number(await page.locator(sel).getAttribute('data-predicted-ttft-ms'));
    const measured = Number(await page.locator(sel).getAttribute('data-measured-ttft-ms'));
    expect(await page.locator(sel).getAttribute('data-winner')).toBe(last.worker);
    expect(predicted).toBeCloseTo(logged.get(last.requestId)!.costs.find((c) => c.instanceId === last.worker)!.latency!.ttftMs, 6);
    expect(measured).toBeGreaterThan(0);
    expect(predicted / measured).toBeGreaterThan(0.1);
    expect(predicted / measured).toBeLessThan(10);
    expect(await page.locator(`[data-testid="ttft-${last.requestId}"]`).isVisible()).toBe(true);
    await screenshot(page, 'dashboard-latency-routing');
  }, 90_000);
});
