/**
 * A process that cannot start says why in one line on stderr and exits with the documented code
 * (runtime/exit-codes.ts, docs/operations.md): 4 when something outside it is unavailable (a
 * port in use, etcd or NATS unreachable), 2 for a bad configuration (a model directory without
 * config.json). No stack trace. Spawns the built CLI (`npm run build` first).
 */
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { describeFailure } from '../../cli/main.js';
import { TandemError } from '../../runtime/errors.js';
import { EXIT_CODES } from '../../runtime/exit-codes.js';
import { PortInUseError } from '../../runtime/listen.js';
import { runCliToExit as run } from '../harness/processes.js';

/** A stack frame as Node prints it. */
const STACK_FRAME = /^\s+at /m;

describe('start-up failures of the runtime CLI', () => {
  let dir: string;
  let busy: Server;
  let busyPort: number;
  let local: string[];

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tandem-startup-errors-'));
    busy = createServer();
    await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
    busyPort = (busy.address() as { port: number }).port;
    // No ETCD_ENDPOINTS / NATS_SERVER from the environment: file discovery, direct events.
    local = ['--discovery', 'file', '--discovery-dir', join(dir, 'discovery'), '--event-plane', 'direct', '--host', '127.0.0.1', '--log-level', 'error'];
  });
  afterAll(async () => {
    busy?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('frontend on a port in use: one line naming the port and the flag, exit 4', async () => {
    const { code, output } = await run(['frontend', ...local, '--http-port', String(busyPort)]);
    expect(code).toBe(EXIT_CODES.unavailable);
    expect(output).toContain(`runtime: port ${busyPort} is in use: choose another with --http-port\n`);
    expect(output).not.toMatch(STACK_FRAME);
  }, 90_000);

  it('status server on a port in use names --status-port, exit 4', async () => {
    const { code, output } = await run(['frontend', ...local, '--http-port', '0', '--status-port', String(busyPort)]);
    expect(code).toBe(EXIT_CODES.unavailable);
    expect(output).toContain(`runtime: port ${busyPort} is in use: choose another with --status-port\n`);
    expect(output).not.toMatch(STACK_FRAME);
  }, 90_000);

  it('etcd unreachable: one line naming the endpoint, exit 4', async () => {
    const { code, output } = await run(['frontend', ...local, '--discovery', 'etcd', '--etcd-endpoints', 'http://127.0.0.1:1', '--http-port', '0']);
    expect(code).toBe(EXIT_CODES.unavailable);
    expect(output).toMatch(/^runtime: cannot reach etcd at http:\/\/127\.0\.0\.1:1\b.*$/m);
    expect(output).not.toMatch(STACK_FRAME);
  }, 90_000);

  it('NATS unreachable: one line naming the server, exit 4', async () => {
    const { code, output } = await run(['frontend', ...local, '--event-plane', 'nats', '--nats-server', 'nats://127.0.0.1:1', '--http-port', '0']);
    expect(code).toBe(EXIT_CODES.unavailable);
    expect(output).toMatch(/^runtime: cannot connect to NATS at nats:\/\/127\.0\.0\.1:1\b.*$/m);
    expect(output).not.toMatch(STACK_FRAME);
  }, 90_000);

  it('worker pointed at a directory without config.json: one line, exit 2', async () => {
    const modelDir = join(dir, 'not-a-model');
    await mkdir(modelDir, { recursive: true });
    const { code, output } = await run(['worker', ...local, '--engine', 'mocker', '--model', modelDir]);
    expect(code).toBe(EXIT_CODES.config);
    expect(output).toContain(`runtime: no config.json in ${modelDir}: --model must be a Hugging Face model directory\n`);
    expect(output).not.toMatch(STACK_FRAME);
  }, 90_000);
});

describe('describeFailure (what main prints and exits with)', () => {
  it('maps typed errors to their exit code in one line, and keeps the stack only for bugs', () => {
    expect(describeFailure(new PortInUseError(8000, '--http-port'))).toEqual({ line: 'port 8000 is in use: choose another with --http-port', exitCode: 4 });
    expect(describeFailure(new TandemError('config_invalid', 'bad\nvalue'))).toEqual({ line: 'bad value', exitCode: 2 });
    expect(describeFailure(new TandemError('unavailable', 'cannot reach etcd at x: 14 UNAVAILABLE: refused. Resolution note: '))).toEqual({
      line: 'cannot reach etcd at x: 14 UNAVAILABLE: refused.',
      exitCode: 4,
    });
    const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' });
    expect(describeFailure(refused)).toEqual({ line: 'connect ECONNREFUSED 127.0.0.1:1', exitCode: 4 });
    const bug = describeFailure(new TypeError('x is undefined'));
    expect(bug.exitCode).toBe(1);
    expect(bug.line).toMatch(STACK_FRAME);
  });
});
