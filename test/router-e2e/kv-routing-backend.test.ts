/**
 * Both `KvRoutingBackend`s through one contract (kv-routing-backend.contract.ts), in front of
 * the same two real mocker workers: `LocalKvBackend` over a hub in this "frontend", and
 * `RemoteKvBackend` over a real `startRouterServer` replica (the core of `runtime router`)
 * on its own runtime, reached over the gRPC request plane.
 */
import { afterAll, beforeAll } from 'vitest';
import { KvRouterHub } from '../../router/adapters/kv-router-hub.js';
import { LocalKvBackend, RemoteKvBackend } from '../../router/adapters/kv-routing-backend.js';
import { startRouterServer } from '../../router/adapters/router-server.js';
import { kvRoutingBackendContract } from './kv-routing-backend.contract.js';
import { Stack } from './stack.js';

let stack: Stack;
let opened = 0;

beforeAll(async () => {
  stack = await Stack.start(2);
}, 60_000);

afterAll(async () => {
  await stack?.close();
});

kvRoutingBackendContract('LocalKvBackend (router in this process)', () => ({
  stack: () => stack,
  open: async (router) => {
    const hub = await KvRouterHub.start(await stack.runtime(`frontend-${++opened}`), { namespace: 'tandem', ...(router ? { router } : {}) });
    return { backend: new LocalKvBackend(hub), service: () => hub.started('backend'), stop: async () => {} };
  },
}));

kvRoutingBackendContract('RemoteKvBackend (runtime router replica)', () => ({
  stack: () => stack,
  open: async (router) => {
    // Each router serves its own component, so backends of earlier tests never reach it.
    const component = `router-${++opened}`;
    const server = await startRouterServer(await stack.runtime(component), { namespace: 'tandem', component, ...(router ? { router } : {}) });
    const backend = await RemoteKvBackend.open(await stack.runtime(`frontend-${opened}`), 'tandem', component);
    await backend.waitForReplicas(1, 10_000);
    return { backend, service: () => server.hub.started('backend'), stop: () => server.close() };
  },
}));
