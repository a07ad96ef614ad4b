/**
 * Runs async tasks one at a time, in call order. A failed task does not stop the queue; its
 * error goes to its own caller only.
 */
export class SerialQueue {
  private chain: Promise<unknown> = Promise.resolve();

  run<R>(task: () => Promise<R>): Promise<R> {
    const run = this.chain.then(task, task);
    this.chain = run.catch(() => undefined);
    return run;
  }

  /** Resolves once every task queued so far has settled. */
  idle(): Promise<unknown> {
    return this.chain;
  }
}
