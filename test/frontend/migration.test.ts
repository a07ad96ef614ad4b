/**
 * streamWithMigration without HTTP: selector lifecycle hooks (what a KV router books and
 * frees), a worker-side cancel carrying tokens, and the resend arithmetic.
 */
import { describe, expect, it } from 'vitest';
import type { ServedModel } from '../../frontend/model-watcher.js';
import { streamWithMigration } from '../../frontend/pipeline/migration.js';
import { RoundRobinSelector, type RouteRequest, type WorkerSelector } from '../../frontend/routing.js';
import { WorkerHealth } from '../../frontend/worker-health.js';
import { ConnectRefusedError, UnavailableError } from '../../runtime/errors.js';
import type { FallbackPool } from '../../frontend/pipeline/attempt-target.js';
import type { InstanceId, PreprocessedRequest, TokenDelta } from '../../proto/wire.js';
import { makeCard } from './fakes.js';

type Script = (request: PreprocessedRequest) => TokenDelta[];

function model(scripts: Record<InstanceId, Script>, sent: Array<[InstanceId, PreprocessedRequest]>): ServedModel {
  return {
    name: 'm',
    candidates: () => Object.keys(scripts).sort(),
    card: (id) => makeCard({ instanceId: id }),
    primaryCard: () => makeCard(),
    contextLength: () => 1000,
    async *generate(request, id) {
      sent.push([id, request]);
      for (const delta of scripts[id]!(request)) yield delta;
    },
  };
}

const base: PreprocessedRequest = { requestId: 'r1', model: 'm', tokenIds: [1, 2, 3], sampling: {}, stop: { maxTokens: 6, stopTokenIds: [], ignoreEos: false } };

class RecordingSelector extends RoundRobinSelector implements WorkerSelector {
  readonly log: string[] = [];
  onRouted(route: RouteRequest, id: InstanceId) {
    this.log.push(`routed ${id} prompt=${route.request.tokenIds.length}`);
  }
  onFirstToken(_route: RouteRequest, id: InstanceId) {
    this.log.push(`first ${id}`);
  }
  onFinished(_route: RouteRequest, id: InstanceId) {
    this.log.push(`finished ${id}`);
  }
}

async function collect(stream: AsyncIterable<TokenDelta>): Promise<TokenDelta[]> {
  const out: TokenDelta[] = [];
  for await (const d of stream) out.push(d);
  return out;
}

