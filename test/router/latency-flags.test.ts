/**
 * The latency cost's flags (shared by `runtime frontend` and `runtime router`, forwarded by
 * `runtime up`) and the lifecycle call that carries a stream's output length to a standalone
 * replica (its ITL sample).
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { addKvRouterOptions, kvRouterConfigFromFlags, loadKvRouterConfig, parseRouterCall, type KvRouterFlags } from '../../router/adapters/index.js';
import { KvRouter } from '../../router/kv-router.js';
import { InterpolatedPerfModel } from '../../perf-model/index.js';

function parse(argv: string[]): KvRouterFlags {
  const cmd = addKvRouterOptions(new Command('x').exitOverride().configureOutput({ writeErr: () => undefined }));
  cmd.parse(argv, { from: 'user' });
  return cmd.opts<KvRouterFlags>();
}

describe('--router-cost flags', () => {
  it('default: the block-count cost, unchanged', () => {
    const config = kvRouterConfigFromFlags(parse([]), 'r');
    expect(config.cost).toBe('blocks');
    expect(new KvRouter(config).latency).toBeUndefined();
  });

  it('latency with a weight and targets reaches the core', () => {
    const config = kvRouterConfigFromFlags(parse(['--router-cost', 'latency', '--router-itl-weight', '3', '--router-itl-target-ms', '40', '--router-ttft-target-ms', '500']), 'r');
    expect(config).toMatchObject({ cost: 'latency', latency: { itlWeight: 3, itlTargetMs: 40, ttftTargetMs: 500 } });
    const router = new KvRouter(config);
    expect(router.latency!.config).toMatchObject({ itlWeight: 3, itlTargetMs: 40, ttftTargetMs: 500 });
  });

  it('refuses an unknown cost and a negative weight', () => {
    expect(() => parse(['--router-cost', 'cheapest'])).toThrow(/router-cost/);
    expect(() => parse(['--router-itl-weight', '-1'])).toThrow();
  });

  it('--router-perf-profile: a profile file becomes the model; a bad one is a configuration error', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tandem-router-profile-'));
    try {
      const good = join(dir, 'p.json');
      await writeFile(good, JSON.stringify({ version: 1, prefill: { tokens: [128, 1024], ms: [10, 20] }, decode: { kvUsage: [0, 1], ms: [4, 8] } }));
      const config = await loadKvRouterConfig(parse(['--router-cost', 'latency', '--router-perf-profile', good]), 'r');
      expect(config.latency!.perfModel).toBeInstanceOf(InterpolatedPerfModel);
      const d = new KvRouter(config).route({ requestId: 'a', tokens: Array.from({ length: 1024 }, (_, i) => i) }, [{ instanceId: 'w' }], 0);
      expect(d.kind === 'routed' && d.decision.costs[0]!.latency!.ttftMs).toBeCloseTo(20, 6);
      await expect(loadKvRouterConfig(parse(['--router-perf-profile', join(dir, 'missing.json')]), 'r')).rejects.toMatchObject({ name: 'ConfigError', code: 'config_invalid' });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('router protocol: finished carries the output length', () => {
  it('keeps a valid outputTokens and drops a bad one', () => {
    expect(parseRouterCall({ type: 'finished', component: 'backend', blockSize: 16, requestId: 'r', outputTokens: 12 })).toMatchObject({ type: 'finished', outputTokens: 12 });
    expect(parseRouterCall({ type: 'finished', component: 'backend', blockSize: 16, requestId: 'r', outputTokens: -3 })).not.toHaveProperty('outputTokens');
    expect(parseRouterCall({ type: 'finished', component: 'backend', blockSize: 16, requestId: 'r' })).not.toHaveProperty('outputTokens');
  });
});
