/**
 * `runtime router`: one standalone KV router replica. Workers are found through discovery and
 * followed per component on first use; frontends delegate with
 * `runtime frontend --router-mode kv --router-endpoint router`.
 */
import { Option, type Command } from 'commander';
import { intInRange } from '../../runtime/index.js';
import { addRuntimeOptions, createRuntimeFromOptions, type RuntimeFlags } from '../../runtime/index.js';
import { addKvRouterOptions, loadKvRouterConfig, type KvRouterFlags } from './kv-router-options.js';
import { ROUTE_ENDPOINT, ROUTER_COMPONENT } from '../../proto/wire.js';
import { startRouterServer } from './router-server.js';

interface RouterFlags extends RuntimeFlags, KvRouterFlags {
  component: string;
  /** Worker components to start following now instead of on the first request. */
  workerComponent: string[];
  blockSize: number;
}

export function registerRouterCommand(program: Command): Command {
  const cmd = program
    .command('router')
    .description(`standalone KV router replica: serves {ns}/${ROUTER_COMPONENT}/${ROUTE_ENDPOINT} for frontends started with --router-endpoint`)
    .addOption(new Option('--component <name>', 'component this replica serves route on').default(ROUTER_COMPONENT))
    .addOption(new Option('--worker-component <name...>', 'worker components to follow from start-up (others are followed on first request)').default([] as string[]))
    .addOption(new Option('--block-size <tokens>', 'KV block size of --worker-component workers').argParser(intInRange(1, 1024)).default(16));
  addKvRouterOptions(cmd);
  addRuntimeOptions(cmd);
  cmd.action(async (flags: RouterFlags) => {
    const runtime = await createRuntimeFromOptions(flags, 'router');
    const running = await startRouterServer(runtime, {
      namespace: flags.namespace,
      component: flags.component,
      router: await loadKvRouterConfig(flags, runtime.instanceId),
      replicaSync: flags.routerReplicaSync,
    });
    for (const c of flags.workerComponent) await running.hub.service(c, flags.blockSize);
    runtime.onShutdown(() => running.close());
    runtime.markReady();
    runtime.logger.info({ instanceId: runtime.instanceId, endpoint: running.endpoint.record }, 'router ready');
    process.stdout.write(`router ready ${runtime.instanceId}\n`);
  });
  return cmd;
}
