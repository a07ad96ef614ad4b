/**
 * Bind a node server to a port, turning the usual operator mistakes (port taken, port not
 * allowed) into a typed error whose one-line message names the flag to change.
 */
import type { Server } from 'node:net';
import { TandemError } from './errors.js';

/** The port could not be bound. `unavailable`: the process cannot start here as configured. */
export class PortInUseError extends TandemError {
  override readonly name = 'PortInUseError';
  constructor(
    readonly port: number,
    readonly flag: string,
    options?: { cause?: unknown },
  ) {
    super('unavailable', `port ${port} is in use: choose another with ${flag}`, options);
  }
}

export class PortNotPermittedError extends TandemError {
  override readonly name = 'PortNotPermittedError';
  constructor(
    readonly port: number,
    readonly flag: string,
    options?: { cause?: unknown },
  ) {
    super('unavailable', `port ${port} needs privileges this process lacks: choose one above 1023 with ${flag}`, options);
  }
}

/** `server.listen(port, host)`; `flag` is the option that set the port (for the message). */
export function listenOn(server: Server, port: number, host: string, flag: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const onError = (err: NodeJS.ErrnoException) => {
      if (err.code === 'EADDRINUSE') reject(new PortInUseError(port, flag, { cause: err }));
      else if (err.code === 'EACCES') reject(new PortNotPermittedError(port, flag, { cause: err }));
      else reject(err);
    };
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      resolve();
    });
  });
}
