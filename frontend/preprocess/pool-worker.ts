/**
 * Entry of a PreprocessPool thread: one job at a time, models loaded lazily per source and kept
 * for the thread's life. Token ids go back as a transferred buffer; errors as {code, name,
 * message} so the main thread rebuilds the same typed error (template errors stay 400s).
 */
import { parentPort } from 'node:worker_threads';
import type { PoolReply, PoolRequest } from './pool.js';
import { loadPromptModel, tokenizePrompt, type PromptModel, type PromptSource } from './prompt.js';

const port = parentPort;
if (!port) throw new Error('pool-worker.ts runs only as a worker thread');

const models = new Map<string, Promise<PromptModel>>();

function modelFor(source: PromptSource): Promise<PromptModel> {
  const key = `${source.tokenizerDir}\u0000${source.templateDir}`;
  let model = models.get(key);
  if (!model) {
    model = loadPromptModel(source);
    models.set(key, model);
    // A failed load is retried by the next job.
    model.catch(() => models.delete(key));
  }
  return model;
}

port.on('message', (request: PoolRequest) => {
  void handle(request);
});

async function handle(request: PoolRequest): Promise<void> {
  let reply: PoolReply;
  try {
    const result = tokenizePrompt(await modelFor(request.source), request.spec, request.maxPromptTokens);
    if (result.type === 'tokens') {
      port!.postMessage({ id: request.id, ok: true, result } satisfies PoolReply, [result.ids.buffer as ArrayBuffer]);
      return;
    }
    reply = { id: request.id, ok: true, result };
  } catch (err) {
    const e = err as { code?: unknown; name?: unknown; message?: unknown } | null;
    reply = {
      id: request.id,
      ok: false,
      error: {
        code: typeof e?.code === 'string' ? e.code : 'internal',
        name: typeof e?.name === 'string' ? e.name : 'Error',
        message: typeof e?.message === 'string' ? e.message : String(err),
      },
    };
  }
  port!.postMessage(reply);
}
