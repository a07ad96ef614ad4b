/**
 * `runtime bench` against the real stack (frontend + two mocker workers as processes): the
 * requests it sends and the token lengths the server reports match the workload it was asked for.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runBench } from '../../bench/loadgen/index.js';
import { CliStack } from '../harness/cli-stack.js';

describe('runtime bench against the frontend and mocker workers', () => {
  let stack: CliStack | undefined;
  let url = '';
  let modelDir = '';

  beforeAll(async () => {
    stack = await CliStack.create({ tmpPrefix: 'tandem-bench-stack-', model: 'tiny-llama', tiny: { seed: 0 }, leaseTtl: 3 });
    modelDir = stack.modelDir;
    await stack.startFrontend();
    for (let i = 0; i < 2; i++) await stack.startWorker('agg', ['--engine', 'mocker', '--speedup-ratio', '50']);
    await stack.waitForRoutable(2, { timeoutMs: 45_000 });
    url = stack.url;
  }, 60_000);

  afterAll(async () => {
    await stack?.close();
  });

  it('random workload: every request completes with the requested ISL and OSL', async () => {
    const { report } = await runBench({
      url,
      model: 'tiny-llama',
      workload: 'random',
      tokenizer: modelDir,
      isl: 96,
      islStd: 24,
      osl: 24,
      oslStd: 6,
      requests: 40,
      concurrency: 8,
      seed: 7,
      progress: 'off',
    });
    expect(report.requests).toHaveLength(40);
    expect(report.requests.every((r) => r.ok)).toBe(true);
    for (const r of report.requests) {
      expect(r.isl).toBe(r.isl_requested);
      expect(r.osl).toBe(r.osl_requested);
    }
    // the lengths really vary as asked, rather than all being the mean
    expect(new Set(report.requests.map((r) => r.isl)).size).toBeGreaterThan(5);
  }, 60_000);

  it('--endpoint chat, responses and messages: the same workload, the same server-counted lengths on each API', async () => {
    const run = (endpoint: 'chat' | 'responses' | 'messages') =>
      runBench({ url, model: 'tiny-llama', workload: 'random', endpoint, tokenizer: modelDir, isl: 64, islStd: 16, osl: 12, oslStd: 4, requests: 12, concurrency: 4, seed: 11, progress: 'off' });
    const reports = await Promise.all((['chat', 'responses', 'messages'] as const).map(async (e) => (await run(e)).report));
    for (const report of reports) {
      expect(report.requests).toHaveLength(12);
      expect(report.requests.every((r) => r.ok), JSON.stringify(report.requests.find((r) => !r.ok))).toBe(true);
      for (const r of report.requests) expect(r.osl).toBe(r.osl_requested);
      // TTFT was measured from the API's own text events.
      expect(report.requests.every((r) => typeof r.ttft_ms === 'number' && r.ttft_ms > 0)).toBe(true);
    }
    // One chat template behind all three: the prompt each request made has the same length.
    const isl = (i: number) => reports[i]!.requests.map((r) => r.isl).sort((a, b) => (a ?? 0) - (b ?? 0));
    expect(isl(1)).toEqual(isl(0));
    expect(isl(2)).toEqual(isl(0));
  }, 90_000);

  it('shared-prefix workload: groups × prompts, and the shared system prompt is served from cache', async () => {
    const { report } = await runBench({
      url,
      model: 'tiny-llama',
      workload: 'shared-prefix',
      tokenizer: modelDir,
      groups: 3,
      promptsPerGroup: 4,
      systemTokens: 128,
      questionTokens: 16,
      osl: 8,
      concurrency: 1,
      seed: 3,
      progress: 'off',
    });
    expect(report.requests).toHaveLength(12);
    expect(report.requests.every((r) => r.ok && r.osl === 8)).toBe(true);
    for (const r of report.requests) expect(r.isl).toBe(r.isl_requested);
    // with round-robin over 2 workers, later prompts of a group find the system prompt cached
    const cached = report.requests.reduce((sum, r) => sum + (r.cached_tokens ?? 0), 0);
    expect(cached).toBeGreaterThanOrEqual(128);
  }, 60_000);
});
