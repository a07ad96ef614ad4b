/**
 * Per-process status server: `/live` answers while the process runs, `/health` is 200 only once
 * the process has registered (and 503 while starting or draining), `/metrics` is prom-client text.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';
import { listenOn } from './listen.js';

export type HealthState = 'starting' | 'ready' | 'draining';

export class StatusServer {
  private state: HealthState = 'starting';
  private server: Server | undefined;

  constructor(private readonly registry: Registry) {}

  setState(state: HealthState): void {
    this.state = state;
  }

  get health(): HealthState {
    return this.state;
  }

  async listen(port: number, host = '0.0.0.0'): Promise<string> {
    const server = createServer((req, res) => {
      const path = (req.url ?? '/').split('?')[0];
      if (path === '/live') {
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"live"}');
      } else if (path === '/health') {
        const ok = this.state === 'ready';
        res.writeHead(ok ? 200 : 503, { 'content-type': 'application/json' }).end(JSON.stringify({ status: this.state }));
      } else if (path === '/metrics') {
        this.registry.metrics().then(
          (text) => res.writeHead(200, { 'content-type': this.registry.contentType }).end(text),
          (err: unknown) => res.writeHead(500).end(String(err)),
        );
      } else {
        res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"not found"}');
      }
    });
    this.server = server;
    await listenOn(server, port, host, '--status-port');
    const addr = server.address() as AddressInfo;
    return `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${addr.port}`;
  }

  async close(): Promise<void> {
    const server = this.server;
    if (!server) return;
    this.server = undefined;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
