/**
 * Reading the Kubernetes manifests under deploy/k8s the way a cluster would: render an overlay
 * with `kubectl kustomize`, validate each object against the official OpenAPI schemas
 * (kubernetes-models; @kubernetes-models/prometheus-operator for the PodMonitor CRD), reject
 * fields the schemas do not know (the API server's strict field validation; kubernetes-models
 * alone lets them through), and ask the built CLI which flags and environment variables each
 * `runtime` command accepts.
 */
import { execFileSync } from 'node:child_process';
import { join, relative } from 'node:path';
import * as k8s from '@kubernetes/client-node';
import * as appsV1 from 'kubernetes-models/apps/v1';
import * as batchV1 from 'kubernetes-models/batch/v1';
import * as networkingV1 from 'kubernetes-models/networking.k8s.io/v1';
import * as policyV1 from 'kubernetes-models/policy/v1';
import * as rbacV1 from 'kubernetes-models/rbac.authorization.k8s.io/v1';
import * as coreV1 from 'kubernetes-models/v1';
import * as monitoringV1 from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import { CLI, REPO_ROOT } from '../harness/processes.js';

export const K8S_DIR = join(REPO_ROOT, 'deploy', 'k8s');

/** One rendered object, as loosely typed as YAML is; the checks narrow what they read. */
export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [field: string]: any;
}

