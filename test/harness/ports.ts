/**
 * Free loopback ports for servers that tests start. Helpers run suites in parallel on one
 * machine, so a test never hard-codes a port: it asks the kernel for one by binding port 0.
 */
import { createServer } from 'node:net';

/** A TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen({ host: '127.0.0.1', port: 0, exclusive: true }, () => {
      const address = server.address();
      if (address === null || typeof address === 'string') {
        server.close();
        reject(new Error('freePort: listen gave no TCP address'));
        return;
      }
      const { port } = address;
      server.close((err) => (err ? reject(err) : resolve(port)));
    });
  });
}

/** `count` distinct free ports (each bound in turn, so two calls cannot return the same one). */
export async function freePorts(count: number): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < count) ports.add(await freePort());
  return [...ports];
}
