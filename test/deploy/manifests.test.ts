/**
 * deploy/k8s, checked the way CI can without a cluster: every overlay renders with
 * `kubectl kustomize`, every object passes the official Kubernetes OpenAPI schemas (and has no
 * field they do not know), and the wiring holds: every flag and TANDEM_* variable a container
 * passes is one its `runtime` command accepts, probes hit the status server's paths on the
 * ports the args open, Services and PDBs select real pods, grace periods outlast the drain,
 * the planner's Role covers what its kubernetes connector calls, and the dashboard only plots
 * metrics the code exports.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../harness/processes.js';
import { K8S_DIR, cliSurface, commandPathOf, flagValue, kustomizePath, podTemplates, render, schemaErrors, selects, unknownFields, type K8sObject } from './manifests.js';

const POOL_LABEL = 'tandem.dev/pool';
const CONNECTOR_SOURCE = join(REPO_ROOT, 'planner', 'connectors', 'kubernetes.ts');

interface Expected {
  dir: string;
  namespace: string;
  pools: string[];
  routerMode: 'round-robin' | 'kv';
  engine: 'native' | 'mocker';
  device: string;
  modelVolume: boolean;
  planner: boolean;
  extraKinds?: string[];
}

const disagg = { pools: ['prefill', 'decode'], routerMode: 'kv' as const, namespace: 'tandem', planner: false };
const RENDERS: Expected[] = [
  { dir: 'deploy/k8s/overlays/aggregated', namespace: 'tandem', pools: ['agg'], routerMode: 'round-robin', engine: 'native', device: 'cpu', modelVolume: true, planner: false },
  { dir: 'deploy/k8s/overlays/disaggregated', ...disagg, engine: 'native', device: 'cpu', modelVolume: true },
  { dir: 'deploy/k8s/overlays/mocker', ...disagg, engine: 'mocker', device: 'cpu', modelVolume: false },
  { dir: 'deploy/k8s/overlays/planner', ...disagg, engine: 'native', device: 'cpu', modelVolume: true, planner: true },
  { dir: 'deploy/k8s/overlays/cuda', namespace: 'tandem', pools: ['agg'], routerMode: 'round-robin', engine: 'native', device: 'cuda:0', modelVolume: true, planner: false },
  { dir: 'deploy/k8s/examples/production', ...disagg, namespace: 'serving', engine: 'native', device: 'cuda:0', modelVolume: true, planner: true, extraKinds: ['PodMonitor', 'Ingress'] },
];

const rendered = new Map<string, K8sObject[]>();
function objectsOf(dir: string): K8sObject[] {
  let objects = rendered.get(dir);
  if (!objects) rendered.set(dir, (objects = render(dir)));
  return objects;
}

const containersOf = (spec: any): any[] => [...(spec.initContainers ?? []), ...spec.containers];
const workerDeployments = (objects: K8sObject[]) => objects.filter((o) => o.kind === 'Deployment' && o.metadata.labels?.['app.kubernetes.io/component'] === 'worker');
const deployment = (objects: K8sObject[], name: string) => objects.find((o) => o.kind === 'Deployment' && o.metadata.name === name)!;

/** A container's environment: its env entries plus the keys of the ConfigMaps it loads. */
function envOf(container: any, objects: K8sObject[]): Map<string, any> {
  const env = new Map<string, any>();
  for (const from of container.envFrom ?? []) {
    const cm = objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name === from.configMapRef?.name);
    expect(cm, `envFrom ConfigMap ${from.configMapRef?.name} exists`).toBeDefined();
    for (const [k, v] of Object.entries(cm!.data ?? {})) env.set(k, { value: v });
  }
  for (const e of container.env ?? []) env.set(e.name, e);
  return env;
}

/** `runtime ...` invocations of a container: its args under the image's entrypoint, or inside `sh -c`. */
function runtimeInvocations(container: any): string[][] {
  if (container.command === undefined) return [container.args ?? []];
  const script = container.command[0] === 'sh' && container.command[1] === '-c' ? String(container.command[2]) : '';
  return [...script.matchAll(/\bruntime\s+([^|;&]+)/g)].map((m) => m[1]!.trim().split(/\s+/));
}

