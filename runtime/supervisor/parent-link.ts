/**
 * How a child notices that its supervisor died, even by kill -9, when nothing else would tell
 * it (`runtime up` starts its children in their own sessions, so no terminal hang-up reaches
 * them either).
 *
 * The supervisor hands each child one end of a socket pair as file descriptor 3 and names it in
 * TANDEM_PARENT_LINK; it never writes to it. The kernel closes the supervisor's end when its
 * process ends, however it ends, and the child reads end-of-file at once. A child that runs
 * `watchParentLink` then stops as on SIGTERM: through the handler it set with `onParentGone`
 * (the runtime's drain), else by a SIGTERM to itself, so whatever signal handler it installed
 * runs (or, before it installed one, the default action ends it).
 *
 * Children that never call `watchParentLink` (etcd, nats-server) just hold an idle descriptor.
 */
import { Socket } from 'node:net';
import { dropLogOutput } from '../logging.js';

/** The child's file descriptor of the link (stdio index 3: after stdin, stdout, stderr). */
export const PARENT_LINK_FD = 3;
/**
 * Set by the supervisor in each child's environment as `<fd>:<supervisor pid>`. A process whose
 * parent is not that pid inherited the variable from further up (a grandchild started some other
 * way) and ignores it: its fd 3 is something else. The child removes it, so its own children do
 * not inherit it.
 */
export const PARENT_LINK_ENV = 'TANDEM_PARENT_LINK';

/** The environment entry the supervisor gives a child it spawns. */
export function parentLinkEnv(): NodeJS.ProcessEnv {
  return { [PARENT_LINK_ENV]: `${PARENT_LINK_FD}:${process.pid}` };
}

/**
 * Watch the link named in the environment; `onGone` runs once when the parent's end closes.
 * Returns false (and watches nothing) when this process was not started by the supervisor.
 */
export function watchParentLink(onGone: () => void = stopAsOnSigterm, env: NodeJS.ProcessEnv = process.env, parentPid: number = process.ppid): boolean {
  const raw = env[PARENT_LINK_ENV];
  delete env[PARENT_LINK_ENV];
  const [fd, pid] = (raw ?? '').split(':').map(Number);
  if (!Number.isInteger(fd) || fd! < 0 || !Number.isInteger(pid)) return false;
  if (pid !== parentPid) {
    // Inherited from an ancestor that still runs: fd 3 is not ours. Else our supervisor died
    // before this process got here (we were reparented): it is gone already.
    if (processExists(pid!)) return false;
    onGone();
    return true;
  }
  let link: Socket;
  try {
    link = new Socket({ fd: fd!, readable: true, writable: false });
  } catch {
    return false; // not an open socket or pipe: started some other way
  }
  let gone = false;
  const fire = () => {
    if (gone) return;
    gone = true;
    link.destroy();
    onGone();
  };
  link.on('end', fire);
  link.on('close', fire);
  link.on('error', fire);
  link.resume(); // the parent never writes; reading is how end-of-file arrives
  link.unref(); // the link alone never keeps this process running
  return true;
}

let stopHandler: (() => void) | undefined;

/**
 * How this process stops when its parent dies, instead of a SIGTERM to itself. The runtime sets
 * its own shutdown here: the same drain as on SIGTERM, but not counted as a second signal, so a
 * drain already under way (the supervisor was stopping us when it died) runs on to its end.
 */
export function onParentGone(handler: () => void): void {
  stopHandler = handler;
}

function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The parent is gone: nobody reads our output any more, and we stop as if told to. */
function stopAsOnSigterm(): void {
  // Writes to the dead parent's sockets fail (EPIPE, or EAGAIN forever); they must neither crash
  // the drain nor hold the exit.
  dropLogOutput();
  process.stdout.on('error', () => undefined);
  process.stderr.on('error', () => undefined);
  if (stopHandler) stopHandler();
  else process.kill(process.pid, 'SIGTERM');
}
