/**
 * Worker selection behind one small interface, so the KV router plugs in beside the simple
 * modes. `select` has no side effects beyond its own cursor; the lifecycle hooks are where a
 * stateful router books (onRouted), marks prefill done (onFirstToken) and frees (onFinished).
 */
import type { InstanceId, PreprocessedRequest } from '../proto/wire.js';
import { ConfigError } from '../runtime/errors.js';

export const ROUTER_MODES = ['round-robin', 'random', 'kv', 'direct'] as const;
export type RouterMode = (typeof ROUTER_MODES)[number];

export interface RouteRequest {
  model: string;
  request: PreprocessedRequest;
  /**
   * The decode leg of a disaggregated request: the worker receives the whole prompt's KV from
   * the prefill worker, so a KV-aware selector must not credit its cached prefix.
   */
  noOverlapCredit?: boolean;
}

export interface WorkerSelector {
  readonly mode: RouterMode;
  /** Pick one of `candidates` (never empty); undefined when none is acceptable now. */
  select(route: RouteRequest, candidates: readonly InstanceId[]): InstanceId | undefined | Promise<InstanceId | undefined>;
  onRouted?(route: RouteRequest, instanceId: InstanceId): void;
  onFirstToken?(route: RouteRequest, instanceId: InstanceId): void;
  /**
   * Called once per routed attempt, whether it finished, failed or was cancelled;
   * `outputTokens`: the tokens this attempt streamed (the latency router's ITL sample).
   */
  onFinished?(route: RouteRequest, instanceId: InstanceId, outputTokens?: number): void;
}

export class RoundRobinSelector implements WorkerSelector {
  readonly mode = 'round-robin' as const;
  private cursor = 0;

  select(_route: RouteRequest, candidates: readonly InstanceId[]): InstanceId | undefined {
    const pick = candidates[this.cursor % candidates.length];
    this.cursor = (this.cursor + 1) % 0x7fffffff;
    return pick;
  }
}

export class RandomSelector implements WorkerSelector {
  readonly mode = 'random' as const;
  constructor(private readonly random: () => number = Math.random) {}

  select(_route: RouteRequest, candidates: readonly InstanceId[]): InstanceId | undefined {
    return candidates[Math.floor(this.random() * candidates.length)];
  }
}

/**
 * `direct` mode: every request must name its instance in the `x-worker-instance-id` header
 * (the pipeline enforces that); nothing is ever chosen here.
 */
export class DirectSelector implements WorkerSelector {
  readonly mode = 'direct' as const;
  select(): undefined {
    return undefined;
  }
}

export type SelectorFactory = (mode: RouterMode) => WorkerSelector;

export function createSelector(mode: RouterMode): WorkerSelector {
  switch (mode) {
    case 'round-robin':
      return new RoundRobinSelector();
    case 'random':
      return new RandomSelector();
    case 'direct':
      return new DirectSelector();
    case 'kv':
      // KV mode routes through a KV router (embedded or remote) that needs the runtime's event
      // plane and card feed, which a bare factory does not have.
      throw new ConfigError("router mode 'kv' needs the KV router: start the frontend with startFrontend({ routerMode: 'kv', runtime }) (which builds it), or pass a selector from createKvSelector(); createSelector cannot build it");
  }
}
