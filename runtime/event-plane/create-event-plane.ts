/** Pick an event plane by kind, from the dependencies a runtime has at hand. */
import type { InstanceId } from '../../proto/wire.js';
import type { Discovery } from '../discovery/discovery.js';
import { ConfigError } from '../errors.js';
import type { Logger } from '../logging.js';
import type { GrpcRequestPlaneClient } from '../request-plane/grpc-client.js';
import type { RequestPlaneServer } from '../request-plane/types.js';
import { DirectEventPlane } from './direct-event-plane.js';
import type { EventPlane, EventPlaneKind } from './event-plane.js';
import { NatsEventPlane } from './nats-event-plane.js';

export const DEFAULT_NATS_SERVER = 'nats://127.0.0.1:4222';

export interface EventPlaneDeps {
  instanceId: InstanceId;
  /** direct: where instances are listed. */
  discovery?: Discovery;
  /** direct: the process's gRPC server, started on demand. */
  server?: () => Promise<RequestPlaneServer>;
  /** direct: a shared request-plane client. */
  client?: GrpcRequestPlaneClient;
  /** nats: server URL(s); default $NATS_SERVER, else nats://127.0.0.1:4222. */
  natsServer?: string;
  logger?: Logger;
}

export async function createEventPlane(kind: EventPlaneKind, deps: EventPlaneDeps): Promise<EventPlane> {
  switch (kind) {
    case 'nats': {
      const servers = (deps.natsServer ?? process.env.NATS_SERVER ?? DEFAULT_NATS_SERVER).split(',').map((s) => s.trim()).filter(Boolean);
      return NatsEventPlane.connect({ servers, instanceId: deps.instanceId, ...(deps.logger ? { logger: deps.logger } : {}) });
    }
    case 'direct': {
      if (!deps.discovery || !deps.server) throw new ConfigError('the direct event plane needs discovery and the process gRPC server');
      return new DirectEventPlane({
        instanceId: deps.instanceId,
        discovery: deps.discovery,
        server: deps.server,
        ...(deps.client ? { client: deps.client } : {}),
        ...(deps.logger ? { logger: deps.logger } : {}),
      });
    }
    default:
      throw new ConfigError(`unknown event plane '${String(kind)}' (expected nats or direct)`);
  }
}
