/**
 * The kubernetes connector: each pool is one Deployment, found by the label `tandem.dev/pool`
 * (`agg`, `prefill` or `decode`) in one namespace; the planner reads and patches its `scale`
 * subresource (apps/v1), nothing else. Config: in-cluster when KUBERNETES_SERVICE_HOST is set,
 * else the kubeconfig (KUBECONFIG or ~/.kube/config), or a KubeConfig the caller built.
 *
 * It never fights a human: it remembers the replicas it last read or set per pool; a read that
 * finds another count (someone ran `kubectl scale`, or an HPA did) is logged and adopted as the
 * pool's current size, and the planner decides from there.
 */
// Types only at load time: the client costs ~0.7 s to import, and every CLI command loads planner/.
import type { AppsV1Api, ConfigurationOptions, KubeConfig } from '@kubernetes/client-node';
import type { Decision } from '../policy/decision.js';
import type { PoolConnector } from '../policy/connector.js';
import type { PoolName } from '../policy/observation.js';
import { ConnectorError } from './errors.js';

/** The label that names a Deployment's pool (deploy/k8s manifests carry the same key). */
export const POOL_LABEL = 'tandem.dev/pool';

export interface KubernetesConnectorOptions {
  namespace: string;
  /** Label key whose value is the pool name (default POOL_LABEL). */
  labelKey?: string;
  /** A ready KubeConfig (tests); default: in-cluster or the kubeconfig. */
  kubeConfig?: KubeConfig;
  /** Recorded as the patch's field manager. */
  fieldManager?: string;
  log?: (msg: string, fields: Record<string, unknown>) => void;
}

type K8s = typeof import('@kubernetes/client-node');

export function loadKubeConfig(k8s: K8s): KubeConfig {
  const kc = new k8s.KubeConfig();
  if (process.env.KUBERNETES_SERVICE_HOST) kc.loadFromCluster();
  else kc.loadFromDefault();
  return kc;
}

export class KubernetesConnector implements PoolConnector {
  readonly kind = 'kubernetes' as const;
  private readonly api: AppsV1Api;
  private readonly labelKey: string;
  private readonly deployments = new Map<PoolName, string>();
  /** Replicas last read or set per pool: a read that differs was changed by someone else. */
  private readonly known = new Map<PoolName, number>();
  /** Changes made outside the planner that it adopted, for logs and tests. */
  adopted = 0;

  private readonly mergePatch: ConfigurationOptions;

  private constructor(
    k8s: K8s,
    private readonly options: KubernetesConnectorOptions,
  ) {
    this.api = (options.kubeConfig ?? loadKubeConfig(k8s)).makeApiClient(k8s.AppsV1Api);
    this.mergePatch = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);
    this.labelKey = options.labelKey ?? POOL_LABEL;
  }

  static async create(options: KubernetesConnectorOptions): Promise<KubernetesConnector> {
    return new KubernetesConnector(await import('@kubernetes/client-node'), options);
  }

  async replicas(pool: PoolName): Promise<number> {
    const name = await this.deployment(pool);
    const scale = await this.call(pool, `GET scale of ${name}`, () => this.api.readNamespacedDeploymentScale({ name, namespace: this.options.namespace }));
    const now = scale.spec?.replicas ?? 0;
    const before = this.known.get(pool);
    if (before !== undefined && before !== now) {
      this.adopted++;
      this.options.log?.('replicas changed outside the planner: adopting', { pool, deployment: name, planner: before, now });
    }
    this.known.set(pool, now);
    return now;
  }

  async scale(pool: PoolName, target: number, decision: Decision): Promise<void> {
    const name = await this.deployment(pool);
    const body = { spec: { replicas: target } };
    const fieldManager = this.options.fieldManager ?? 'tandem-planner';
    await this.call(pool, `PATCH scale of ${name} to ${target}`, () =>
      this.api.patchNamespacedDeploymentScale({ name, namespace: this.options.namespace, body, fieldManager }, this.mergePatch),
    );
    this.known.set(pool, target);
    this.options.log?.('scaled', { pool, deployment: name, from: decision.current, to: target, rule: decision.rule });
  }

  /** The pool's Deployment, looked up by label once and again after a 404. */
  private async deployment(pool: PoolName): Promise<string> {
    const cached = this.deployments.get(pool);
    if (cached) return cached;
    const selector = `${this.labelKey}=${pool}`;
    const list = await this.call(pool, `list deployments ${selector}`, () => this.api.listNamespacedDeployment({ namespace: this.options.namespace, labelSelector: selector }));
    const names = list.items.map((d) => d.metadata?.name).filter((n): n is string => typeof n === 'string');
    if (names.length === 0) throw new ConnectorError('kubernetes', 'not_found', `no Deployment labelled ${selector} in namespace ${this.options.namespace}`, 404);
    if (names.length > 1) throw new ConnectorError('kubernetes', 'rejected', `${names.length} Deployments labelled ${selector} in namespace ${this.options.namespace} (${names.join(', ')}): one per pool`);
    this.deployments.set(pool, names[0]!);
    return names[0]!;
  }

  private async call<T>(pool: PoolName, what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      const status = statusOf(err);
      if (status === 404) this.deployments.delete(pool); // renamed or recreated: look it up again
      const kind = status === 404 ? 'not_found' : status === 409 ? 'conflict' : status !== undefined && status >= 500 ? 'server' : status !== undefined ? 'rejected' : 'unreachable';
      throw new ConnectorError('kubernetes', kind, `${what}: ${status !== undefined ? `HTTP ${status}` : (err as Error).message}`, status, { cause: err });
    }
  }
}

function statusOf(err: unknown): number | undefined {
  const code = (err as { code?: unknown }).code;
  return typeof code === 'number' && code >= 100 && code < 600 ? code : undefined;
}