describe('streamWithMigration', () => {
  it('a worker-side cancel that carries tokens passes them on, then resumes elsewhere with them', async () => {
    const sent: Array<[InstanceId, PreprocessedRequest]> = [];
    const selector = new RecordingSelector();
    const served = model(
      {
        a: () => [{ tokenIds: [10] }, { tokenIds: [11, 12], finishReason: 'cancelled' }],
        b: (req) => [{ tokenIds: [13, 14, 15].slice(0, req.stop.maxTokens), finishReason: 'length' }],
      },
      sent,
    );
    const deltas = await collect(
      streamWithMigration({ model: served, selector, request: base, firstInstance: 'a', pinned: false, migrationLimit: 3 }, new AbortController().signal),
    );
    expect(deltas.flatMap((d) => d.tokenIds)).toEqual([10, 11, 12, 13, 14, 15]);
    expect(deltas.at(-1)!.finishReason).toBe('length');
    expect(deltas.slice(0, -1).every((d) => d.finishReason === undefined)).toBe(true);
    // Resend: prompt + 3 generated, 6 - 3 = 3 tokens left, same request id.
    expect(sent[1]![1]).toMatchObject({ requestId: 'r1', tokenIds: [1, 2, 3, 10, 11, 12], stop: { maxTokens: 3 }, numPriorOutputTokens: 3 });
    // Every attempt is booked and freed exactly once, in order.
    expect(selector.log).toEqual(['routed a prompt=3', 'first a', 'finished a', 'routed b prompt=6', 'first b', 'finished b']);
  });

  it('a non-migratable error surfaces at once; a pinned request never moves', async () => {
    const sent: Array<[InstanceId, PreprocessedRequest]> = [];
    const served = model(
      {
        a: () => {
          throw Object.assign(new Error('bad'), { code: 'invalid_argument' });
        },
        b: () => [{ tokenIds: [1], finishReason: 'stop' }],
      },
      sent,
    );
    const plan = { model: served, selector: new RoundRobinSelector(), request: base, firstInstance: 'a', pinned: false, migrationLimit: 3 };
    await expect(collect(streamWithMigration(plan, new AbortController().signal))).rejects.toThrow('bad');
    const dead = model({ a: () => [{ tokenIds: [], finishReason: 'cancelled' }], b: () => [{ tokenIds: [1], finishReason: 'stop' }] }, sent);
    await expect(collect(streamWithMigration({ ...plan, model: dead, pinned: true }, new AbortController().signal))).rejects.toMatchObject({ code: 'unavailable' });
    expect(sent.map(([id]) => id)).toEqual(['a', 'a']);
  });

  it('a worker that answers "server is draining" before its first token is skipped, without spending the migration limit', async () => {
    const sent: Array<[InstanceId, PreprocessedRequest]> = [];
    const draining = () => {
      throw new UnavailableError('server is draining');
    };
    const served = model({ a: draining, b: draining, c: (req) => [{ tokenIds: [7, 8], finishReason: 'length' }].map((d) => ({ ...d, tokenIds: d.tokenIds.slice(0, req.stop.maxTokens) })) }, sent);
    const health = new WorkerHealth(60_000);
    const deltas = await collect(
      streamWithMigration({ model: served, selector: new RoundRobinSelector(), request: base, firstInstance: 'a', pinned: false, migrationLimit: 0, health }, new AbortController().signal),
    );
    expect(deltas.flatMap((d) => d.tokenIds)).toEqual([7, 8]);
    // a failed, then b (draining too), then c; the request was never re-sent with output tokens.
    expect(sent.map(([id]) => id)).toEqual(['a', 'b', 'c']);
    expect(sent.every(([, r]) => r.tokenIds.length === 3)).toBe(true);
    expect(health.isDown('a', Date.now()) && health.isDown('b', Date.now())).toBe(true);
  });

  it('a retry never picks an instance in cooldown, even when it is the only other one left', async () => {
    const sent: Array<[InstanceId, PreprocessedRequest]> = [];
    const served = model({ a: () => [{ tokenIds: [1] }, { tokenIds: [], finishReason: 'cancelled' }], b: () => [{ tokenIds: [2], finishReason: 'stop' }] }, sent);
    const health = new WorkerHealth(60_000);
    health.markDown('b', Date.now()); // another request just found b dead or draining
    const plan = { model: served, selector: new RoundRobinSelector(), request: base, firstInstance: 'a', pinned: false, migrationLimit: 3, health };
    await expect(collect(streamWithMigration(plan, new AbortController().signal))).rejects.toMatchObject({ code: 'unavailable' });
    expect(sent.map(([id]) => id)).toEqual(['a']);
  });

  it('the pool\'s only worker dies mid-stream: the rest runs on the fallback pool (a prefill worker), same resend arithmetic', async () => {
    const sent: Array<[InstanceId, PreprocessedRequest]> = [];
    const served = model({ d: () => [{ tokenIds: [10, 11] }, { tokenIds: [], finishReason: 'cancelled' }] }, sent);
    const onFallback: PreprocessedRequest[] = [];
    const prefillSelector = new RecordingSelector();
    const fallback: FallbackPool = {
      selector: prefillSelector,
      pick: async (_model, _request, excluded) => (excluded.has('p') ? undefined : 'p'),
      async *generate(_model, request) {
        onFallback.push(request);
        yield { tokenIds: [12, 13, 14, 15].slice(0, request.stop.maxTokens), finishReason: 'length' };
      },
    };
    const selector = new RecordingSelector();
    const deltas = await collect(
      streamWithMigration({ model: served, selector, request: base, firstInstance: 'd', pinned: false, migrationLimit: 3, fallback, health: new WorkerHealth(5000) }, new AbortController().signal),
    );
    expect(deltas.flatMap((d) => d.tokenIds)).toEqual([10, 11, 12, 13, 14, 15]);
    expect(deltas.at(-1)!.finishReason).toBe('length');
    // Prompt + 2 generated, 6 - 2 = 4 left; the attempt is booked on the fallback pool's selector.
    expect(onFallback).toEqual([expect.objectContaining({ tokenIds: [1, 2, 3, 10, 11], stop: expect.objectContaining({ maxTokens: 4 }), numPriorOutputTokens: 2 })]);
    expect(selector.log).toEqual(['routed d prompt=3', 'first d', 'finished d']);
    expect(prefillSelector.log).toEqual(['routed p prompt=5', 'first p', 'finished p']);
  });

  it('the pool\'s only worker is refused (gone) and there is no fallback: the retry waits for the restarted worker (a new instance) and resumes there', async () => {
    const sent: Array<[InstanceId, PreprocessedRequest]> = [];
    const scripts: Record<InstanceId, Script> = {
      old: () => [{ tokenIds: [10] }, { tokenIds: [], finishReason: 'cancelled' }],
    };
    const served = model(scripts, sent);
    const health = new WorkerHealth(5000);
    const plan = { model: served, selector: new RoundRobinSelector(), request: base, firstInstance: 'old', pinned: false, migrationLimit: 3, health, waitMs: 10_000 };
    // The supervisor brings the worker back as a new instance a moment later.
    setTimeout(() => (scripts.new = (req) => [{ tokenIds: [20, 21, 22, 23, 24].slice(0, req.stop.maxTokens), finishReason: 'length' }]), 250);
    const deltas = await collect(streamWithMigration(plan, new AbortController().signal));
    expect(deltas.flatMap((d) => d.tokenIds)).toEqual([10, 20, 21, 22, 23, 24]);
    expect(sent.map(([id]) => id)).toEqual(['old', 'new']);

    // Without a wait the same failure ends the stream with its cause.
    delete scripts.new;
    await expect(collect(streamWithMigration({ ...plan, waitMs: 0 }, new AbortController().signal))).rejects.toMatchObject({ code: 'unavailable' });
    // A refused connection marks the instance gone: no first pick guesses at it any more.
    const refused = model({ old: () => { throw new ConnectRefusedError('connect ECONNREFUSED 127.0.0.1:1'); } }, sent);
    await expect(collect(streamWithMigration({ ...plan, model: refused, waitMs: 0 }, new AbortController().signal))).rejects.toBeInstanceOf(ConnectRefusedError);
    expect(health.isGone('old', Date.now())).toBe(true);
    expect(health.filter(['old'], Date.now())).toEqual([]);
  });

  it('a client that leaves while its request waits for a worker ends the wait, quietly', async () => {
    const sent: Array<[InstanceId, PreprocessedRequest]> = [];
    const served = model({ a: () => [{ tokenIds: [1] }, { tokenIds: [], finishReason: 'cancelled' }] }, sent);
    const client = new AbortController();
    setTimeout(() => client.abort(), 200);
    const deltas = await collect(
      streamWithMigration({ model: served, selector: new RoundRobinSelector(), request: base, firstInstance: 'a', pinned: false, migrationLimit: 3, waitMs: 60_000 }, client.signal),
    );
    expect(deltas.flatMap((d) => d.tokenIds)).toEqual([1]);
  });
});
