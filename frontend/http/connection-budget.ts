/**
 * The frontend's connection cap, with a separate budget for liveness and health probes.
 *
 * Node's own `server.maxConnections` closes every socket past the cap as it is accepted, before
 * a byte is read: 60 clients that trickle their bodies at `--max-connections 50` made `/live`
 * time out, and the orchestrator killed a frontend that was fine. So the cap is kept here:
 *
 *   connection ─▶ fewer than --max-connections open? ─ yes ─▶ an ordinary connection
 *                 │ no
 *                 ▼
 *   the probe budget (--max-probe-connections): the connection may ask for GET /live or
 *   /health only. Its request head must arrive within PROBE_HEAD_TIMEOUT_MS; it is answered
 *   with `connection: close`; any other request gets 503 `overloaded` (Retry-After) and is
 *   closed. When the budget is full, the oldest probe connection that has not sent its head
 *   yet makes room (a newly opened one is the likeliest to be a real probe); when none can,
 *   the new connection is closed as before.
 *
 * An attacker who holds every ordinary slot therefore cannot starve the probes: slots of the
 * probe budget are held for at most a head timeout, and never for a body.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Logger } from 'pino';
import { ApiError } from '../errors.js';
import { sendError } from './respond.js';

/** Paths a probe connection may ask for. */
export const PROBE_PATHS: ReadonlySet<string> = new Set(['/live', '/health']);
/** How long a connection of the probe budget has to send its request head. */
export const PROBE_HEAD_TIMEOUT_MS = 2_000;
/** At most one "connection refused" warning per this long. */
const DROP_LOG_INTERVAL_MS = 10_000;

export class ConnectionBudget {
  private ordinary = 0;
  /** Probe-budget connections, oldest first; `true` once their head arrived. */
  private readonly probes = new Map<Socket, boolean>();
  private lastDropLog = 0;
  /** Connections closed at accept (both budgets full), since start. */
  dropped = 0;

  constructor(
    private readonly maxConnections: number,
    private readonly maxProbeConnections: number,
    private readonly retryAfterSeconds: number,
    private readonly log: Logger,
  ) {}

  /** Follows `server`'s connections (instead of Node's `maxConnections`). */
  attach(server: Server): void {
    if (this.maxConnections <= 0) return;
    server.on('connection', (socket: Socket) => this.admit(socket));
  }

  /**
   * Called first for every request: true when it was answered here (a request other than a
   * probe on a probe-budget connection), so the router must not see it.
   */
  refuse(req: IncomingMessage, res: ServerResponse): boolean {
    const socket = req.socket;
    if (!this.probes.has(socket)) return false;
    this.probes.set(socket, true);
    socket.setTimeout(0);
    res.shouldKeepAlive = false;
    const path = (req.url ?? '/').split('?')[0]!.replace(/(.)\/$/, '$1');
    if (req.method === 'GET' && PROBE_PATHS.has(path)) return false;
    req.resume();
    sendError(res, new ApiError('overloaded', `the frontend holds its limit of ${this.maxConnections} connections (--max-connections); retry later`), this.retryAfterSeconds);
    return true;
  }

  private admit(socket: Socket): void {
    if (this.ordinary < this.maxConnections) {
      this.ordinary++;
      socket.once('close', () => this.ordinary--);
      return;
    }
    if (this.probes.size >= this.maxProbeConnections && !this.evictHeadless()) {
      this.drop(socket);
      return;
    }
    this.probes.set(socket, false);
    socket.once('close', () => this.probes.delete(socket));
    socket.setTimeout(PROBE_HEAD_TIMEOUT_MS, () => socket.destroy());
  }

  /** Closes the oldest probe-budget connection still without a request head; false when there is none. */
  private evictHeadless(): boolean {
    for (const [socket, headed] of this.probes) {
      if (headed) continue;
      this.probes.delete(socket);
      socket.destroy();
      return true;
    }
    return false;
  }

  private drop(socket: Socket): void {
    this.dropped++;
    socket.destroy();
    const now = Date.now();
    if (now - this.lastDropLog < DROP_LOG_INTERVAL_MS) return;
    this.lastDropLog = now;
    this.log.warn({ maxConnections: this.maxConnections, maxProbeConnections: this.maxProbeConnections, remoteAddress: socket.remoteAddress }, 'connection refused: --max-connections and the probe budget are full');
  }
}