/** `kubectl kustomize DIR` (DIR relative to the repository root, or absolute), parsed. */
export function render(dir: string): K8sObject[] {
  const abs = dir.startsWith('/') ? dir : join(REPO_ROOT, dir);
  let text: string;
  try {
    text = execFileSync('kubectl', ['kustomize', abs], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new Error('kubectl not found: install kubectl >= 1.24 (deploy/README.md, "Checks")', { cause: err });
    throw new Error(`kubectl kustomize ${dir} failed: ${String((err as { stderr?: string }).stderr ?? err)}`, { cause: err });
  }
  return k8s.loadAllYaml(text).filter((o): o is K8sObject => o !== null && typeof o === 'object');
}

/** A path from `from` to `to` that kustomize accepts (it refuses absolute resource paths). */
export function kustomizePath(from: string, to: string): string {
  return relative(from, to);
}

interface Validatable {
  validate(): void;
}
type ModelClass = new (data: never) => Validatable;

/** apiVersion/kind → the generated model; a kind missing here fails the suite by name. */
const MODELS: Record<string, ModelClass> = {
  'v1/Namespace': coreV1.Namespace,
  'v1/ConfigMap': coreV1.ConfigMap,
  'v1/Service': coreV1.Service,
  'v1/ServiceAccount': coreV1.ServiceAccount,
  'v1/PersistentVolumeClaim': coreV1.PersistentVolumeClaim,
  'v1/Secret': coreV1.Secret,
  'apps/v1/Deployment': appsV1.Deployment,
  'apps/v1/StatefulSet': appsV1.StatefulSet,
  'batch/v1/Job': batchV1.Job,
  'policy/v1/PodDisruptionBudget': policyV1.PodDisruptionBudget,
  'rbac.authorization.k8s.io/v1/Role': rbacV1.Role,
  'rbac.authorization.k8s.io/v1/RoleBinding': rbacV1.RoleBinding,
  'networking.k8s.io/v1/Ingress': networkingV1.Ingress,
  'monitoring.coreos.com/v1/PodMonitor': monitoringV1.PodMonitor,
};

/** Schema errors of one object ([] when valid), each prefixed with kind/name. */
export function schemaErrors(obj: K8sObject): string[] {
  const id = `${obj.kind}/${obj.metadata?.name}`;
  const Model = MODELS[`${obj.apiVersion}/${obj.kind}`];
  if (!Model) return [`${id}: no schema for ${obj.apiVersion} ${obj.kind} (add its model to test/deploy/manifests.ts)`];
  const errors: string[] = [];
  try {
    new Model(obj as never).validate();
  } catch (err) {
    errors.push(`${id}: ${(err as Error).message}`);
  }
  // CRDs have no client-node model: their schema check above is all they get.
  if (!obj.apiVersion.includes('.coreos.com')) {
    for (const field of unknownFields(obj, modelName(obj))) errors.push(`${id}: unknown field ${field}`);
  }
  return errors;
}

/** client-node's class name for a built-in kind: apps/v1 Deployment → V1Deployment. */
function modelName(obj: K8sObject): string {
  const version = obj.apiVersion.split('/').pop()!;
  return `${version[0]!.toUpperCase()}${version.slice(1)}${obj.kind}`;
}

type AttributeMap = { baseName: string; type: string }[];

/**
 * Paths of fields the schema does not declare, walked through client-node's generated attribute
 * maps (the same OpenAPI definitions): a typo such as `readinesProbe` is what kubectl apply
 * --validate=strict rejects, and what the JSON-schema validators above accept silently.
 */
export function unknownFields(value: unknown, type: string, path = ''): string[] {
  if (value === null || value === undefined) return [];
  const array = /^Array<(.+)>$/.exec(type);
  if (array) return Array.isArray(value) ? value.flatMap((v, i) => unknownFields(v, array[1]!, `${path}[${i}]`)) : [];
  const map = /^\{ \[key: string\]: (.+); \}$/.exec(type);
  if (map) return typeof value === 'object' ? Object.entries(value).flatMap(([k, v]) => unknownFields(v, map[1]!, `${path}.${k}`)) : [];
  const model = (k8s as unknown as Record<string, { getAttributeTypeMap?: () => AttributeMap }>)[type];
  if (!model?.getAttributeTypeMap || typeof value !== 'object') return []; // a primitive, IntOrString, any
  const attributes = new Map(model.getAttributeTypeMap().map((a) => [a.baseName, a.type]));
  return Object.entries(value as Record<string, unknown>).flatMap(([key, v]) => {
    const t = attributes.get(key);
    return t === undefined ? [`${path}.${key}`] : unknownFields(v, t, `${path}.${key}`);
  });
}

/** What `runtime <command...> --help` accepts: its long flags and the env vars it reads. */
export interface CliSurface {
  flags: Set<string>;
  env: Set<string>;
}

const surfaces = new Map<string, CliSurface>();

/** The built CLI's help for a command path (e.g. ['worker'], ['model', 'make-tiny']), cached. */
export function cliSurface(commandPath: string[]): CliSurface {
  const key = commandPath.join(' ');
  const cached = surfaces.get(key);
  if (cached) return cached;
  const help = execFileSync(process.execPath, [CLI, ...commandPath, '--help'], { encoding: 'utf8', env: { ...process.env, COLUMNS: '200' } });
  // Option lines are indented two spaces; wrapped description lines much further.
  const flags = new Set([...help.matchAll(/^ {2}(?:-[a-zA-Z], )?(--[a-z0-9-]+)/gm)].map((m) => m[1]!));
  const env = new Set([...help.matchAll(/env:\s+([A-Z0-9_]+)/g)].map((m) => m[1]!));
  const surface = { flags, env };
  surfaces.set(key, surface);
  return surface;
}

/** The command path of a container's args: the leading words before the first flag. */
export function commandPathOf(args: string[]): string[] {
  const firstFlag = args.findIndex((a) => a.startsWith('-'));
  return firstFlag === -1 ? args : args.slice(0, firstFlag);
}

/** The value after `--flag` in args, if present. */
export function flagValue(args: string[], flag: string): string | undefined {
  const i = args.indexOf(flag);
  return i === -1 ? undefined : args[i + 1];
}

/** Pod templates of the workload kinds, with the owning object. */
export function podTemplates(objects: K8sObject[]): { owner: K8sObject; labels: Record<string, string>; spec: any }[] {
  return objects
    .filter((o) => o.kind === 'Deployment' || o.kind === 'StatefulSet' || o.kind === 'Job')
    .map((o) => ({ owner: o, labels: (o.spec.template.metadata?.labels ?? {}) as Record<string, string>, spec: o.spec.template.spec }));
}

/** Whether a label selector (matchLabels + In/NotIn/Exists matchExpressions, or a plain map) matches. */
export function selects(selector: any, labels: Record<string, string>): boolean {
  const plain = selector.matchLabels === undefined && selector.matchExpressions === undefined;
  const matchLabels: Record<string, string> = plain ? selector : (selector.matchLabels ?? {});
  if (!Object.entries(matchLabels).every(([k, v]) => labels[k] === v)) return false;
  for (const e of (plain ? [] : (selector.matchExpressions ?? [])) as { key: string; operator: string; values?: string[] }[]) {
    const v = labels[e.key];
    if (e.operator === 'In' && !(v !== undefined && e.values!.includes(v))) return false;
    if (e.operator === 'NotIn' && v !== undefined && e.values!.includes(v)) return false;
    if (e.operator === 'Exists' && v === undefined) return false;
    if (e.operator === 'DoesNotExist' && v !== undefined) return false;
  }
  return true;
}
