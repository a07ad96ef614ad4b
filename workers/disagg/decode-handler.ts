/**
 * The decode worker's `generate` (docs/disaggregation.md step 2). A request with kvTransfer
 * has tokenIds = prompt + [first] and numPriorOutputTokens 1: the engine loop admits it with
 * blocks for the prompt, the KvImportService pulls the prompt's KV into them (or gives up and
 * the prompt is computed here), and the stream continues after `first`. A request without
 * kvTransfer runs aggregated on this worker. Whatever happens, the prefill worker's blocks are
 * released once the request is over.
 */
import type { InstanceId, PreprocessedRequest, TokenDelta } from '../../proto/wire.js';
import type { RequestContext } from '../../runtime/index.js';
import type { EngineLoop } from '../engine-loop/index.js';
import type { KvImportService } from './kv-importer.js';

export interface DecodeHandlerDeps {
  loop: EngineLoop;
  importer: KvImportService;
  instanceId: InstanceId;
}

export class DecodeHandler {
  constructor(private readonly deps: DecodeHandlerDeps) {}

  async *generate(request: PreprocessedRequest, ctx: RequestContext): AsyncGenerator<TokenDelta> {
    const { loop, importer, instanceId } = this.deps;
    try {
      for await (const delta of loop.generate(request, ctx.signal)) yield { ...delta, instanceId };
    } finally {
      importer.settle(request.kvTransfer);
    }
  }
}
