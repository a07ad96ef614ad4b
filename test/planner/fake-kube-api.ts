/**
 * A small in-test Kubernetes API server that speaks apps/v1: list Deployments by label, and GET /
 * PATCH `namespaces/{ns}/deployments/{name}/scale`. It records every request, and `failNext`
 * answers the next request of a method with an error status. Used by kubernetes-connector.test.ts
 * and by the PoolConnector contract suite.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { KubeConfig } from '@kubernetes/client-node';
import { POOL_LABEL } from '../../planner/index.js';

export interface Seen {
  method: string;
  path: string;
  contentType?: string;
  body?: unknown;
}

/** Deployments by name: pool label and spec.replicas. `failNext` answers the next matching request with a status. */
export class FakeApiServer {
  readonly requests: Seen[] = [];
  readonly deployments = new Map<string, { pool: string; replicas: number }>();
  failNext: { method: string; status: number } | undefined;
  private server!: Server;
  url = '';

  async start(): Promise<void> {
    this.server = createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  close(): Promise<void> {
    return new Promise((r) => this.server.close(() => r()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let text = '';
    for await (const chunk of req) text += chunk;
    const url = new URL(req.url!, this.url);
    const seen: Seen = { method: req.method!, path: url.pathname };
    if (req.headers['content-type']) seen.contentType = req.headers['content-type'];
    if (text) seen.body = JSON.parse(text);
    this.requests.push(seen);
    const send = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (this.failNext && this.failNext.method === req.method) {
      const { status } = this.failNext;
      this.failNext = undefined;
      return send(status, { kind: 'Status', apiVersion: 'v1', status: 'Failure', code: status, message: `fake ${status}` });
    }
    const list = url.pathname.match(/^\/apis\/apps\/v1\/namespaces\/([^/]+)\/deployments$/);
    if (list && req.method === 'GET') {
      const [key, value] = (url.searchParams.get('labelSelector') ?? '').split('=');
      const items = [...this.deployments].filter(([, d]) => key === POOL_LABEL && d.pool === value).map(([name, d]) => ({ metadata: { name, namespace: list[1], labels: { [POOL_LABEL]: d.pool } }, spec: { replicas: d.replicas } }));
      return send(200, { kind: 'DeploymentList', apiVersion: 'apps/v1', metadata: {}, items });
    }
    const m = url.pathname.match(/^\/apis\/apps\/v1\/namespaces\/([^/]+)\/deployments\/([^/]+)\/scale$/);
    const d = m ? this.deployments.get(m[2]!) : undefined;
    if (!m || !d) return send(404, { kind: 'Status', apiVersion: 'v1', status: 'Failure', code: 404, reason: 'NotFound' });
    if (req.method === 'PATCH') d.replicas = (seen.body as { spec: { replicas: number } }).spec.replicas;
    else if (req.method !== 'GET') return send(405, {});
    return send(200, { kind: 'Scale', apiVersion: 'autoscaling/v1', metadata: { name: m[2], namespace: m[1] }, spec: { replicas: d.replicas }, status: { replicas: d.replicas } });
  }
}

export function kubeConfigFor(server: string): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'fake', server, skipTLSVerify: true }],
    users: [{ name: 'planner', token: 'test-token' }],
    contexts: [{ name: 'fake', cluster: 'fake', user: 'planner', namespace: 'serving' }],
    currentContext: 'fake',
  });
  return kc;
}
