/**
 * Runtime benchmark: request plane vs bare @grpc/grpc-js, and NATS event throughput.
 * Run: node --import tsx bench/runtime-bench.ts [--quick]
 * Prints a table and writes bench/results/runtime.json.
 *
 * Both sides run in this one process over loopback, so the ratio compares like with like:
 * - unary round trip: one request -> one item (ours) vs one request -> one message (bare);
 * - streaming: items/s at 1 and 64 concurrent streams; ours coalesces, bare writes one
 *   message per item (what a straightforward gRPC service does) and honours backpressure;
 * - events: NATS publish -> receive rate through NatsEventPlane, and the direct plane.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { once } from 'node:events';
import os from 'node:os';
import * as grpc from '@grpc/grpc-js';
import { GrpcRequestPlaneClient, GrpcRequestPlaneServer } from '../runtime/request-plane/index.js';
import { DirectEventPlane, NatsEventPlane } from '../runtime/event-plane/index.js';
import type { EventScope } from '../runtime/event-plane/event-plane.js';
import { MemoryDiscovery, MemoryDiscoveryStore } from '../runtime/discovery/memory-discovery.js';
import { instanceKey } from '../runtime/discovery/keys.js';
import { startNats } from '../test/harness/nats.js';

const QUICK = process.argv.includes('--quick');
const UNARY_CALLS = QUICK ? 500 : 3_000;
const WARMUP_CALLS = Number(process.env.WARMUP ?? 2_000);
const ITEMS_ONE_STREAM = QUICK ? 50_000 : 200_000;
const ITEMS_PER_STREAM_64 = QUICK ? 1_000 : 5_000;
const EVENTS = QUICK ? 50_000 : 200_000;

interface Delta {
  tokenIds: number[];
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

// ---------------------------------------------------------------- bare grpc-js echo server
const identity = (b: Buffer) => b;
const BARE_METHOD = '/bench.Echo/Stream';

async function startBare(): Promise<{ address: string; close: () => void }> {
  const server = new grpc.Server();
  const item = Buffer.from([0x81, 0xa8, ...Buffer.from('tokenIds'), 0x91, 0x01]);
  server.addService(
    {
      Stream: {
        path: BARE_METHOD,
        requestStream: false,
        responseStream: true,
        requestSerialize: identity,
        requestDeserialize: identity,
        responseSerialize: identity,
        responseDeserialize: identity,
      },
    } as unknown as grpc.ServiceDefinition,
    {
      Stream: async (call: grpc.ServerWritableStream<Buffer, Buffer>) => {
        const n = call.request.readUInt32LE(0);
        for (let i = 0; i < n; i++) {
          if (!call.write(item)) await once(call, 'drain');
        }
        call.end();
      },
    },
  );
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return { address: `127.0.0.1:${port}`, close: () => server.forceShutdown() };
}

function bareCall(client: grpc.Client, n: number): Promise<number> {
  const req = Buffer.alloc(4);
  req.writeUInt32LE(n, 0);
  return new Promise((resolve, reject) => {
    let count = 0;
    const call = client.makeServerStreamRequest(BARE_METHOD, identity, identity, req, new grpc.Metadata(), {});
    call.on('data', () => (count += 1));
    call.on('error', reject);
    call.on('end', () => resolve(count));
  });
}

// ---------------------------------------------------------------- measurements
type Latency = { p50: number; p99: number; mean: number };

function summarize(samples: number[]): Latency {
  samples.sort((a, b) => a - b);
  return { p50: percentile(samples, 50), p99: percentile(samples, 99), mean: samples.reduce((a, b) => a + b, 0) / samples.length };
}

/** Alternate the two call by call, so both see the same machine load (CI shares 2 cores). */
async function unaryLatency(ours: () => Promise<unknown>, bare: () => Promise<unknown>): Promise<{ ours: Latency; bare: Latency }> {
  for (let i = 0; i < WARMUP_CALLS; i++) {
    await ours();
    await bare();
  }
  const a: number[] = [];
  const b: number[] = [];
  const time = async (f: () => Promise<unknown>, into: number[]) => {
    const t = process.hrtime.bigint();
    await f();
    into.push(Number(process.hrtime.bigint() - t) / 1e6);
  };
  // Swap the order every call so neither side is always the one following the other.
  for (let i = 0; i < UNARY_CALLS; i++) {
    if (i % 2 === 0) {
      await time(ours, a);
      await time(bare, b);
    } else {
      await time(bare, b);
      await time(ours, a);
    }
  }
  return { ours: summarize(a), bare: summarize(b) };
}

async function streamRate(streams: number, perStream: number, run: (n: number) => Promise<number>): Promise<number> {
  await Promise.all(Array.from({ length: Math.min(streams, 4) }, () => run(1_000)));
  const t = process.hrtime.bigint();
  const counts = await Promise.all(Array.from({ length: streams }, () => run(perStream)));
  const seconds = Number(process.hrtime.bigint() - t) / 1e9;
  const total = counts.reduce((a, b) => a + b, 0);
  if (total !== streams * perStream) throw new Error(`lost items: ${total} of ${streams * perStream}`);
  return total / seconds;
}

/**
 * Publish EVENTS as fast as delivery allows: at most `window` events in flight (published, not
 * yet received), so neither plane's bounded buffers overflow and the rate is end to end.
 */
async function eventRate(publish: (i: number) => Promise<void>, received: () => number, window = 8_192): Promise<{ rate: number; delivered: number }> {
  const start = process.hrtime.bigint();
  for (let i = 0; i < EVENTS; i++) {
    while (i - received() >= window) await new Promise((r) => setImmediate(r));
    await publish(i);
  }
  const deadline = Date.now() + 30_000;
  while (received() < EVENTS && Date.now() < deadline) await new Promise((r) => setImmediate(r));
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  return { rate: received() / seconds, delivered: received() };
}

