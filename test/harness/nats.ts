/**
 * A real nats-server for tests: free loopback port, temp JetStream store dir, and restart on the
 * same port (so clients with reconnect enabled find it again).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SupervisedProcess } from '../../runtime/supervisor/index.js';
import { freePort } from './ports.js';

export const NATS_SERVER_BIN = process.env.NATS_SERVER_BIN ?? '/usr/sbin/nats-server';

export interface NatsHarness {
  url: string;
  port: number;
  /** The monitoring endpoint (`/subsz`, `/connz`…), when started with `monitor: true`. */
  monitorUrl?: string;
  /** Kill the server (SIGKILL: an outage, not a clean shutdown). The store dir is kept. */
  halt(): Promise<void>;
  /** Start it again on the same port with the same store. */
  start(): Promise<void>;
  /** halt(), wait `downMs`, start(). */
  restart(downMs?: number): Promise<void>;
  /** Stop for good and remove the store dir. */
  stop(): Promise<void>;
}

export interface StartNatsOptions {
  jetstream?: boolean;
  /** Serve nats-server's HTTP monitoring endpoint on a free port (`monitorUrl`). */
  monitor?: boolean;
}

/** One run of nats-server through the supervisor (which SIGKILLs it if the test process exits); resolves once it is ready. */
async function launch(port: number, storeDir: string, jetstream: boolean, monitorPort?: number): Promise<SupervisedProcess> {
  const args = ['-a', '127.0.0.1', '-p', String(port)];
  if (jetstream) args.push('-js', '-sd', storeDir);
  if (monitorPort !== undefined) args.push('-m', String(monitorPort));
  const proc = new SupervisedProcess({ name: `nats-server :${port}`, command: NATS_SERVER_BIN, args, log: { memoryLines: 200 } });
  try {
    await proc.waitForLine(/Server is ready/, 10_000);
    return proc;
  } catch (err) {
    await killed(proc);
    throw err;
  }
}

async function killed(proc: SupervisedProcess): Promise<void> {
  proc.killNow();
  await proc.exited();
}

export async function startNats(options: StartNatsOptions = {}): Promise<NatsHarness> {
  const jetstream = options.jetstream ?? false;
  const storeDir = mkdtempSync(join(tmpdir(), 'tandem-nats-'));
  const port = await freePort();
  const monitorPort = options.monitor ? await freePort() : undefined;
  let child: SupervisedProcess | undefined = await launch(port, storeDir, jetstream, monitorPort);
  const harness: NatsHarness = {
    url: `nats://127.0.0.1:${port}`,
    port,
    ...(monitorPort !== undefined ? { monitorUrl: `http://127.0.0.1:${monitorPort}` } : {}),
    halt: async () => {
      if (child) await killed(child);
      child = undefined;
    },
    start: async () => {
      if (!child) child = await launch(port, storeDir, jetstream, monitorPort);
    },
    restart: async (downMs = 0) => {
      await harness.halt();
      if (downMs > 0) await new Promise((r) => setTimeout(r, downMs));
      await harness.start();
    },
    stop: async () => {
      await harness.halt();
      rmSync(storeDir, { recursive: true, force: true });
    },
  };
  return harness;
}
