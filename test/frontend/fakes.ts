/**
 * Test doubles for the frontend: a byte-level codec (token id = UTF-8 byte, 256 = EOS), and
 * in-process workers that stream a scripted text, with fault injection (die after N tokens,
 * stall) and a record of every call and whether it was aborted.
 */
import type { InstanceId, ModelCard, PreprocessedRequest, TokenDelta, TokenLogprob } from '../../proto/wire.js';
import { MemoryDiscovery, MemoryDiscoveryStore } from '../../runtime/discovery/memory-discovery.js';
import { modelKey } from '../../runtime/discovery/keys.js';
import { CancelledError, UnavailableError } from '../../runtime/errors.js';
import { tokenizeSync, type ChatMessage, type ModelCodec, type PromptInput, type TextDetokenizer, type TokenizedPrompt } from '../../frontend/codec.js';
import type { WorkerClient, WorkerConnector } from '../../frontend/worker-client.js';

export const EOS = 256;
const encoder = new TextEncoder();

/** Byte-level codec: simple enough that tests can predict every token id. */
export class ByteCodec implements ModelCodec {
  readonly vocabSize = 257;

  renderChat(messages: ChatMessage[], options: { addGenerationPrompt: boolean }): string {
    return messages.map((m) => `<${m.role}>${m.content}\n`).join('') + (options.addGenerationPrompt ? '<assistant>' : '');
  }

  encode(text: string): number[] {
    return Array.from(encoder.encode(text));
  }

  tokenize(prompt: PromptInput): Promise<TokenizedPrompt> {
    return tokenizeSync(this, prompt);
  }

  tokenText(tokenId: number): string {
    if (tokenId === EOS) return '<eos>';
    return tokenId < 128 ? String.fromCharCode(tokenId) : `<0x${tokenId.toString(16)}>`;
  }

  createDetokenizer(options: { stop: readonly string[] }): TextDetokenizer {
    return new ByteDetokenizer(options.stop);
  }
}

class ByteDetokenizer implements TextDetokenizer {
  private readonly decoder = new TextDecoder('utf-8');
  private held = '';
  private stopped = false;

  constructor(private readonly stops: readonly string[]) {}

  push(tokenIds: readonly number[]): { text: string; stopped: boolean; stopString?: string } {
    if (this.stopped) return { text: '', stopped: true };
    const bytes = Uint8Array.from(tokenIds.filter((id) => id < 256));
    const text = this.held + this.decoder.decode(bytes, { stream: true });
    for (const stop of this.stops) {
      const at = text.indexOf(stop);
      if (at !== -1) {
        this.stopped = true;
        this.held = '';
        return { text: text.slice(0, at), stopped: true, stopString: stop };
      }
    }
    let hold = 0;
    for (const stop of this.stops) {
      for (let n = Math.min(stop.length - 1, text.length); n > hold; n--) {
        if (text.endsWith(stop.slice(0, n))) {
          hold = n;
          break;
        }
      }
    }
    this.held = text.slice(text.length - hold);
    return { text: text.slice(0, text.length - hold), stopped: false };
  }

  flush(): string {
    const rest = this.held + this.decoder.decode();
    this.held = '';
    return this.stopped ? '' : rest;
  }
}

export interface FakeWorkerOptions {
  /** Text the worker generates (as bytes), then EOS. */
  text?: string;
  /** Exact token ids to generate instead of `text`'s bytes, then `eos`. */
  tokens?: number[];
  eos?: number;
  /** Throw 'unavailable' after emitting this many tokens in one call (simulates kill -9). */
  dieAfterTokens?: number;
  /** Delay between tokens, ms (0 = next macrotask). */
  tokenDelayMs?: number;
  /** cachedTokens reported in usage. */
  cachedTokens?: number;
}

export interface CallRecord {
  instanceId: InstanceId;
  request: PreprocessedRequest;
  /** The call was cancelled: its signal aborted or its iterator closed before the end. */
  aborted: boolean;
  finished: boolean;
}

export class FakeWorker {
  readonly calls: CallRecord[] = [];
  constructor(
    readonly instanceId: InstanceId,
    public options: FakeWorkerOptions,
  ) {}