function isTandemImage(image: string): boolean {
  return /(^|\/)tandem(-cuda)?:/.test(image);
}


describe.each(RENDERS)('deploy: $dir', (expected) => {
  it('renders, and every object passes the Kubernetes OpenAPI schema with no unknown field', () => {
    const objects = objectsOf(expected.dir);
    expect(objects.length).toBeGreaterThan(10);
    expect(objects.flatMap(schemaErrors)).toEqual([]);
    for (const kind of expected.extraKinds ?? []) expect(objects.some((o) => o.kind === kind), `${kind} rendered`).toBe(true);
  });

  it('puts everything in one namespace, with app.kubernetes.io labels and pinned images', () => {
    const objects = objectsOf(expected.dir);
    const ns = objects.filter((o) => o.kind === 'Namespace');
    expect(ns.map((o) => o.metadata.name)).toEqual([expected.namespace]);
    for (const o of objects) {
      if (o.kind !== 'Namespace') expect(o.metadata.namespace, `${o.kind}/${o.metadata.name} namespace`).toBe(expected.namespace);
      expect(o.metadata.labels?.['app.kubernetes.io/part-of'], `${o.kind}/${o.metadata.name} part-of`).toBe('tandem');
      if (o.kind !== 'Namespace' && o.kind !== 'ConfigMap') expect(o.metadata.labels?.['app.kubernetes.io/name'], `${o.kind}/${o.metadata.name} name label`).toBeTruthy();
    }
    for (const { owner, labels, spec } of podTemplates(objects)) {
      for (const key of ['app.kubernetes.io/name', 'app.kubernetes.io/instance', 'app.kubernetes.io/component']) expect(labels[key], `${owner.metadata.name} pod label ${key}`).toBeTruthy();
      for (const c of containersOf(spec)) {
        expect(c.image, `${owner.metadata.name}/${c.name} image tag`).toMatch(/:[\w.-]+$/);
        expect(c.image).not.toMatch(/:latest$/);
      }
    }
    const rb = objects.filter((o) => o.kind === 'RoleBinding');
    for (const b of rb) for (const s of b.subjects) expect(s.namespace, `RoleBinding ${b.metadata.name} subject`).toBe(expected.namespace);
  });

  it('passes only flags and TANDEM_* variables that `runtime <command> --help` lists', () => {
    const objects = objectsOf(expected.dir);
    let checked = 0;
    for (const { owner, spec } of podTemplates(objects)) {
      for (const c of containersOf(spec)) {
        if (!isTandemImage(c.image)) continue;
        for (const args of runtimeInvocations(c)) {
          const path = commandPathOf(args);
          expect(path.length, `${owner.metadata.name}/${c.name}: a runtime command`).toBeGreaterThan(0);
          const surface = cliSurface(path);
          expect(surface.flags.size, `runtime ${path.join(' ')} --help lists flags`).toBeGreaterThan(2);
          for (const flag of args.filter((a) => a.startsWith('--'))) {
            expect(surface.flags.has(flag), `${owner.metadata.name}/${c.name}: runtime ${path.join(' ')} has no ${flag}`).toBe(true);
            checked++;
          }
          for (const name of envOf(c, objects).keys()) {
            if (!/^(TANDEM_|ETCD_ENDPOINTS$|NATS_SERVER$)/.test(name) || name === 'TANDEM_LOG_FORMAT') continue;
            expect(surface.env.has(name), `${owner.metadata.name}/${c.name}: runtime ${path.join(' ')} reads no ${name}`).toBe(true);
          }
        }
      }
    }
    expect(checked).toBeGreaterThan(10);
  });

  it('has one Deployment per pool, labelled for the planner, running the matching --mode', () => {
    const objects = objectsOf(expected.dir);
    const workers = workerDeployments(objects);
    expect(workers.map((d) => d.metadata.labels![POOL_LABEL]).sort()).toEqual([...expected.pools].sort());
    for (const d of workers) {
      const pool = d.metadata.labels![POOL_LABEL]!;
      expect(d.spec.selector.matchLabels[POOL_LABEL]).toBe(pool);
      expect(d.spec.template.metadata.labels[POOL_LABEL]).toBe(pool);
      const worker = d.spec.template.spec.containers.find((c: any) => c.name === 'worker');
      expect(commandPathOf(worker.args)).toEqual(['worker']);
      expect(flagValue(worker.args, '--mode')).toBe(pool);
      const env = envOf(worker, objects);
      expect(env.get('TANDEM_ENGINE')?.value).toBe(expected.engine);
      expect(env.get('TANDEM_DEVICE')?.value).toBe(expected.device);
      if (pool !== 'agg') expect(env.get('UCX_TLS')?.value, `${pool}: UCX transport set`).toBeTruthy();
      // Other pods dial the worker at its pod IP.
      expect(flagValue(worker.args, '--advertise-host')).toBe('$(POD_IP)');
      expect(env.get('POD_IP')?.valueFrom?.fieldRef?.fieldPath).toBe('status.podIP');
      const gpus = worker.resources?.limits?.['nvidia.com/gpu'];
      expect(gpus, `${pool}: GPU limit`).toBe(expected.device.startsWith('cuda') ? '1' : undefined);
      // The model: the volume read-only (PVC overlays) or generated into an emptyDir (mocker).
      const modelDir = flagValue(worker.args, '--model')!;
      const mount = worker.volumeMounts.find((m: any) => modelDir.startsWith(`${m.mountPath}/`));
      expect(mount?.readOnly, `${pool}: model volume mounted read-only`).toBe(true);
      const volume = d.spec.template.spec.volumes.find((v: any) => v.name === mount.name);
      if (expected.modelVolume) {
        expect(volume.persistentVolumeClaim.readOnly).toBe(true);
        expect(objects.some((o) => o.kind === 'PersistentVolumeClaim' && o.metadata.name === volume.persistentVolumeClaim.claimName)).toBe(true);
      } else {
        expect(volume.emptyDir).toBeDefined();
        const make = d.spec.template.spec.initContainers.find((c: any) => c.args?.[1] === 'make-tiny');
        expect(flagValue(make.args, '--out')).toBe(modelDir);
      }
    }
    const frontend = deployment(objects, 'tandem-frontend').spec.template.spec.containers[0];
    expect(flagValue(frontend.args, '--router-mode')).toBe(expected.routerMode);
  });

  it('probes the status server: startup, liveness on /live, readiness on /health, on the ports the args open', () => {
    const objects = objectsOf(expected.dir);
    for (const d of objects.filter((o) => o.kind === 'Deployment')) {
      const role = d.metadata.labels!['app.kubernetes.io/component'];
      for (const c of d.spec.template.spec.containers) {
        const portOf = (p: number | string) => (typeof p === 'number' ? p : c.ports.find((cp: any) => cp.name === p)?.containerPort);
        const served = [flagValue(c.args, '--status-port'), flagValue(c.args, '--http-port')].filter((p) => p !== undefined).map(Number);
        const where = `${d.metadata.name}/${c.name}`;
        for (const kind of ['startupProbe', 'livenessProbe', 'readinessProbe']) {
          const probe = c[kind];
          expect(probe?.httpGet, `${where} ${kind}`).toBeDefined();
          expect(served, `${where} ${kind} port ${probe.httpGet.port} is one the process listens on`).toContain(portOf(probe.httpGet.port));
          expect(['/live', '/health']).toContain(probe.httpGet.path);
        }
        expect(c.livenessProbe.httpGet.path, `${where} liveness`).toBe('/live');
        // The planner registers no endpoint, so its /health never turns ready: it probes /live.
        expect(c.readinessProbe.httpGet.path, `${where} readiness`).toBe(role === 'planner' ? '/live' : '/health');
        if (role === 'worker') expect(c.startupProbe.httpGet.path, `${where}: startup waits for registration`).toBe('/health');
      }
    }
  });

  it('gives every process more grace than its preStop and --drain-timeout take', () => {
    const objects = objectsOf(expected.dir);
    for (const d of objects.filter((o) => o.kind === 'Deployment')) {
      const spec = d.spec.template.spec;
      for (const c of spec.containers) {
        const drain = Number(flagValue(c.args, '--drain-timeout') ?? 30);
        const preStop = c.lifecycle?.preStop?.exec?.command;
        const preStopS = preStop?.[0] === 'sleep' ? Number(preStop[1]) : 0;
        expect(spec.terminationGracePeriodSeconds, `${d.metadata.name}: grace > preStop ${preStopS} + drain ${drain}`).toBeGreaterThan(preStopS + drain);
      }
      // Rolling updates add a pod before removing one (the planner's own Deployment recreates).
      if (d.metadata.labels!['app.kubernetes.io/component'] !== 'planner') expect(d.spec.strategy.rollingUpdate.maxUnavailable).toBe(0);
    }
  });

  it('Services, PodDisruptionBudgets and PodMonitors select real pods and ports', () => {
    const objects = objectsOf(expected.dir);
    const pods = podTemplates(objects);
    for (const svc of objects.filter((o) => o.kind === 'Service')) {
      const matched = pods.filter((p) => selects(svc.spec.selector, p.labels));
      expect(matched.length, `Service ${svc.metadata.name} selects pods`).toBeGreaterThan(0);
      for (const port of svc.spec.ports) {
        const named = typeof port.targetPort === 'string';
        const ok = matched.every((p) => p.spec.containers.some((c: any) => (c.ports ?? []).some((cp: any) => (named ? cp.name === port.targetPort : cp.containerPort === (port.targetPort ?? port.port)))));
        expect(ok, `Service ${svc.metadata.name} port ${port.name} reaches a container port`).toBe(true);
      }
    }
    const pdbs = objects.filter((o) => o.kind === 'PodDisruptionBudget');
    for (const pdb of pdbs) expect(pods.filter((p) => selects(pdb.spec.selector, p.labels)).length, `PDB ${pdb.metadata.name}`).toBe(1);
    for (const d of workerDeployments(objects)) {
      expect(pdbs.filter((pdb) => selects(pdb.spec.selector, d.spec.template.metadata.labels)).length, `one PDB for pool ${d.metadata.labels![POOL_LABEL]}`).toBe(1);
    }
    for (const pm of objects.filter((o) => o.kind === 'PodMonitor')) {
      const matched = pods.filter((p) => selects(pm.spec.selector, p.labels));
      expect(matched.map((p) => p.owner.metadata.name).sort()).toEqual(objects.filter((o) => o.kind === 'Deployment').map((o) => o.metadata.name).sort());
      for (const ep of pm.spec.podMetricsEndpoints) {
        expect(ep.path).toBe('/metrics');
        for (const p of matched) {
          const c = p.spec.containers.find((c: any) => (c.ports ?? []).some((cp: any) => cp.name === ep.port));
          expect(c, `${p.owner.metadata.name} has port ${ep.port}`).toBeDefined();
          expect(String(c.ports.find((cp: any) => cp.name === ep.port).containerPort)).toBe(flagValue(c.args, '--status-port'));
        }
      }
    }
  });
});

