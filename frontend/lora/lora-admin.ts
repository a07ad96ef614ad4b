/**
 * POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's request shapes:
 * `{lora_name, lora_path}` and `{lora_name}`), applied on every worker of the base model whose
 * engine runs adapters (card.supportsLora), each through its `lora_admin` endpoint
 * (proto/lora.ts). `model` names the base model when the frontend serves more than one.
 * `lora_path` must be absolute (a relative one would be read against each worker's working
 * directory). A worker refusing the adapter (bad files, DoRA, rank) fails the call with 400 and
 * its reason, a fixed sentence that names no path (the worker logs the details); the workers
 * that did load it keep it (a retry is a no-op for them). Unload answers once every worker has
 * stopped taking new requests for the adapter; requests already running on it finish.
 * Who may call these routes: http/auth.ts (an admin key once any key is set).
 */
import { isAbsolute } from 'node:path';
import type { Logger } from 'pino';
import type { InstanceId, ModelCard } from '../../proto/wire.js';
import { LORA_ADMIN_ENDPOINT, servesLora, type LoraAdminRequest, type LoraAdminResponse } from '../../proto/wire.js';
import { ApiError, badRequest, modelNotFound, toApiError } from '../errors.js';
import type { ModelWatcher } from '../model-watcher.js';
import type { WorkerClient, WorkerConnector } from '../worker-client.js';
import { servedAdapters } from './served-adapters.js';

const CALL_TIMEOUT_MS = 120_000;
/** PATH_MAX on Linux. */
const MAX_PATH_CHARS = 4096;
const INSTANCE_WAIT_MS = 3_000;
const CARD_SETTLE_MS = 5_000;

export class LoraAdmin {
  private readonly clients = new Map<string, Promise<WorkerClient>>();

  constructor(
    private readonly models: ModelWatcher,
    private readonly connector: WorkerConnector,
    private readonly log?: Logger,
  ) {}

  async load(body: unknown): Promise<string> {
    const b = objectBody(body);
    const name = stringField(b, 'lora_name');
    const path = stringField(b, 'lora_path');
    // A relative path would resolve against each worker's working directory: not the client's to probe.
    if (!isAbsolute(path) || path.includes('\0') || path.length > MAX_PATH_CHARS) throw badRequest(`'lora_path' must be an absolute path of at most ${MAX_PATH_CHARS} characters`, 'lora_path');
    if (this.models.model(name) !== undefined) throw badRequest(`'${name}' is already a model name`, 'lora_name');
    const targets = await this.onEveryWorker(b, { op: 'load', name, path });
    await this.cardsSettle(targets, name, true);
    return `Success: LoRA adapter '${name}' added successfully.`;
  }

  async unload(body: unknown): Promise<string> {
    const b = objectBody(body);
    const name = stringField(b, 'lora_name');
    const parent = servedAdapters(this.models).find((a) => a.name === name)?.parent;
    if (parent === undefined) throw new ApiError('not_found', `The LoRA adapter '${name}' is not loaded`, 'lora_name');
    const targets = await this.onEveryWorker({ ...b, model: parent }, { op: 'unload', name }, true);
    await this.cardsSettle(targets, name, false);
    return `Success: LoRA adapter '${name}' removed successfully.`;
  }

  close(): void {
    for (const c of this.clients.values()) void c.then((client) => client.close(), () => undefined);
    this.clients.clear();
  }

