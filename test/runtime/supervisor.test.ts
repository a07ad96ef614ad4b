/**
 * The process supervisor. One run of a child with real processes (test/runtime/fixtures/
 * supervised-child.mjs): waiting for a start-up record, a clear error when the child exits
 * first, SIGTERM → SIGKILL escalation, exit codes, where the output goes. Restarts with backoff
 * through the spawn seam, with a fake child and a fake clock.
 */
import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ChildExitedError,
  ChildStartTimeoutError,
  MemoryLog,
  SupervisedProcess,
  Supervisor,
  recordWithMsg,
  watchParentLink,
  type RestartPolicy,
  type SupervisorEvent,
} from '../../runtime/supervisor/index.js';
import { FakeClock } from '../fixtures/fake-clock.js';
import { FakeChild, FakeChildren, settle } from './fixtures/fake-child.js';
import { pollUntil } from '../harness/http.js';
import { isAlive } from '../harness/processes.js';

const FIXTURE = fileURLToPath(new URL('./fixtures/supervised-child.mjs', import.meta.url));
const readyRecord = recordWithMsg('child ready');

describe('SupervisedProcess', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tandem-supervisor-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('waits for the ready record, then stop() drains with SIGTERM and reports exit code 0', async () => {
    const child = new SupervisedProcess({ name: 'good', args: [FIXTURE, 'ready'] });
    const record = await child.waitFor(readyRecord, { timeoutMs: 20_000, what: 'child ready' });
    expect(record.pid).toBe(child.pid);
    expect(child.running).toBe(true);
    // A line already printed still counts for a later wait.
    expect(await child.waitForLine(/^starting$/, 1000)).toBe('starting');
    expect(await child.stop(5000)).toEqual({ code: 0, signal: null });
    expect(child.running).toBe(false);
    expect(child.output()).toContain('draining\n');
  });

  it('a child that exits before its ready record fails the wait with its name, exit code and last output', async () => {
    const child = new SupervisedProcess({ name: 'agg-7', args: [FIXTURE, 'crash', '3'] });
    const err = await child.waitFor(readyRecord, { timeoutMs: 20_000, what: 'child ready' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ChildExitedError);
    expect((err as ChildExitedError).code).toBe('unavailable');
    expect((err as ChildExitedError).exitCode).toBe(3);
    expect((err as Error).message).toMatch(/^agg-7 exited \(code 3, signal null\) before 'child ready'; its last output:\ncannot start: bad config/);
    expect(await child.exited()).toEqual({ code: 3, signal: null });
    // Waiting after the exit fails the same way, at once.
    await expect(child.waitForLine(/never/, 10_000)).rejects.toBeInstanceOf(ChildExitedError);
  });

  it('a child that never prints the record fails the wait after the timeout, naming its log file', async () => {
    const logFile = join(dir, 'quiet.log');
    const child = new SupervisedProcess({ name: 'quiet', args: [FIXTURE, 'stubborn'], log: { file: logFile } });
    try {
      const err = await child.waitForLine(/never printed/, 300).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ChildStartTimeoutError);
      expect((err as Error).message).toBe(`quiet: no '/never printed/' within 300 ms; see its log ${logFile}`);
      expect(child.running).toBe(true);
    } finally {
      child.killNow();
      await child.exited();
    }
  });

  it('stop() escalates to SIGKILL after the grace period when the child ignores SIGTERM', async () => {
    const child = new SupervisedProcess({ name: 'stubborn', args: [FIXTURE, 'stubborn'] });
    await child.waitFor(readyRecord, { timeoutMs: 20_000, what: 'child ready' });
    const started = Date.now();
    const exit = await child.stop(700);
    expect(exit).toEqual({ code: null, signal: 'SIGKILL' });
    expect(Date.now() - started).toBeGreaterThanOrEqual(650);
    expect(child.output()).toContain('ignoring SIGTERM');
    expect(isAlive(child.pid!)).toBe(false);
  });

  it('routes output to a file, to memory (bounded) and to an onLine hook', async () => {
    const logFile = join(dir, 'routed.log');
    const seen: string[] = [];
    const child = new SupervisedProcess({ name: 'routed', args: [FIXTURE, 'ready'], log: { file: logFile, memoryLines: 2, onLine: (l) => seen.push(l) } });
    await child.waitFor(readyRecord, { timeoutMs: 20_000, what: 'child ready' });
    await child.stop();
    const file = await readFile(logFile, 'utf8');
    expect(file).toContain('starting\n');
    expect(file).toContain('"msg":"child ready"');
    expect(file).toContain('draining\n');
    expect(seen).toHaveLength(3);
    // Memory keeps only the last 2 lines.
    expect(child.output().trimEnd().split('\n')).toEqual(seen.slice(-2));
  });
});