describe.each(RENDERS.filter((r) => r.planner))('deploy: the planner in $dir', (expected) => {
  it('its Role covers what it calls, bound to its ServiceAccount, and its config parses', async () => {
    const objects = objectsOf(expected.dir);
    const planner = deployment(objects, 'tandem-planner');
    const sa = planner.spec.template.spec.serviceAccountName;
    const binding = objects.find((o) => o.kind === 'RoleBinding' && o.subjects.some((s: any) => s.kind === 'ServiceAccount' && s.name === sa))!;
    expect(binding, `a RoleBinding for ${sa}`).toBeDefined();
    expect(objects.some((o) => o.kind === 'ServiceAccount' && o.metadata.name === sa)).toBe(true);
    const role = objects.find((o) => o.kind === 'Role' && o.metadata.name === binding.roleRef.name)!;
    const allows = (verb: string, resource: string) => role.rules.some((r: any) => r.apiGroups.includes('apps') && r.resources.includes(resource) && r.verbs.includes(verb));
    for (const verb of ['get', 'list', 'watch']) expect(allows(verb, 'deployments'), `${verb} deployments`).toBe(true);
    for (const verb of ['get', 'patch']) expect(allows(verb, 'deployments/scale'), `${verb} deployments/scale`).toBe(true);
    // Least privilege: nothing beyond Deployments and their scale.
    expect(role.rules.flatMap((r: any) => r.resources).sort()).toEqual(['deployments', 'deployments/scale']);

    const c = planner.spec.template.spec.containers[0];
    expect(commandPathOf(c.args)).toEqual(['planner']);
    const env = envOf(c, objects);
    expect(env.get('TANDEM_K8S_NAMESPACE')?.valueFrom?.fieldRef?.fieldPath).toBe('metadata.namespace');
    // The frontend metrics URL is the frontend Service's status port.
    const url = new URL(env.get('TANDEM_FRONTEND_METRICS_URL').value);
    const svc = objects.find((o) => o.kind === 'Service' && o.metadata.name === url.hostname)!;
    expect(svc.spec.ports.find((p: any) => p.port === Number(url.port))?.name).toBe('status');

    // The config file the args name, from the mounted ConfigMap, through the planner's own parser.
    const configPath = flagValue(c.args, '--config')!;
    const mount = c.volumeMounts.find((m: any) => configPath.startsWith(`${m.mountPath}/`));
    const cmName = planner.spec.template.spec.volumes.find((v: any) => v.name === mount.name).configMap.name;
    const text = objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name === cmName)!.data[configPath.slice(mount.mountPath.length + 1)];
    const { parsePlannerConfig } = (await import(join(REPO_ROOT, 'dist', 'planner', 'index.js'))) as { parsePlannerConfig: (raw: unknown) => { pools: Record<string, unknown> } };
    const config = parsePlannerConfig(JSON.parse(text));
    expect(Object.keys(config.pools).sort()).toEqual([...expected.pools].sort());
  });
});

