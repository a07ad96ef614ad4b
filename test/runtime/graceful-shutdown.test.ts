/**
 * Graceful shutdown of a real process (the hello-world server, file discovery + direct events):
 * on SIGTERM it deregisters first, drains in-flight streams within --drain-timeout, then exits 0.
 * A stream longer than the drain timeout is cut, and the process still exits promptly.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HelloRequest, HelloWord } from '../../examples/hello/server.js';
import type { InstanceRecord } from '../../proto/wire.js';
import { DistributedRuntime } from '../../runtime/distributed-runtime.js';
import { instancePrefix } from '../../runtime/discovery/keys.js';
import type { EndpointClient } from '../../runtime/endpoint-client.js';
import { EventRecorder } from '../fixtures/discovery-events.js';
import { spawnTs, type Spawned } from '../harness/processes.js';

/** The greeting has 9 words; the server waits `delayMs` after each. */
const WORDS = 'hello you, this stream comes from a Tandem endpoint'.split(' ');
const PREFIX = instancePrefix('tandem', 'hello', 'generate');

describe('graceful shutdown (hello server process, file discovery)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-shutdown-'));
  let caller: DistributedRuntime;

  beforeAll(async () => {
    caller = await DistributedRuntime.create({ name: 'caller', discovery: 'file', discoveryDir: dir, leaseTtlSeconds: 2, eventPlane: 'direct', host: '127.0.0.1', logLevel: 'silent' });
  });
  afterAll(async () => {
    await caller?.shutdown('test done');
    rmSync(dir, { recursive: true, force: true });
  });

  /** Start a hello server with this drain timeout and return it with a client bound to it. */
  async function startServer(drainSeconds: number): Promise<{ server: Spawned; client: EndpointClient; record: InstanceRecord; recorder: EventRecorder<InstanceRecord> }> {
    const server = spawnTs('examples/hello/server.ts', [
      '--discovery', 'file', '--discovery-dir', dir, '--lease-ttl', '2', '--event-plane', 'direct',
      '--host', '127.0.0.1', '--drain-timeout', String(drainSeconds), '--beat-ms', '60000',
    ]);
    const ready = await server.waitForLine(/hello server [0-9a-f]+ ready/);
    const instanceId = /hello server ([0-9a-f]+) ready/.exec(ready)![1]!;
    const recorder = new EventRecorder<InstanceRecord>();
    const watch = await caller.discovery.watch<InstanceRecord>(PREFIX, recorder.onEvent);
    caller.onShutdown(() => watch.close());
    const client = await caller.namespace('tandem').component('hello').endpoint('generate').client();
    const deadline = Date.now() + 10_000;
    while (!client.instance(instanceId) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    const record = client.instance(instanceId);
    if (!record) throw new Error(`instance ${instanceId} never appeared in discovery`);
    return { server, client, record, recorder };
  }

  it('SIGTERM: deregisters before the in-flight stream ends, completes the stream, exits 0', async () => {
    const { server, client, record, recorder } = await startServer(10);
    const key = `${PREFIX}${record.instanceId}`;
    expect(recorder.has(key)).toBe(true);
    try {
      const words: string[] = [];
      let signalledAt = 0;
      const stream = (async () => {
        for await (const item of client.generate<HelloRequest, HelloWord>({ name: 'you', delayMs: 250 }, { routing: { mode: 'direct', instanceId: record.instanceId } })) {
          words.push(item.word);
          if (words.length === 1) {
            signalledAt = Date.now();
            server.kill('SIGTERM');
          }
        }
        return Date.now();
      })();
      const streamEndedAt = await stream;
      const removedAt = recorder.firstRemovalOf(key);
      expect(removedAt, 'the registration was removed during the drain').toBeDefined();
      expect(removedAt!).toBeGreaterThanOrEqual(signalledAt);
      expect(removedAt!).toBeLessThan(streamEndedAt);
      expect(words).toEqual(WORDS);
      // The stream ran ~8 × 250 ms after the signal: the process really waited for it.
      expect(streamEndedAt - signalledAt).toBeGreaterThan(1500);
      const exit = await server.exited();
      expect(exit).toEqual({ code: 0, signal: null });
      expect(server.output()).toMatch(/draining in-flight streams/);
    } finally {
      client.close();
      if (server.running) server.kill('SIGKILL');
    }
  });

  it('a drain timeout shorter than the stream cuts the stream and the process still exits 0', async () => {
    const { server, client, record, recorder } = await startServer(1);
    const key = `${PREFIX}${record.instanceId}`;
    try {
      const words: string[] = [];
      let signalledAt = 0;
      let failure: unknown;
      try {
        // 9 words × 1 s would take ~9 s; the drain allows 1 s.
        for await (const item of client.generate<HelloRequest, HelloWord>({ name: 'you', delayMs: 1000 }, { routing: { mode: 'direct', instanceId: record.instanceId } })) {
          words.push(item.word);
          if (words.length === 1) {
            signalledAt = Date.now();
            server.kill('SIGTERM');
          }
        }
      } catch (err) {
        failure = err;
      }
      const streamEndedAt = Date.now();
      const exit = await server.exited();
      const exitedAt = Date.now();
      expect(words.length).toBeGreaterThanOrEqual(1);
      expect(words.length).toBeLessThan(WORDS.length);
      expect(streamEndedAt - signalledAt).toBeLessThan(4000);
      expect(exitedAt - signalledAt).toBeLessThan(5000);
      expect(exit).toEqual({ code: 0, signal: null });
      expect(recorder.firstRemovalOf(key)).toBeDefined();
      expect(server.output()).toMatch(/drain timeout: cancelling in-flight streams/);
      // The cut is an error the caller can act on (the frontend migrates on 'unavailable'),
      // never a stream that looks complete.
      expect(failure).toMatchObject({ code: 'unavailable' });
    } finally {
      client.close();
      if (server.running) server.kill('SIGKILL');
    }
  });
});
