/**
 * In-process fake workers that follow the disaggregation protocol (docs/disaggregation.md):
 * prefill workers pin a transfer and answer one delta {first token, kvTransfer}; kv_release
 * frees it; decode workers "pull" (the transfer must still be pinned on a live prefill worker,
 * otherwise they recompute), release, and stream the rest. Every worker role computes the same
 * deterministic tokens from the ORIGINAL prompt and the output position, so disaggregated output
 * must equal aggregated output exactly when the frontend does its arithmetic right.
 */
import { KV_RELEASE_ENDPOINT, type InstanceId, type KvReleaseRequest, type KvReleaseResponse, type ModelCard, type PreprocessedRequest, type TokenDelta, type WorkerRole } from '../../proto/wire.js';
import { modelKey } from '../../runtime/discovery/keys.js';
import { MemoryDiscovery, MemoryDiscoveryStore } from '../../runtime/discovery/memory-discovery.js';
import { CancelledError, UnavailableError } from '../../runtime/errors.js';
import type { WorkerClient, WorkerConnector } from '../../frontend/worker-client.js';
import { makeCard } from '../frontend/fakes.js';

export const MODEL = 'fake-model';

/** Output token at `position` for `prompt`: lowercase letters, so text equality is token equality. */
export function expectedToken(prompt: readonly number[], position: number): number {
  let h = 17;
  for (let i = 0; i < prompt.length; i++) h = (h * 31 + prompt[i]! * (i + 1)) % 1_000_003;
  return 97 + ((h + position * 7) % 26);
}

export function expectedText(prompt: string, n: number): string {
  const ids = Array.from(new TextEncoder().encode(prompt));
  let out = '';
  for (let i = 0; i < n; i++) out += String.fromCharCode(expectedToken(ids, i));
  return out;
}

export interface FakeOptions {
  /** Throw 'unavailable' after this many streamed tokens (decode/agg) — a kill -9 mid-stream. */
  dieAfterTokens?: number;
  /** Delay per step (ms). */
  stepMs?: number;
  /** Prefill: delay before answering (ms). */
  prefillMs?: number;
}

export class FakeDisaggWorker {
  readonly calls: PreprocessedRequest[] = [];
  readonly pinned = new Map<string, number>();
  readonly releases: string[] = [];
  /** Decode: transfers pulled, and prompts recomputed because the pull failed. */
  pulled = 0;
  recomputed = 0;
  dead = false;
  inflight = 0;
  private nextTransfer = 0;

  constructor(
    readonly instanceId: InstanceId,
    readonly role: WorkerRole,
    readonly cluster: FakeDisaggCluster,
    public options: FakeOptions,
  ) {}

  async *generate(request: PreprocessedRequest, signal: AbortSignal): AsyncGenerator<TokenDelta> {
    if (this.dead) throw new UnavailableError(`worker ${this.instanceId} is dead`);
    this.calls.push(request);
    this.inflight++;
    try {
      if (request.prefillOnly) {
        yield await this.prefill(request);
        return;
      }
      if (request.kvTransfer) {
        const kv = request.kvTransfer;
        const source = this.cluster.worker(kv.prefillInstanceId);
        if (source && !source.dead && source.pinned.has(kv.transferId)) this.pulled++;
        else this.recomputed++;
        // The decode worker always tells the prefill worker, pull or no pull.
        source?.release(kv.transferId);
      }
      const prior = request.numPriorOutputTokens ?? 0;
      const original = request.tokenIds.slice(0, request.tokenIds.length - prior);
      let emitted = 0;
      for (;;) {
        await sleep(this.options.stepMs ?? 0);
        if (signal.aborted) throw new CancelledError();
        if (this.dead || (this.options.dieAfterTokens !== undefined && emitted >= this.options.dieAfterTokens)) {
          this.dead = true;
          throw new UnavailableError(`worker ${this.instanceId} died`);
        }
        const token = expectedToken(original, prior + emitted);
        emitted++;
        const delta: TokenDelta = { tokenIds: [token], instanceId: this.instanceId };
        if (emitted >= request.stop.maxTokens) {
          delta.finishReason = 'length';
          delta.usage = { promptTokens: request.tokenIds.length, completionTokens: emitted, cachedTokens: 0 };
        }
        yield delta;
        if (delta.finishReason) return;
      }
    } finally {
      this.inflight--;
    }
  }

  release(transferId: string): void {
    if (this.dead) return;
    this.releases.push(transferId);
    this.pinned.delete(transferId);
  }