describe('deploy: the planner connector and the manifests agree', () => {
  it.skipIf(!existsSync(CONNECTOR_SOURCE))('every Kubernetes API call in planner/connectors/kubernetes.ts is allowed by the Role (skipped: connector not in this tree)', () => {
    const source = readFileSync(CONNECTOR_SOURCE, 'utf8');
    expect(source).toContain(`'${POOL_LABEL}'`);
    const verbs: Record<string, string> = { read: 'get', list: 'list', patch: 'patch', replace: 'update', create: 'create', delete: 'delete', watch: 'watch' };
    const calls = [...source.matchAll(/\.(read|list|patch|replace|create|delete|watch)Namespaced(Deployment(?:Scale)?)\b/g)].map((m) => ({ verb: verbs[m[1]!]!, resource: m[2] === 'DeploymentScale' ? 'deployments/scale' : 'deployments' }));
    expect(calls.length).toBeGreaterThanOrEqual(3);
    const role = objectsOf('deploy/k8s/overlays/planner').find((o) => o.kind === 'Role')!;
    for (const call of calls) {
      expect(role.rules.some((r: any) => r.resources.includes(call.resource) && r.verbs.includes(call.verb)), `${call.verb} ${call.resource}`).toBe(true);
    }
  });
});

describe('deploy: kustomize details', () => {
  it('another namespace moves every object and the planner RoleBinding subject with it', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tandem-kustomize-'));
    try {
      writeFileSync(
        join(dir, 'kustomization.yaml'),
        `apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: llm\nresources:\n  - ${kustomizePath(dir, join(K8S_DIR, 'overlays', 'planner'))}\n`,
      );
      const objects = render(dir);
      expect(objects.find((o) => o.kind === 'Namespace')!.metadata.name).toBe('llm');
      expect(objects.filter((o) => o.kind !== 'Namespace' && o.metadata.namespace !== 'llm')).toEqual([]);
      expect(objects.find((o) => o.kind === 'RoleBinding')!.subjects[0].namespace).toBe('llm');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("docs/kubernetes.md's existing-etcd-and-NATS example renders: no bundled etcd or NATS, every pod pointed at the given ones", () => {
    const doc = readFileSync(join(REPO_ROOT, 'docs', 'kubernetes.md'), 'utf8');
    const block = /## Existing etcd and NATS[\s\S]*?```yaml\n([\s\S]*?)```/.exec(doc)?.[1];
    expect(block, 'the yaml block of "Existing etcd and NATS"').toBeDefined();
    const dir = mkdtempSync(join(tmpdir(), 'tandem-kustomize-'));
    try {
      const overlay = kustomizePath(dir, join(K8S_DIR, 'overlays', 'disaggregated'));
      writeFileSync(join(dir, 'kustomization.yaml'), `apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n${block!.replace(/\.\.\/\.\.\/overlays\/disaggregated.*/, overlay)}`);
      const objects = render(dir);
      expect(objects.filter((o) => ['etcd', 'etcd-peer', 'nats', 'nats-headless'].includes(o.metadata.name))).toEqual([]);
      const cm = objects.filter((o) => o.kind === 'ConfigMap');
      expect(cm).toHaveLength(1);
      expect(cm[0]!.data.NATS_SERVER).toBe('nats://nats.infra:4222');
      expect(cm[0]!.data.ETCD_ENDPOINTS).toMatch(/^http:\/\/etcd-0\.etcd\.infra:2379,/);
      for (const d of workerDeployments(objects)) expect(d.spec.template.spec.containers[0].envFrom[0].configMapRef.name).toBe(cm[0]!.metadata.name);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('the strict field check catches a misspelt field that the schema validators accept', () => {
    const deploymentObj = deployment(objectsOf('deploy/k8s/overlays/mocker'), 'tandem-decode');
    const typo = structuredClone(deploymentObj);
    typo.spec.template.spec.containers[0].readinesProbe = typo.spec.template.spec.containers[0].readinessProbe;
    expect(unknownFields(deploymentObj, 'V1Deployment')).toEqual([]);
    expect(unknownFields(typo, 'V1Deployment')).toEqual(['.spec.template.spec.containers[0].readinesProbe']);
    expect(schemaErrors(typo)).toEqual(['Deployment/tandem-decode: unknown field .spec.template.spec.containers[0].readinesProbe']);
  });

  it('every overlay and example directory is one the suite renders', () => {
    const dirs = ['overlays', 'examples'].flatMap((d) => readdirSync(join(K8S_DIR, d)).map((name) => `deploy/k8s/${d}/${name}`)).filter((d) => statSync(join(REPO_ROOT, d)).isDirectory());
    expect(dirs.sort()).toEqual(RENDERS.map((r) => r.dir).sort());
  });
});

describe('deploy: the Grafana dashboard', () => {
  it('plots only metrics the code exports', () => {
    const dashboard = JSON.parse(readFileSync(join(K8S_DIR, 'components', 'monitoring', 'tandem-dashboard.json'), 'utf8')) as { panels: { targets?: { expr: string }[] }[] };
    const exprs = dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr));
    expect(exprs.length).toBeGreaterThan(20);
    // A metric is a name followed by its selector; tandem_pool (the PodMonitor's label) is not one.
    const used = new Set(exprs.flatMap((e) => [...e.matchAll(/\b(tandem_[a-z_]+)\{/g)].map((m) => m[1]!.replace(/_(bucket|sum|count)$/, ''))));
    const exported = execFileSync('grep', ['-rhoE', "'tandem_[a-z_]+'", 'frontend', 'workers', 'router', 'planner'], { cwd: REPO_ROOT, encoding: 'utf8' });
    const names = new Set(exported.split('\n').map((l) => l.replace(/'/g, '')));
    expect([...used].filter((m) => !names.has(m))).toEqual([]);
    expect(used.size).toBeGreaterThan(25);
  });
});
