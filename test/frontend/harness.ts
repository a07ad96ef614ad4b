/** Starts a frontend on a free loopback port against a FakeCluster. */
import { startFrontend, type FrontendHandle, type FrontendOptions } from '../../frontend/frontend.js';
import { ByteCodec, FakeCluster } from './fakes.js';

export interface TestFrontend {
  cluster: FakeCluster;
  frontend: FrontendHandle;
  url: string;
  close(): Promise<void>;
}

export async function startTestFrontend(options: Partial<FrontendOptions> = {}, setup?: (cluster: FakeCluster) => Promise<void>): Promise<TestFrontend> {
  const cluster = new FakeCluster();
  if (setup) await setup(cluster);
  else await cluster.addWorker();
  const codec = new ByteCodec();
  const frontend = await startFrontend({
    discovery: cluster.frontendDiscovery,
    connector: cluster,
    host: '127.0.0.1',
    httpPort: 0,
    codecLoader: async () => codec,
    ...options,
  });
  if (cluster.workers.size > 0) await waitFor(() => frontend.models.names().length > 0);
  await frontend.models.settled();
  return {
    cluster,
    frontend,
    url: frontend.url,
    async close() {
      await frontend.close();
      await cluster.close();
    },
  };
}

export async function waitFor(condition: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('waitFor: condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** POST JSON and return status, headers and the raw body text. */
export async function postRaw(url: string, body: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: Headers; text: string }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

/** Parse an SSE body into its `data:` payloads, checking the framing strictly. */
export function parseSse(text: string): string[] {
  if (!text.endsWith('\n\n')) throw new Error('SSE body must end with a blank line');
  const frames = text.slice(0, -2).split('\n\n');
  return frames.map((frame) => {
    if (!frame.startsWith('data: ') || frame.includes('\n')) throw new Error(`bad SSE frame: ${JSON.stringify(frame)}`);
    return frame.slice('data: '.length);
  });
}
