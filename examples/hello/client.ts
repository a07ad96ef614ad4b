/**
 * Hello world, client side: waits for a `hello/generate` instance, streams a greeting, and
 * prints one heartbeat event from the server's event stream.
 *
 *   node dist/examples/hello/client.js [--name you] [same runtime flags as the server]
 */
import { Command } from 'commander';
import { addRuntimeOptions, createRuntimeFromOptions, type RuntimeFlags } from '../../runtime/index.js';
import type { HelloRequest, HelloWord } from './server.js';

async function main(): Promise<void> {
  const program = addRuntimeOptions(new Command('hello-client')).option('--name <name>', 'who to greet', 'world').parse();
  const flags = program.opts<RuntimeFlags & { name: string }>();
  const runtime = await createRuntimeFromOptions({ ...flags }, 'hello-client');
  const component = runtime.namespace(flags.namespace).component('hello');
  const client = await component.endpoint('generate').client();
  await client.waitForInstances(1, 30_000);
  const heartbeat = new Promise<unknown>((resolve) => {
    void component.subscribe('heartbeat', (event) => resolve(event.payload));
  });
  const words: string[] = [];
  for await (const item of client.generate<HelloRequest, HelloWord>({ name: flags.name, delayMs: 20 })) {
    words.push(item.word);
    process.stdout.write(`${item.word} `);
  }
  process.stdout.write('\n');
  const beat = await Promise.race([heartbeat, new Promise((r) => setTimeout(() => r('no heartbeat within 5 s'), 5000))]);
  process.stdout.write(`event: ${JSON.stringify(beat)}\n`);
  client.close();
  await runtime.shutdown('done');
  process.exit(words.length > 0 ? 0 : 1);
}

void main();
