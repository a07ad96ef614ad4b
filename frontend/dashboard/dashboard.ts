/**
 * `startDashboard`: the dashboard of one frontend: its state, the event-plane sources that feed
 * it, the SSE stream and the static assets, bundled as the `DashboardRoutes` the HTTP server
 * serves under `/dashboard`. The request path feeds the same state through `GenerateContext.dashboard`.
 */
import type { Logger } from 'pino';
import type { KvRouterHub } from '../../router/adapters/index.js';
import type { DistributedRuntime, ModelCardFeed } from '../../runtime/index.js';
import { DashboardAssets } from './assets.js';
import { DashboardState, type FrontendInfo } from './dashboard-state.js';
import { DashboardEventStream, type EventStreamOptions } from './event-stream.js';
import type { DashboardRoutes } from './routes.js';
import { DashboardSources } from './sources.js';

export interface DashboardOptions {
  /** Stream tuning (tests shorten the interval and the per-client bound). */
  stream?: EventStreamOptions;
  /** Page directories to serve instead of the repository's (tests). */
  pageDirs?: string[];
}

export interface DashboardDeps {
  info: FrontendInfo;
  cards: ModelCardFeed;
  namespace: string;
  runtime?: DistributedRuntime;
  hub?: KvRouterHub;
  routerComponent?: string;
  keysOn(): boolean;
  log: Logger;
}

export interface Dashboard extends DashboardRoutes {
  close(): Promise<void>;
}

export function startDashboard(deps: DashboardDeps, options: DashboardOptions = {}): Dashboard {
  const state = new DashboardState(deps.info);
  const stream = new DashboardEventStream(state, options.stream ?? {}, (n) => {
    state.clients = n;
  });
  const sources = DashboardSources.start({
    state,
    cards: deps.cards,
    namespace: deps.namespace,
    log: deps.log,
    ...(deps.runtime ? { runtime: deps.runtime } : {}),
    ...(deps.hub ? { hub: deps.hub } : {}),
    ...(deps.routerComponent !== undefined ? { routerComponent: deps.routerComponent } : {}),
  });
  return {
    state,
    stream,
    assets: new DashboardAssets(options.pageDirs),
    keysOn: deps.keysOn,
    async close() {
      stream.close();
      await sources.close();
    },
  };
}