  private async prefill(request: PreprocessedRequest): Promise<TokenDelta> {
    await sleep(this.options.prefillMs ?? 0);
    if (this.dead) throw new UnavailableError(`prefill worker ${this.instanceId} died`);
    const prior = request.numPriorOutputTokens ?? 0;
    const first = expectedToken(request.tokenIds.slice(0, request.tokenIds.length - prior), prior);
    const usage = { promptTokens: request.tokenIds.length, completionTokens: 1, cachedTokens: 32 };
    if (request.stop.maxTokens <= 1) return { tokenIds: [first], finishReason: 'length', usage, instanceId: this.instanceId };
    const transferId = `${this.instanceId}-${this.nextTransfer++}`;
    this.pinned.set(transferId, request.tokenIds.length);
    return {
      tokenIds: [first],
      finishReason: 'length',
      usage,
      instanceId: this.instanceId,
      kvTransfer: {
        prefillInstanceId: this.instanceId,
        blockIds: [0],
        numTokens: request.tokenIds.length,
        ucxWorkerAddress: '00',
        remoteKey: '00',
        poolBaseAddress: '0',
        blockBytes: 16,
        layout: 'fake',
        transferId,
      },
    };
  }
}

const COMPONENT: Record<WorkerRole, string> = { agg: 'backend', prefill: 'prefill', decode: 'decode' };

export class FakeDisaggCluster implements WorkerConnector {
  readonly store = new MemoryDiscoveryStore();
  readonly frontendDiscovery = new MemoryDiscovery({ store: this.store });
  private readonly workers = new Map<InstanceId, { worker: FakeDisaggWorker; discovery: MemoryDiscovery }>();

  async add(role: WorkerRole, options: FakeOptions = {}, card: Partial<ModelCard> = {}): Promise<FakeDisaggWorker> {
    const discovery = new MemoryDiscovery({ store: this.store });
    const worker = new FakeDisaggWorker(discovery.instanceId, role, this, options);
    this.workers.set(worker.instanceId, { worker, discovery });
    const full = makeCard({ name: MODEL, role, component: COMPONENT[role], instanceId: worker.instanceId, contextLength: 8192, ...card });
    await discovery.put(modelKey('tandem', MODEL, worker.instanceId), full);
    return worker;
  }

  worker(id: InstanceId): FakeDisaggWorker | undefined {
    return this.workers.get(id)?.worker;
  }

  all(role?: WorkerRole): FakeDisaggWorker[] {
    return [...this.workers.values()].map((w) => w.worker).filter((w) => role === undefined || w.role === role);
  }

  /** The card goes away (lease expiry); the process may linger. */
  async removeCard(id: InstanceId): Promise<void> {
    await this.workers.get(id)?.discovery.close();
  }

  /** Total pinned transfers over every prefill worker: must return to 0 after every test. */
  pinnedTotal(): number {
    return this.all('prefill').reduce((n, w) => n + (w.dead ? 0 : w.pinned.size), 0);
  }

  async connect(component: string, endpoint: string): Promise<WorkerClient> {
    const ids = () => [...this.workers.values()].filter((w) => COMPONENT[w.worker.role] === component).map((w) => w.worker.instanceId);
    const cluster = this;
    return {
      instanceIds: ids,
      generate(request, instanceId, signal) {
        const worker = cluster.worker(instanceId);
        if (!worker || COMPONENT[worker.role] !== component || endpoint !== 'generate') throw new UnavailableError(`no ${component}/${endpoint} worker ${instanceId}`);
        return worker.generate(request, signal);
      },
      call<Req, Resp>(request: Req, instanceId: InstanceId): AsyncIterable<Resp> {
        const worker = cluster.worker(instanceId);
        if (!worker || COMPONENT[worker.role] !== component || endpoint !== KV_RELEASE_ENDPOINT) throw new UnavailableError(`no ${component}/${endpoint} worker ${instanceId}`);
        const { transferId } = request as KvReleaseRequest;
        return (async function* () {
          if (worker.dead) throw new UnavailableError('dead');
          const answer: KvReleaseResponse = { released: worker.pinned.has(transferId) };
          worker.release(transferId);
          yield answer as Resp;
        })();
      },
      close() {},
    };
  }

  async close(): Promise<void> {
    for (const { discovery } of this.workers.values()) await discovery.close();
    await this.frontendDiscovery.close();
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
