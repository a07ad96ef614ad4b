/**
 * The runtime's command-line flags, shared by every process command (worker, frontend, router,
 * planner, hello). Defaults work on one machine with no servers: file discovery and direct
 * events. Setting ETCD_ENDPOINTS / NATS_SERVER switches the defaults to etcd and NATS.
 */
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Option, type Command } from 'commander';
import { etcdEndpointsFromEnv, natsServerFromEnv, nonNegativeInt, numberInRange, oneOf, parsePort } from './config.js';
import { DistributedRuntime, type RuntimeConfig } from './distributed-runtime.js';
import type { DiscoveryKind } from './discovery/discovery.js';
import { DEFAULT_NAMESPACE } from './discovery/keys.js';
import type { EventPlaneKind } from './event-plane/event-plane.js';

export interface RuntimeFlags {
  namespace: string;
  discovery: DiscoveryKind;
  discoveryDir: string;
  leaseTtl: number;
  eventPlane: EventPlaneKind;
  etcdEndpoints?: string;
  natsServer?: string;
  host: string;
  advertiseHost: string;
  grpcPort: number;
  statusPort?: number;
  drainTimeout: number;
  logLevel: string;
}

export const DEFAULT_DISCOVERY_DIR = join(tmpdir(), 'tandem', 'discovery');

export function defaultDiscoveryKind(env: NodeJS.ProcessEnv = process.env): DiscoveryKind {
  return env.ETCD_ENDPOINTS ? 'etcd' : 'file';
}

export function defaultEventPlaneKind(env: NodeJS.ProcessEnv = process.env): EventPlaneKind {
  return env.NATS_SERVER ? 'nats' : 'direct';
}

export function addRuntimeOptions(cmd: Command): Command {
  return cmd
    .addOption(new Option('--namespace <name>', 'namespace of this deployment').default(DEFAULT_NAMESPACE))
    .addOption(
      new Option('--discovery <kind>', 'discovery backend: etcd | file | memory')
        .argParser(oneOf(['etcd', 'file', 'memory'] as const))
        .default(defaultDiscoveryKind(), 'etcd if ETCD_ENDPOINTS is set, else file'),
    )
    .addOption(new Option('--discovery-dir <dir>', 'directory of records for file discovery').default(DEFAULT_DISCOVERY_DIR))
    .addOption(new Option('--lease-ttl <seconds>', 'discovery lease TTL').argParser(numberInRange(1, 3600)).default(10))
    .addOption(
      new Option('--event-plane <kind>', 'event plane: nats | direct')
        .argParser(oneOf(['nats', 'direct'] as const))
        .default(defaultEventPlaneKind(), 'nats if NATS_SERVER is set, else direct'),
    )
    .addOption(new Option('--etcd-endpoints <urls>', 'comma-separated etcd endpoints').env('ETCD_ENDPOINTS'))
    .addOption(new Option('--nats-server <url>', 'NATS server URL').env('NATS_SERVER'))
    .addOption(new Option('--host <host>', 'interface the request-plane server binds').default('0.0.0.0'))
    .addOption(new Option('--advertise-host <host>', 'host other processes dial to reach this one').default('127.0.0.1'))
    .addOption(new Option('--grpc-port <port>', 'request-plane port (0 = any free port)').argParser(parsePort).default(0))
    .addOption(new Option('--status-port <port>', 'status server port for /health /live /metrics (0 = any free port)').argParser(parsePort))
    .addOption(new Option('--drain-timeout <seconds>', 'seconds in-flight streams may run after SIGTERM').argParser(nonNegativeInt).default(30))
    .addOption(new Option('--log-level <level>', 'pino log level').argParser(oneOf(['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const)).default('info'));
}

export function runtimeConfigFromFlags(flags: RuntimeFlags, name: string): RuntimeConfig {
  const config: RuntimeConfig = {
    name,
    discovery: flags.discovery,
    discoveryDir: flags.discoveryDir,
    leaseTtlSeconds: flags.leaseTtl,
    eventPlane: flags.eventPlane,
    host: flags.host,
    advertiseHost: flags.advertiseHost,
    grpcPort: flags.grpcPort,
    drainTimeoutMs: flags.drainTimeout * 1000,
    logLevel: flags.logLevel,
    manageProcess: true,
  };
  if (flags.discovery === 'etcd') config.etcdEndpoints = etcdEndpointsFromEnv({ ETCD_ENDPOINTS: flags.etcdEndpoints ?? process.env.ETCD_ENDPOINTS });
  if (flags.eventPlane === 'nats') config.natsServer = natsServerFromEnv({ NATS_SERVER: flags.natsServer ?? process.env.NATS_SERVER });
  if (flags.statusPort !== undefined) config.statusPort = flags.statusPort;
  return config;
}

export function createRuntimeFromOptions(flags: RuntimeFlags, name: string): Promise<DistributedRuntime> {
  return DistributedRuntime.create(runtimeConfigFromFlags(flags, name));
}
