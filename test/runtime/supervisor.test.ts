/**
 * The process supervisor with real child processes (test/runtime/fixtures/supervised-child.mjs):
 * waiting for a start-up record, a clear error when the child exits first, SIGTERM → SIGKILL
 * escalation, exit codes, restart with backoff, and where the output goes.
 */
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
  type SupervisorEvent,
} from '../../runtime/supervisor/index.js';
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

describe('MemoryLog', () => {
  it('keeps the last maxLines lines in order', () => {
    const log = new MemoryLog(3);
    for (const l of ['a', 'b', 'c', 'd', 'e']) log.write(l);
    expect(log.lines()).toEqual(['c', 'd', 'e']);
    expect(log.text()).toBe('c\nd\ne\n');
  });
});

describe('Supervisor', () => {
  it('restarts a child that crashes, with growing backoff, and not after stop()', async () => {
    const events: SupervisorEvent[] = [];
    const supervisor = new Supervisor({ onEvent: (e) => events.push(e) });
    const child = supervisor.start({
      name: 'flaky',
      args: [FIXTURE, 'ready-crash', '50'],
      restart: { initialDelayMs: 100, maxDelayMs: 400, multiplier: 2, healthyAfterMs: 60_000 },
    });
    try {
      await pollUntil('3 restarts', () => child.restarts >= 3, 20_000);
      const restarting = events.filter((e): e is Extract<SupervisorEvent, { type: 'restarting' }> => e.type === 'restarting');
      expect(restarting.slice(0, 3).map((e) => [e.attempt, e.delayMs])).toEqual([
        [1, 100],
        [2, 200],
        [3, 400],
      ]);
      const exits = events.filter((e): e is Extract<SupervisorEvent, { type: 'exited' }> => e.type === 'exited');
      expect(exits[0]).toMatchObject({ name: 'flaky', code: 7, signal: null, expected: false });
      // Each run is a new process.
      const pids = events.filter((e) => e.type === 'started').map((e) => (e as { pid: number }).pid);
      expect(new Set(pids).size).toBe(pids.length);
    } finally {
      await child.stop();
    }
    const startedBefore = events.filter((e) => e.type === 'started').length;
    await new Promise((r) => setTimeout(r, 900));
    expect(events.filter((e) => e.type === 'started').length).toBe(startedBefore);
    expect(child.supervised).toBe(false);
  });

  it('gives up after maxFastCrashes fast crashes', async () => {
    const events: SupervisorEvent[] = [];
    const supervisor = new Supervisor({ onEvent: (e) => events.push(e) });
    const child = supervisor.start({ name: 'broken', args: [FIXTURE, 'crash', '5'], restart: { initialDelayMs: 50, maxDelayMs: 50, multiplier: 2, healthyAfterMs: 60_000, maxFastCrashes: 2 } });
    await pollUntil('gave up', () => events.some((e) => e.type === 'gave_up'), 20_000);
    expect(events.filter((e) => e.type === 'started')).toHaveLength(2);
    expect(events.at(-1)).toEqual({ type: 'gave_up', name: 'broken', crashes: 2 });
    expect(child.supervised).toBe(false);
  });

  it('a child stopped on purpose is reported as expected and is not restarted', async () => {
    const events: SupervisorEvent[] = [];
    const supervisor = new Supervisor({ onEvent: (e) => events.push(e) });
    const a = supervisor.start({ name: 'a', args: [FIXTURE, 'ready'], restart: { initialDelayMs: 10, maxDelayMs: 10, multiplier: 1, healthyAfterMs: 1 } });
    const b = supervisor.start({ name: 'b', args: [FIXTURE, 'ready'] });
    await Promise.all([a, b].map((c) => c.current.waitFor(readyRecord, { timeoutMs: 20_000, what: 'child ready' })));
    await supervisor.stop(['a']);
    expect(b.current.running).toBe(true);
    await supervisor.stop();
    await new Promise((r) => setTimeout(r, 200));
    const exits = events.filter((e) => e.type === 'exited');
    expect(exits.map((e) => (e as { name: string; expected: boolean; code: number | null }).name)).toEqual(['a', 'b']);
    expect(exits.every((e) => (e as { expected: boolean }).expected && (e as { code: number | null }).code === 0)).toBe(true);
    expect(events.filter((e) => e.type === 'started')).toHaveLength(2);
  });
});
