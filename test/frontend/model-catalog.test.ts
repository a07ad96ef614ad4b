/**
 * ModelCatalog (pure) and routing selectors: a model appears with its first card and goes
 * with its last (at once, or after its grace period, idle meanwhile); selectors pick
 * deterministically given their inputs.
 */
import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { registerFrontendCommand, type FrontendFlags } from '../../frontend/command.js';
import { ModelCatalog } from '../../frontend/model-catalog.js';
import { RandomSelector, RoundRobinSelector, createSelector } from '../../frontend/routing.js';
import type { PreprocessedRequest } from '../../proto/wire.js';
import { ConfigError } from '../../runtime/errors.js';
import { makeCard } from './fakes.js';

const key = (name: string, id: string) => `v1/models/tandem/${name}/${id}`;

describe('ModelCatalog', () => {
  it('adds a model with its first card and removes it with its last', () => {
    const catalog = new ModelCatalog();
    expect(catalog.put(key('m', 'a'), makeCard({ name: 'm', instanceId: 'a' }))).toEqual([
      { type: 'model_added', name: 'm' },
      { type: 'instance_added', name: 'm', instanceId: 'a' },
    ]);
    expect(catalog.put(key('m', 'b'), makeCard({ name: 'm', instanceId: 'b' }))).toEqual([{ type: 'instance_added', name: 'm', instanceId: 'b' }]);
    // A refreshed card (same key) changes nothing visible.
    expect(catalog.put(key('m', 'b'), makeCard({ name: 'm', instanceId: 'b', contextLength: 99 }))).toEqual([]);
    expect(catalog.card('m', 'b')!.contextLength).toBe(99);
    expect(catalog.remove(key('m', 'a'))).toEqual([{ type: 'instance_removed', name: 'm', instanceId: 'a' }]);
    expect(catalog.names()).toEqual(['m']);
    expect(catalog.remove(key('m', 'b'))).toEqual([
      { type: 'instance_removed', name: 'm', instanceId: 'b' },
      { type: 'model_removed', name: 'm' },
    ]);
    expect(catalog.names()).toEqual([]);
    expect(catalog.remove(key('m', 'b'))).toEqual([]);
  });

  it('grace 10 s: the last card going at t=1 s leaves the model idle until 11 s (known, no cards, its last card kept); back at 5 s it never left; gone again at 6 s, removed at 16 s', () => {
    const catalog = new ModelCatalog({ graceMs: 10_000 });
    catalog.put(key('m', 'a'), makeCard({ name: 'm', instanceId: 'a' }), 0);
    expect(catalog.remove(key('m', 'a'), 1_000)).toEqual([
      { type: 'instance_removed', name: 'm', instanceId: 'a' },
      { type: 'model_idle', name: 'm', until: 11_000 },
    ]);
    expect(catalog.names()).toEqual(['m']);
    expect(catalog.has('m')).toBe(true);
    expect(catalog.isIdle('m')).toBe(true);
    expect(catalog.cards('m')).toBeUndefined();
    expect([...catalog.knownCards('m')!.keys()]).toEqual(['a']);
    expect(catalog.nextExpiry()).toBe(11_000);
    expect(catalog.expire(10_999)).toEqual([]);
    // A worker back within the grace period: the model never left (no model_added).
    expect(catalog.put(key('m', 'b'), makeCard({ name: 'm', instanceId: 'b' }), 5_000)).toEqual([{ type: 'instance_added', name: 'm', instanceId: 'b' }]);
    expect(catalog.isIdle('m')).toBe(false);
    expect(catalog.nextExpiry()).toBeUndefined();
    expect(catalog.remove(key('m', 'b'), 6_000)).toEqual([
      { type: 'instance_removed', name: 'm', instanceId: 'b' },
      { type: 'model_idle', name: 'm', until: 16_000 },
    ]);
    expect(catalog.expire(11_000)).toEqual([]);
    expect(catalog.expire(16_000)).toEqual([{ type: 'model_removed', name: 'm' }]);
    expect(catalog.names()).toEqual([]);
    expect(catalog.has('m')).toBe(false);
    // After that a card is a new model again.
    expect(catalog.put(key('m', 'c'), makeCard({ name: 'm', instanceId: 'c' }), 20_000)[0]).toEqual({ type: 'model_added', name: 'm' });
  });

  it('handles model names with slashes, and a key whose card switches model', () => {
    const catalog = new ModelCatalog();
    catalog.put(key('Qwen/Qwen3-0.6B', 'a'), makeCard({ name: 'Qwen/Qwen3-0.6B', instanceId: 'a' }));
    expect(catalog.names()).toEqual(['Qwen/Qwen3-0.6B']);
    const changes = catalog.put(key('Qwen/Qwen3-0.6B', 'a'), makeCard({ name: 'other', instanceId: 'a' }));
    expect(changes.map((c) => c.type)).toEqual(['instance_removed', 'model_removed', 'model_added', 'instance_added']);
    expect(catalog.names()).toEqual(['other']);
  });
});

