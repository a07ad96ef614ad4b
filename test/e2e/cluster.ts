/**
 * A serving stack of real processes for end-to-end tests: one `runtime frontend` and N
 * `runtime worker --engine mocker` processes of the built CLI (test/harness/cli-stack.ts), with
 * a 2 s lease so a killed worker leaves quickly.
 */
import { CliStack, type CliWorker } from '../harness/cli-stack.js';
import { scrape } from '../harness/http.js';

export const MODEL = 'tiny';

export type E2eWorker = CliWorker;

export interface ClusterOptions {
  workers?: number;
  /** Extra flags for every worker, e.g. ['--speedup-ratio', '100']. */
  workerArgs?: string[];
  /** Extra flags for the frontend, e.g. ['--max-inflight-requests', '2000']. */
  frontendArgs?: string[];
  /**
   * Discovery lease TTL in seconds (default 2, so a killed worker leaves quickly). Load tests use
   * a longer one: on 2 busy cores a saturated process can miss a 2 s file heartbeat.
   */
  leaseTtl?: number;
}

export class E2eCluster extends CliStack {
  static async start(options: ClusterOptions = {}): Promise<E2eCluster> {
    const stackOptions = {
      tmpPrefix: 'tandem-e2e-',
      model: MODEL,
      ...(options.leaseTtl !== undefined && { leaseTtl: options.leaseTtl }),
      ...(options.workerArgs !== undefined && { workerArgs: options.workerArgs }),
    };
    const { dir, modelDir, model } = await CliStack.prepare(stackOptions);
    const cluster = new E2eCluster(dir, modelDir, model, stackOptions);
    try {
      const count = options.workers ?? 2;
      await Promise.all([cluster.startFrontend(options.frontendArgs ?? []), ...Array.from({ length: count }, () => cluster.addWorker())]);
      await cluster.waitForRoutable(count);
    } catch (err) {
      await cluster.close();
      throw err;
    }
    return cluster;
  }

  /** Start one more mocker worker and wait until it has registered. */
  addWorker(extraArgs: string[] = []): Promise<E2eWorker> {
    return this.startWorker('agg', ['--engine', 'mocker'], extraArgs);
  }

  async frontendMetrics(): Promise<string> {
    return scrape(this.url);
  }
}
