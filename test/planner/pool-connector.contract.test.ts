/**
 * The PoolConnector contract (pool-connector.contract.ts) run on every connector: local (a
 * launcher of fake workers), virtual (a real executor over memory discovery) and kubernetes
 * (its client against the in-test apps/v1 API server, over HTTP).
 */
import { KubernetesConnector, LocalConnector, runVirtualExecutor, VirtualConnector, type LocalWorker, type PoolName } from '../../planner/index.js';
import { MemoryDiscovery, MemoryDiscoveryStore } from '../../runtime/discovery/index.js';
import { FakeApiServer, kubeConfigFor } from './fake-kube-api.js';
import { poolConnectorContract } from './pool-connector.contract.js';

const START: Record<'prefill' | 'decode', number> = { prefill: 1, decode: 2 };

poolConnectorContract('local', async () => {
  const running = new Map<string, PoolName>();
  let fail = false;
  const worker = (pool: PoolName, name: string): LocalWorker => {
    running.set(name, pool);
    return { name, stop: async () => running.delete(name) };
  };
  const connector = new LocalConnector(
    (pool, name) => {
      if (fail) {
        fail = false;
        throw new Error('spawn failed');
      }
      return worker(pool, name);
    },
    { prefill: [worker('prefill', 'prefill-boot-0')], decode: [worker('decode', 'decode-boot-0'), worker('decode', 'decode-boot-1')] },
  );
  return {
    connector,
    backendReplicas: (pool) => [...running.values()].filter((p) => p === pool).length,
    failNextChange: () => (fail = true),
    close: () => connector.drained(),
  };
});

poolConnectorContract('virtual', async () => {
  const store = new MemoryDiscoveryStore();
  const planner = new MemoryDiscovery({ store });
  const executorSide = new MemoryDiscovery({ store });
  const backend = new Map<PoolName, number>(Object.entries(START) as [PoolName, number][]);
  let fail = false;
  const executor = await runVirtualExecutor(executorSide, 'contract', (d) => {
    if (fail) {
      fail = false;
      throw new Error('executor refused');
    }
    backend.set(d.pool, d.target);
    return d.target;
  });
  const connector = new VirtualConnector({ discovery: planner, namespace: 'contract', initial: { ...START }, ackTimeoutMs: 5_000 });
  return {
    connector,
    backendReplicas: (pool) => backend.get(pool) ?? 0,
    failNextChange: () => (fail = true),
    close: async () => {
      executor.close();
      await planner.close();
      await executorSide.close();
    },
  };
});

poolConnectorContract('kubernetes', async () => {
  const api = new FakeApiServer();
  await api.start();
  api.deployments.set('tandem-prefill', { pool: 'prefill', replicas: START.prefill });
  api.deployments.set('tandem-decode', { pool: 'decode', replicas: START.decode });
  const connector = await KubernetesConnector.create({ namespace: 'serving', kubeConfig: kubeConfigFor(api.url) });
  return {
    connector,
    backendReplicas: (pool) => [...api.deployments.values()].find((d) => d.pool === pool)?.replicas ?? 0,
    failNextChange: () => (api.failNext = { method: 'PATCH', status: 503 }),
    close: () => api.close(),
  };
});