  /**
   * Answers once this frontend's own view of the workers' cards shows the change (bounded), so
   * a client that loads and then lists or calls the adapter sees it.
   */
  private async cardsSettle(targets: ModelCard[], name: string, present: boolean): Promise<void> {
    const until = Date.now() + CARD_SETTLE_MS;
    for (;;) {
      const done = targets.every((t) => {
        const card = this.models.model(t.name)?.card(t.instanceId);
        return card === undefined || (card.loras ?? []).some((l) => l.name === name) === present;
      });
      if (done || Date.now() >= until) return;
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  private async onEveryWorker(b: Record<string, unknown>, req: LoraAdminRequest, onlyHolders = false): Promise<ModelCard[]> {
    const modelName = this.baseModel(b);
    const model = this.models.model(modelName)!;
    // Prefill workers too: a disaggregated adapter request prefills there.
    const cards: ModelCard[] = model.allCards?.() ?? [];
    if (cards.length === 0) {
      for (const id of model.candidates()) {
        const card = model.card(id);
        if (card !== undefined) cards.push(card);
      }
    }
    const targets = onlyHolders && req.op === 'unload' ? cards.filter((c) => (c.loras ?? []).some((l) => l.name === req.name)) : cards;
    if (targets.length === 0) throw new ApiError('no_instances', `no workers serve model '${modelName}'`);
    // Workers whose engine has no LoRA kernels are left out (and never routed adapter requests).
    const capable = req.op === 'load' ? targets.filter((c) => servesLora(c)) : targets;
    if (capable.length === 0) throw badRequest(`no worker of model '${modelName}' runs LoRA adapters (their engines have no LoRA kernels)`, 'model');
    const results = await Promise.allSettled(capable.map((card) => this.call(card, req)));
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed !== undefined) {
      const err = toApiError(failed.reason);
      this.log?.info({ lora: req.op === 'list' ? undefined : req.name, op: req.op, code: err.code, reason: err.message }, 'LoRA admin call refused by a worker');
      // A refused adapter is the caller's bad input, not a server fault. Workers answer fixed
      // sentences (workers/lora/adapter-files.ts); a path in an older worker's message is cut.
      if (err.code === 'config_invalid' || err.code === 'invalid_argument') throw badRequest(withoutPaths(err.message), req.op === 'load' ? 'lora_path' : 'lora_name');
      throw err;
    }
    return capable;
  }

  private baseModel(b: Record<string, unknown>): string {
    if (b['model'] !== undefined) {
      const m = stringField(b, 'model');
      if (this.models.model(m) === undefined) throw modelNotFound(m);
      return m;
    }
    const names = this.models.names();
    if (names.length === 1) return names[0]!;
    throw badRequest(names.length === 0 ? 'no model is served' : `several models are served (${names.join(', ')}): name the base model in 'model'`, 'model');
  }

  private async call(card: ModelCard, req: LoraAdminRequest): Promise<LoraAdminResponse> {
    const client = await this.client(card.component);
    await waitFor(client, card.instanceId);
    const signal = AbortSignal.timeout(CALL_TIMEOUT_MS);
    let last: LoraAdminResponse | undefined;
    for await (const r of client.call<LoraAdminRequest, LoraAdminResponse>(req, card.instanceId, signal)) last = r;
    if (last === undefined) throw new ApiError('internal', `worker ${card.instanceId} gave no answer`);
    return last;
  }

  private client(component: string): Promise<WorkerClient> {
    let c = this.clients.get(component);
    if (c === undefined) {
      c = this.connector.connect(component, LORA_ADMIN_ENDPOINT);
      c.catch(() => this.clients.delete(component));
      this.clients.set(component, c);
    }
    return c;
  }
}

async function waitFor(client: WorkerClient, id: InstanceId): Promise<void> {
  const until = Date.now() + INSTANCE_WAIT_MS;
  while (!client.instanceIds().includes(id) && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
}

/** Absolute paths in a message (`/x/y`, also quoted or after a colon) become `[path]`. */
function withoutPaths(message: string): string {
  return message.replace(/(^|[\s'"(=:])\/[^\s'"),]*/g, '$1[path]');
}

function objectBody(body: unknown): Record<string, unknown> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw badRequest('the body must be a JSON object');
  return body as Record<string, unknown>;
}

function stringField(b: Record<string, unknown>, key: string): string {
  const v = b[key];
  if (typeof v !== 'string' || v.length === 0) throw badRequest(`'${key}' must be a non-empty string`, key);
  return v;
}