describe('selectors', () => {
  const route = { model: 'm', request: {} as PreprocessedRequest };

  it('round-robin cycles through the candidates in order', () => {
    const rr = new RoundRobinSelector();
    const picks = Array.from({ length: 5 }, () => rr.select(route, ['a', 'b', 'c']));
    expect(picks).toEqual(['a', 'b', 'c', 'a', 'b']);
  });

  it('random maps its random source onto the candidates', () => {
    const values = [0, 0.5, 0.99];
    const random = new RandomSelector(() => values.shift()!);
    expect([random.select(route, ['a', 'b']), random.select(route, ['a', 'b']), random.select(route, ['a', 'b'])]).toEqual(['a', 'b', 'b']);
  });

  it("'kv' is refused with a config error that says how to get a KV selector", () => {
    expect(() => createSelector('kv')).toThrow(ConfigError);
    expect(() => createSelector('kv')).toThrow(/needs the KV router: start the frontend with startFrontend\(\{ routerMode: 'kv', runtime \}\)/);
  });
});

describe('runtime frontend command', () => {
  function parse(args: string[]): FrontendFlags {
    const program = new Command().exitOverride();
    const cmd = registerFrontendCommand(program).exitOverride();
    let flags: FrontendFlags | undefined;
    cmd.action((f: FrontendFlags) => {
      flags = f;
    });
    program.parse(['node', 'runtime', 'frontend', ...args]);
    return flags!;
  }

  it('has the documented defaults and parses each flag', () => {
    const defaults = parse([]);
    expect(defaults).toMatchObject({ httpPort: 8000, routerMode: 'round-robin', migrationLimit: 3, maxInflightRequests: 2048, host: '0.0.0.0', namespace: 'tandem' });
    const set = parse(['--http-port', '9001', '--router-mode', 'random', '--migration-limit', '0', '--max-inflight-requests', '5', '--host', '127.0.0.1']);
    expect(set).toMatchObject({ httpPort: 9001, routerMode: 'random', migrationLimit: 0, maxInflightRequests: 5, host: '127.0.0.1' });
  });

  it('rejects a bad router mode', () => {
    expect(() => parse(['--router-mode', 'fastest'])).toThrow(/one of round-robin, random, kv, direct/);
  });
});

describe('WorkerHealth', () => {
  it('keeps a failed worker out for the cooldown, and never empties the candidate list', async () => {
    const { WorkerHealth } = await import('../../frontend/worker-health.js');
    const health = new WorkerHealth(5000);
    health.markDown('a', 1000);
    expect(health.filter(['a', 'b'], 1000)).toEqual(['b']);
    expect(health.filter(['a', 'b'], 5999)).toEqual(['b']);
    expect(health.filter(['a'], 2000)).toEqual(['a']);
    expect(health.filter(['a', 'b'], 6000)).toEqual(['a', 'b']);
    expect(health.isDown('a', 6000)).toBe(false);
  });

  it('a refused connection marks a worker gone at once: never guessed at, even when every candidate is down', async () => {
    const { WorkerHealth } = await import('../../frontend/worker-health.js');
    const { ConnectRefusedError, UnavailableError } = await import('../../runtime/errors.js');
    const health = new WorkerHealth(5000, 60_000);
    health.markFailed('a', new ConnectRefusedError('connect ECONNREFUSED'), 1000);
    health.markFailed('b', new UnavailableError('Connection dropped'), 1000);
    expect(health.isGone('a', 1000)).toBe(true);
    expect(health.isGone('b', 1000)).toBe(false);
    // Both down: the first pick guesses among those merely in cooldown, never the gone one.
    expect(health.filter(['a', 'b'], 2000)).toEqual(['b']);
    expect(health.filter(['a'], 2000)).toEqual([]);
    // Past the cooldown b is back; a stays out until its gone period (its card left long before).
    expect(health.up(['a', 'b'], 6000)).toEqual(['b']);
    expect(health.up(['a', 'b'], 61_000)).toEqual(['a', 'b']);
  });
});