  async *generate(request: PreprocessedRequest, signal: AbortSignal): AsyncGenerator<TokenDelta> {
    const record: CallRecord = { instanceId: this.instanceId, request, aborted: false, finished: false };
    this.calls.push(record);
    const onAbort = () => (record.aborted = true);
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      const script = this.options.tokens ?? [...encoder.encode(this.options.text ?? 'Hello from a fake worker.')];
      const eos = this.options.eos ?? EOS;
      // A migrated request continues where the previous worker stopped.
      let position = request.numPriorOutputTokens ?? 0;
      let emitted = 0;
      for (;;) {
        await sleep(this.options.tokenDelayMs ?? 0);
        if (signal.aborted) throw new CancelledError();
        if (this.options.dieAfterTokens !== undefined && emitted >= this.options.dieAfterTokens) {
          throw new UnavailableError(`worker ${this.instanceId} died`);
        }
        const tokenId = position < script.length ? script[position]! : eos;
        position += 1;
        emitted += 1;
        const delta: TokenDelta = { tokenIds: [tokenId], instanceId: this.instanceId };
        if (request.logprobs !== undefined) delta.logprobs = [fakeLogprob(tokenId, request.logprobs)];
        const isEos = tokenId === eos && !request.stop.ignoreEos;
        if (isEos || emitted >= request.stop.maxTokens) {
          delta.finishReason = isEos ? 'stop' : 'length';
          delta.usage = { promptTokens: request.tokenIds.length, completionTokens: emitted, cachedTokens: this.options.cachedTokens ?? 0 };
        }
        if (delta.finishReason) record.finished = true;
        yield delta;
        if (delta.finishReason) return;
      }
    } finally {
      // Closing the iterator before the end is how a consumer cancels, as with a real stream.
      if (!record.finished) record.aborted = true;
      signal.removeEventListener('abort', onAbort);
    }
  }
}

function fakeLogprob(tokenId: number, top: number): TokenLogprob {
  const alternatives = [];
  for (let i = 0; i < top; i++) alternatives.push({ tokenId: (tokenId + i) % 257, logprob: -(0.1 + 0.5 * i) });
  return { tokenId, logprob: -0.25, top: alternatives };
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** A cluster of fake workers serving one model, registered in shared memory discovery. */
export class FakeCluster implements WorkerConnector {
  readonly store = new MemoryDiscoveryStore();
  readonly frontendDiscovery = new MemoryDiscovery({ store: this.store });
  readonly workers = new Map<InstanceId, { worker: FakeWorker; discovery: MemoryDiscovery }>();
  private readonly clients = new Set<FakeClient>();

  async addWorker(options: FakeWorkerOptions = {}, card: Partial<ModelCard> = {}): Promise<FakeWorker> {
    const discovery = new MemoryDiscovery({ store: this.store });
    const worker = new FakeWorker(discovery.instanceId, options);
    this.workers.set(worker.instanceId, { worker, discovery });
    const full = makeCard({ ...card, instanceId: worker.instanceId });
    await discovery.put(modelKey('tandem', full.name, worker.instanceId), full);
    return worker;
  }

  /** Drop the worker's card (as when its lease expires); the process itself stays. */
  async removeCard(id: InstanceId): Promise<void> {
    const entry = this.workers.get(id);
    if (entry) await entry.discovery.close();
  }

  /** The worker process is gone: calls to it fail 'unavailable', its card lingers until TTL. */
  kill(id: InstanceId): void {
    const entry = this.workers.get(id);
    if (entry) entry.worker.options = { ...entry.worker.options, dieAfterTokens: 0 };
  }

  allCalls(): CallRecord[] {
    return [...this.workers.values()].flatMap((w) => w.worker.calls);
  }

  async connect(): Promise<WorkerClient> {
    const client = new FakeClient(this);
    this.clients.add(client);
    return client;
  }

  async close(): Promise<void> {
    for (const { discovery } of this.workers.values()) await discovery.close();
    await this.frontendDiscovery.close();
  }
}

class FakeClient implements WorkerClient {
  constructor(private readonly cluster: FakeCluster) {}

  instanceIds(): readonly InstanceId[] {
    return [...this.cluster.workers.keys()];
  }

  generate(request: PreprocessedRequest, instanceId: InstanceId, signal: AbortSignal): AsyncIterable<TokenDelta> {
    const entry = this.cluster.workers.get(instanceId);
    if (!entry) throw new UnavailableError(`no such worker ${instanceId}`);
    return entry.worker.generate(request, signal);
  }

  call<Req, Resp>(): AsyncIterable<Resp> {
    throw new UnavailableError('fake workers serve only generate');
  }

  close(): void {}
}

export function makeCard(overrides: Partial<ModelCard> = {}): ModelCard {
  return {
    name: 'fake-model',
    modelPath: '/nonexistent',
    tokenizerSource: '/nonexistent',
    chatTemplateSource: '/nonexistent',
    contextLength: 256,
    kvBlockSize: 16,
    totalKvBlocks: 1024,
    maxNumBatchedTokens: 8192,
    role: 'agg',
    engine: 'mocker',
    component: 'backend',
    endpoint: 'generate',
    instanceId: '0000000000000001',
    eosTokenIds: [EOS],
    ...overrides,
  };
}