describe('a crashing parent', () => {
  it('takes its children down with it (synchronous SIGKILL on exit)', async () => {
    const parent = new SupervisedProcess({ name: 'parent', args: ['--import', 'tsx', fileURLToPath(new URL('./fixtures/supervised-parent.ts', import.meta.url))] });
    const line = await parent.waitForLine(/"childPid"/, 30_000);
    const childPid = (JSON.parse(line) as { childPid: number }).childPid;
    const exit = await parent.exited();
    expect(exit.code).not.toBe(0);
    expect(parent.output()).toContain('parent crashed on purpose');
    // The child ignores SIGTERM; only the parent's exit hook (SIGKILL) ends it.
    await pollUntil('child gone', () => !isAlive(childPid), 5000);
  });
});

/** A pid no process has: a short-lived child's, after it was reaped. */
function deadPid(): number {
  const pid = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' }).stdout;
  return Number(pid);
}

describe('a parent killed with SIGKILL', () => {
  it('its child reads end-of-file on the parent link and stops as on SIGTERM (drains), within 2 s', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tandem-parent-link-'));
    const marker = join(dir, 'marker');
    let childPid: number | undefined;
    const parent = new SupervisedProcess({ name: 'parent', args: ['--import', 'tsx', fileURLToPath(new URL('./fixtures/supervised-parent.ts', import.meta.url)), 'hold', marker] });
    try {
      const line = await parent.waitForLine(/"childPid"/, 30_000);
      const ready = JSON.parse(line) as { childPid: number; linked: boolean };
      childPid = ready.childPid;
      expect(ready.linked).toBe(true);
      expect(isAlive(childPid)).toBe(true);
      parent.kill('SIGKILL'); // no exit hook runs: only the kernel closing the link can tell the child
      await parent.exited();
      await pollUntil('child gone', () => !isAlive(childPid), 2_000);
      expect(await readFile(marker, 'utf8')).toBe('drained\n');
    } finally {
      // Without a working link nothing else would end them.
      parent.killNow();
      if (isAlive(childPid)) process.kill(childPid!, 'SIGKILL');
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('a process the supervisor did not start has no link to watch', () => {
    expect(watchParentLink(() => undefined, {})).toBe(false);
    expect(watchParentLink(() => undefined, { TANDEM_PARENT_LINK: 'x' })).toBe(false);
    // Inherited from an ancestor that still runs (this test process): fd 3 here is not the link.
    const env: NodeJS.ProcessEnv = { TANDEM_PARENT_LINK: `3:${process.pid}` };
    let gone = false;
    expect(watchParentLink(() => (gone = true), env, process.ppid)).toBe(false);
    expect(gone).toBe(false);
    expect(env.TANDEM_PARENT_LINK).toBeUndefined(); // and not passed further down
  });

  it('a child whose supervisor died before it started watching stops at once', () => {
    // The supervisor's pid is gone and this process was reparented: nothing to wait for.
    let gone = false;
    expect(watchParentLink(() => (gone = true), { TANDEM_PARENT_LINK: `3:${deadPid()}` }, 1)).toBe(true);
    expect(gone).toBe(true);
  });
});

describe('MemoryLog', () => {
  it('keeps the last maxLines lines in order', () => {
    const log = new MemoryLog(3);
    for (const l of ['a', 'b', 'c', 'd', 'e']) log.write(l);
    expect(log.lines()).toEqual(['c', 'd', 'e']);
    expect(log.text()).toBe('c\nd\ne\n');
  });
});

/**
 * Restarts through the spawn seam: a fake child the test crashes at will and a fake clock the
 * test moves, so each backoff is checked to the millisecond without sleeping.
 */
describe('Supervisor', () => {
  const FAST: RestartPolicy = { initialDelayMs: 100, maxDelayMs: 400, multiplier: 2, healthyAfterMs: 60_000 };

  function fakeSupervisor(onSigterm: 'drain' | 'ignore' = 'drain') {
    const events: SupervisorEvent[] = [];
    const clock = new FakeClock();
    const children = new FakeChildren(onSigterm);
    const supervisor = new Supervisor<FakeChild>({ onEvent: (e) => events.push(e), spawn: children.spawn, clock });
    const ofType = <T extends SupervisorEvent['type']>(type: T) => events.filter((e): e is Extract<SupervisorEvent, { type: T }> => e.type === type);
    return { events, clock, children, supervisor, ofType };
  }

  it('restarts a crashing child after 100, 200, 400, 400 ms (×2, capped at 400), each run a new one', async () => {
    const { clock, children, supervisor, ofType } = fakeSupervisor();
    const child = supervisor.start({ name: 'flaky', args: [], restart: FAST });
    for (const delay of [100, 200, 400, 400]) {
      clock.advance(50);
      children.runs.at(-1)!.exit(7);
      await settle();
      expect(ofType('restarting').at(-1)).toMatchObject({ name: 'flaky', delayMs: delay });
      // Not one millisecond early.
      const runs = children.runs.length;
      clock.advance(delay - 1);
      expect(children.runs).toHaveLength(runs);
      clock.advance(1);
      expect(children.runs).toHaveLength(runs + 1);
      expect(child.current).toBe(children.runs.at(-1));
    }
    expect(ofType('restarting').map((e) => e.attempt)).toEqual([1, 2, 3, 4]);
    expect(ofType('exited')[0]).toEqual({ type: 'exited', name: 'flaky', pid: children.runs[0]!.pid, code: 7, signal: null, expected: false, ranMs: 50 });
    expect(ofType('started').map((e) => e.restarts)).toEqual([0, 1, 2, 3, 4]);
    expect(new Set(ofType('started').map((e) => e.pid)).size).toBe(5);
    expect(child.restarts).toBe(4);
  });

  it('a run that lasts healthyAfterMs ends the streak: its crash restarts after the initial delay again', async () => {
    const { clock, children, supervisor, ofType } = fakeSupervisor();
    supervisor.start({ name: 'agg-0', args: [], restart: FAST });
    const crashAfter = async (ranMs: number) => {
      clock.advance(ranMs);
      children.runs.at(-1)!.exit(1);
      await settle();
      const delay = ofType('restarting').at(-1)!.delayMs;
      clock.advance(delay);
      return delay;
    };
    expect(await crashAfter(1_000)).toBe(100);
    expect(await crashAfter(1_000)).toBe(200);
    expect(await crashAfter(60_000)).toBe(100); // healthy: the streak starts again
    expect(await crashAfter(1_000)).toBe(200);
  });

  it('a stop() during the backoff cancels the pending restart', async () => {
    const { clock, children, supervisor } = fakeSupervisor();
    const child = supervisor.start({ name: 'flaky', args: [], restart: FAST });
    children.runs[0]!.exit(7);
    await settle();
    expect(clock.pending()).toEqual([100]);
    await child.stop();
    expect(clock.pending()).toEqual([]);
    clock.advance(60_000);
    expect(children.runs).toHaveLength(1);
    expect(child.supervised).toBe(false);
  });

  it('gives up after maxFastCrashes fast crashes in a row', async () => {
    const { clock, children, supervisor, events } = fakeSupervisor();
    const child = supervisor.start({ name: 'broken', args: [], restart: { ...FAST, maxFastCrashes: 2 } });
    children.runs[0]!.exit(5);
    await settle();
    clock.advance(100);
    children.runs[1]!.exit(5);
    await settle();
    expect(children.runs).toHaveLength(2);
    expect(events.at(-1)).toEqual({ type: 'gave_up', name: 'broken', crashes: 2 });
    expect(clock.pending()).toEqual([]);
    expect(child.supervised).toBe(false);
  });

  it('a child stopped on purpose is reported as expected and is not restarted; its siblings run on', async () => {
    const { clock, children, supervisor, ofType } = fakeSupervisor();
    const a = supervisor.start({ name: 'a', args: [], restart: { initialDelayMs: 10, maxDelayMs: 10, multiplier: 1, healthyAfterMs: 1 } });
    const b = supervisor.start({ name: 'b', args: [] });
    clock.advance(5_000);
    await supervisor.stop(['a']);
    expect(b.current.running).toBe(true);
    await supervisor.stop();
    await settle();
    clock.advance(60_000);
    expect(ofType('exited')).toEqual([
      { type: 'exited', name: 'a', pid: a.current.pid, code: 0, signal: null, expected: true, ranMs: 5_000 },
      { type: 'exited', name: 'b', pid: b.current.pid, code: 0, signal: null, expected: true, ranMs: 5_000 },
    ]);
    expect(children.runs.map((r) => r.signals)).toEqual([['SIGTERM'], ['SIGTERM']]);
    expect(ofType('started')).toHaveLength(2);
  });

  it('killNow() SIGKILLs a child that ignores SIGTERM, and nothing restarts it', async () => {
    const { clock, children, supervisor } = fakeSupervisor('ignore');
    const child = supervisor.start({ name: 'stubborn', args: [], restart: FAST });
    const stopping = child.stop();
    await settle();
    expect(child.current.running).toBe(true);
    supervisor.killNow();
    expect(await stopping).toEqual({ code: null, signal: 'SIGKILL' });
    clock.advance(60_000);
    expect(children.runs).toHaveLength(1);
    expect(children.runs[0]!.signals).toEqual(['SIGTERM', 'SIGKILL']);
  });
});