async function main(): Promise<void> {
  const results: Record<string, unknown> = {
    at: new Date().toISOString(),
    node: process.version,
    cpus: os.cpus().length,
    quick: QUICK,
  };

  // --- request plane
  const server = await GrpcRequestPlaneServer.start({ host: '127.0.0.1' });
  server.register('bench/backend/generate', async function* (req: { n: number }) {
    for (let i = 0; i < req.n; i++) yield { tokenIds: [i] } satisfies Delta;
  });
  const client = new GrpcRequestPlaneClient();
  const target = { address: server.address, path: 'bench/backend/generate' };
  const ours = async (n: number): Promise<number> => {
    let count = 0;
    for await (const _ of client.call<{ n: number }, Delta>(target, { n })) count += 1;
    return count;
  };
  const bare = await startBare();
  const bareClient = new grpc.Client(bare.address, grpc.credentials.createInsecure());

  const u = await unaryLatency(() => ours(1), () => bareCall(bareClient, 1));

  const s1 = { ours: await streamRate(1, ITEMS_ONE_STREAM, ours), bare: await streamRate(1, ITEMS_ONE_STREAM, (n) => bareCall(bareClient, n)) };
  const s64 = { ours: await streamRate(64, ITEMS_PER_STREAM_64, ours), bare: await streamRate(64, ITEMS_PER_STREAM_64, (n) => bareCall(bareClient, n)) };

  results.unary = { ours: u.ours, bare: u.bare, p50Ratio: u.ours.p50 / u.bare.p50, p99Ratio: u.ours.p99 / u.bare.p99, calls: UNARY_CALLS };
  results.stream1 = { ours: s1.ours, bare: s1.bare, ratio: s1.ours / s1.bare, items: ITEMS_ONE_STREAM };
  results.stream64 = { ours: s64.ours, bare: s64.bare, ratio: s64.ours / s64.bare, itemsPerStream: ITEMS_PER_STREAM_64 };

  // --- event planes
  const scope: EventScope = { namespace: 'bench', component: 'backend', topic: 'kv_events' };
  const nats = await startNats();
  try {
    const pub = await NatsEventPlane.connect({ servers: nats.url, instanceId: '0000000000000001' });
    const sub = await NatsEventPlane.connect({ servers: nats.url, instanceId: '0000000000000002' });
    let got = 0;
    await sub.subscribe(scope, () => void (got += 1));
    const natsRate = await eventRate(
      (i) => pub.publish(scope, { workerId: '0000000000000001', eventId: i, data: { type: 'cleared' } }),
      () => got,
    );
    results.natsEvents = { ...natsRate, events: EVENTS };
    await pub.close();
    await sub.close();
  } finally {
    await nats.stop();
  }

  {
    const store = new MemoryDiscoveryStore();
    const pubDisc = new MemoryDiscovery({ store });
    await pubDisc.put(instanceKey('bench', 'backend', 'generate', pubDisc.instanceId), {
      namespace: 'bench', component: 'backend', endpoint: 'generate', instanceId: pubDisc.instanceId, address: server.address, metadata: {},
    });
    const pub = new DirectEventPlane({ instanceId: pubDisc.instanceId, discovery: pubDisc, server: async () => server });
    const subDisc = new MemoryDiscovery({ store });
    const sub = new DirectEventPlane({ instanceId: subDisc.instanceId, discovery: subDisc, server: async () => server });
    let got = 0;
    await sub.subscribe(scope, () => void (got += 1));
    const directRate = await eventRate(
      (i) => pub.publish(scope, { workerId: pubDisc.instanceId, eventId: i, data: { type: 'cleared' } }),
      () => got,
    );
    results.directEvents = { ...directRate, events: EVENTS, dropped: server.topics.dropped };
    await sub.close();
    await pub.close();
  }

  client.close();
  bareClient.close();
  bare.close();
  await server.close();

  const row = (name: string, ours: string, bareValue: string, ratio: string) => `| ${name.padEnd(34)} | ${ours.padStart(14)} | ${bareValue.padStart(14)} | ${ratio.padStart(7)} |`;
  const ms = (v: number) => `${(v * 1000).toFixed(0)} µs`;
  const rate = (v: number) => `${Math.round(v).toLocaleString('en-US')}/s`;
  const r = results as any;
  console.log(row('measure', 'tandem', 'bare grpc-js', 'ratio'));
  console.log(row('', '', '', '').replace(/ /g, '-').replace(/\|-/g, '| ').replace(/-\|/g, ' |'));
  console.log(row('unary round trip p50', ms(r.unary.ours.p50), ms(r.unary.bare.p50), r.unary.p50Ratio.toFixed(2)));
  console.log(row('unary round trip p99', ms(r.unary.ours.p99), ms(r.unary.bare.p99), r.unary.p99Ratio.toFixed(2)));
  console.log(row('stream items/s, 1 stream', rate(r.stream1.ours), rate(r.stream1.bare), r.stream1.ratio.toFixed(2)));
  console.log(row('stream items/s, 64 streams', rate(r.stream64.ours), rate(r.stream64.bare), r.stream64.ratio.toFixed(2)));
  console.log(row('NATS events publish->receive', rate(r.natsEvents.rate), '', ''));
  console.log(row('direct events publish->receive', rate(r.directEvents.rate), '', ''));

  const out = join(dirname(fileURLToPath(import.meta.url)), 'results', 'runtime.json');
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, JSON.stringify(results, null, 2) + '\n');
  console.log(`\nwrote ${out}`);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
