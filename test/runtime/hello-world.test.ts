/**
 * The hello-world example end to end, as a user runs it: a server process and a client process
 * that find each other through discovery, in embedded mode (file + direct) and in cluster mode
 * (real etcd + NATS).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEtcd, type EtcdServer } from '../harness/etcd.js';
import { startNats, type NatsServer } from '../harness/nats.js';
import { spawnTs } from '../harness/processes.js';

const EXPECTED = 'hello you, this stream comes from a Tandem endpoint';

describe('hello world: embedded mode (file discovery + direct events)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-hello-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('the client streams the greeting and receives a heartbeat event', async () => {
    const flags = ['--discovery', 'file', '--discovery-dir', dir, '--event-plane', 'direct', '--lease-ttl', '3'];
    const server = spawnTs('examples/hello/server.ts', [...flags, '--beat-ms', '100']);
    try {
      await server.waitForLine(/hello server .* ready/);
      const client = spawnTs('examples/hello/client.ts', [...flags, '--name', 'you']);
      const { code } = await client.exited();
      expect(client.output()).toContain(EXPECTED);
      expect(client.output()).toMatch(/event: \{"beats":\d+/);
      expect(code).toBe(0);
    } finally {
      server.kill('SIGTERM');
      expect((await server.exited()).code).toBe(0);
    }
  });
});

describe('hello world: cluster mode (etcd + NATS)', () => {
  let etcd: EtcdServer;
  let nats: NatsServer;
  beforeAll(async () => {
    [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
  });
  afterAll(async () => {
    await Promise.all([etcd?.stop(), nats?.stop()]);
  });

  it('the client streams the greeting and receives a heartbeat event', async () => {
    const env = { ETCD_ENDPOINTS: etcd.endpoint, NATS_SERVER: nats.url };
    const server = spawnTs('examples/hello/server.ts', ['--beat-ms', '100'], env);
    try {
      const ready = await server.waitForLine(/hello server .* ready/);
      expect(ready).toContain('etcd discovery, nats events');
      const client = spawnTs('examples/hello/client.ts', ['--name', 'you'], env);
      const { code } = await client.exited();
      expect(client.output()).toContain(EXPECTED);
      expect(client.output()).toMatch(/event: \{"beats":\d+/);
      expect(code).toBe(0);
    } finally {
      server.kill('SIGTERM');
      expect((await server.exited()).code).toBe(0);
    }
  });
});
