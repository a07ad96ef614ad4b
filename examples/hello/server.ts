/**
 * Hello world, server side: component `hello`, endpoint `generate`, streams the words of a
 * greeting one by one. Runs embedded (file discovery + direct events) or in a cluster
 * (etcd + NATS) depending on the runtime flags.
 *
 *   node dist/examples/hello/server.js [--discovery file|etcd] [--event-plane direct|nats]
 */
import { Command } from 'commander';
import { addRuntimeOptions, createRuntimeFromOptions, positiveInt, type RuntimeFlags } from '../../runtime/index.js';

export interface HelloRequest {
  name: string;
  /** Milliseconds between words. */
  delayMs?: number;
}

export interface HelloWord {
  word: string;
  index: number;
}

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    });
  });

export async function* helloHandler(request: HelloRequest, ctx: { signal: AbortSignal }): AsyncGenerator<HelloWord> {
  const words = `hello ${request.name}, this stream comes from a Tandem endpoint`.split(' ');
  for (let index = 0; index < words.length && !ctx.signal.aborted; index++) {
    yield { word: words[index]!, index };
    if (request.delayMs) await sleep(request.delayMs, ctx.signal);
  }
}

async function main(): Promise<void> {
  const program = addRuntimeOptions(new Command('hello-server'))
    .option('--beat-ms <ms>', 'publish a heartbeat event this often', positiveInt, 1000)
    .parse();
  const flags = program.opts<RuntimeFlags & { beatMs: number }>();
  const runtime = await createRuntimeFromOptions(flags, 'hello-server');
  const component = runtime.namespace(flags.namespace).component('hello');
  await component.endpoint('generate').serve(helloHandler);
  runtime.markReady();
  let beats = 0;
  const timer = setInterval(() => void component.publish('heartbeat', { beats: ++beats, at: Date.now() }), flags.beatMs);
  runtime.onShutdown(() => clearInterval(timer));
  process.stdout.write(`hello server ${runtime.instanceId} ready (${flags.discovery} discovery, ${flags.eventPlane} events)\n`);
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) {
  void main();
}
