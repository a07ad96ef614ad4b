/**
 * A worker's LoRA administration: the adapters it loads at start (`--lora name=DIR`), what its
 * model card lists of them, and the `lora_admin` endpoint (proto/lora.ts) the frontend's
 * /v1/load_lora_adapter and /v1/unload_lora_adapter call on every worker of the model.
 *
 *   lora_admin {op: load, name, path}  ─▶ registry.load ─▶ card re-put ─▶ {ok, loras}
 *              {op: unload, name}      ─▶ the name goes at once, card re-put; the slot empties
 *                                         after the sequences running on it (logged, not awaited)
 *              {op: list}              ─▶ {ok, loras}
 *
 * No transport here: the worker process serves the handler and owns the card.
 */
import { isAbsolute, resolve } from 'node:path';
import type { LoraAdminRequest, LoraAdminResponse, ModelCard } from '../../proto/wire.js';
import { ConfigError, TandemError, type Logger } from '../../runtime/index.js';
import type { LoraRegistry } from './lora-registry.js';
import { LoraAdapterError } from './adapter-files.js';

/** What the model card lists of the resident adapters (the frontend routes requests naming them). */
export function cardLoras(registry: LoraRegistry): NonNullable<ModelCard['loras']> {
  return registry.list().map(({ name, loraId, path }) => ({ name, loraId, path }));
}

/**
 * Loads `--lora name=DIR` adapters in order; the first refusal ends the start-up. They are the
 * operator's own: exempt from `--lora-root`, and a refusal names the path (a ConfigError, exit 2).
 */
export async function loadStartupAdapters(registry: LoraRegistry, args: readonly string[]): Promise<void> {
  for (const arg of args) {
    const eq = arg.indexOf('=');
    await registry.load(arg.slice(0, eq), resolve(arg.slice(eq + 1)), { trusted: true }).catch((err: unknown) => {
      throw err instanceof LoraAdapterError ? new ConfigError(`--lora ${arg}: ${err.detail}`) : err;
    });
  }
}

export interface LoraAdminDeps {
  registry: LoraRegistry;
  /** Puts the model card again with the new resident set; the answer waits for it. */
  publishCard(): Promise<void>;
  log: Logger;
}

/** The `lora_admin` endpoint's handler: one request, one answer; errors as TandemError codes. */
export function loraAdminHandler(deps: LoraAdminDeps): (req: LoraAdminRequest) => AsyncGenerator<LoraAdminResponse> {
  const { registry, publishCard, log } = deps;
  return async function* (req: LoraAdminRequest): AsyncGenerator<LoraAdminResponse> {
    if (req?.op === 'load' && typeof req.name === 'string' && typeof req.path === 'string') {
      // Never against this worker's working directory (the frontend refuses relative paths too).
      if (!isAbsolute(req.path)) throw new TandemError('invalid_argument', 'lora_path must be an absolute path');
      const l = await registry.load(req.name, req.path);
      await publishCard();
      log.info({ lora: l.name, loraId: l.loraId, rank: l.rank }, 'LoRA adapter loaded');
      yield { ok: true, loras: registry.list() };
    } else if (req?.op === 'unload' && typeof req.name === 'string') {
      if (!registry.has(req.name)) throw new TandemError('not_found', `adapter '${req.name}' is not loaded`);
      // The name goes at once (new requests get not_found); the slot empties after running ones finish.
      const name = req.name;
      void registry.unload(name).then(
        () => log.info({ lora: name }, 'LoRA adapter unloaded'),
        (err: unknown) => log.warn({ err, lora: name }, 'LoRA adapter unload failed'),
      );
      await publishCard();
      yield { ok: true, loras: registry.list() };
    } else if (req?.op === 'list') {
      yield { ok: true, loras: registry.list() };
    } else {
      throw new TandemError('invalid_argument', 'lora admin: {op: load, name, path} | {op: unload, name} | {op: list}');
    }
  };
}
