/**
 * scripts/device/run-all.sh, the one call a session lent a GPU makes (issues 33, 35, 36, 37):
 * its items and plans, run whole on stand-in steps. A dry run (TANDEM_CHECK_DEVICE=simt, budgets
 * unscaled) in a temporary tree holding the real run-all.sh and lib.sh beside small
 * `<name>-check.sh` files that record which of their parts ran.
 *
 * - Items run in the order given, each with only the parts it names, under its own budget.
 * - A failing part, a part past its item's budget and an item the deadline leaves no time for
 *   are each reported as such, and the run exits 1.
 * - run-all.json and results.tar.gz are rewritten after every item: a run killed mid-way (the
 *   device tool's timeout) still brings back what it finished.
 * - A misspelt step, part, budget or plan is refused before anything runs (a misspelt part
 *   would otherwise run nothing and pass).
 * - The real plans name real steps and parts, put every issue's checks before any benchmark,
 *   and `all` runs a step no plan names unless it is marked default=no.
 */
import { spawn, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { pollUntil } from '../harness/http.js';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const deviceDir = join(repo, 'scripts/device');
const temps: string[] = [];
afterAll(() => {
  for (const d of temps) rmSync(d, { recursive: true, force: true });
});

/** A stand-in step: parts `ok` (writes ok.json), `bad` (exits 1) and `slow` (sleeps 30 s); each appends `<step>:<part>` to ran.txt. */
function fakeStep(name: string, line2: string): string {
  return `#!/usr/bin/env bash
${line2}
set -uo pipefail
. "$(dirname "$0")/lib.sh"
check_begin ${name}-check ok,bad,slow
ok() { echo "${name}:ok" >>"$repo/ran.txt"; echo '{"ok": true}' >"$OUT/ok.json"; }
bad() { echo "${name}:bad" >>"$repo/ran.txt"; return 1; }
slow() { echo "${name}:slow" >>"$repo/ran.txt"; sleep 30; }
export -f ok bad slow
step ok 20 ok
step bad 20 bad
step slow 60 slow
check_end
`;
}

/** A tree with the real run-all.sh and lib.sh, and stand-in steps a (order 10), b (20), c (30, default=no). */
function tree(extra: Record<string, string> = {}): string {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-run-all-'));
  temps.push(dir);
  const scripts = join(dir, 'scripts/device');
  mkdirSync(scripts, { recursive: true });
  for (const f of ['run-all.sh', 'lib.sh']) copyFileSync(join(deviceDir, f), join(scripts, f));
  writeFileSync(join(scripts, 'a-check.sh'), fakeStep('a', '# run-all: order=10 budget=40'));
  writeFileSync(join(scripts, 'b-check.sh'), fakeStep('b', '# run-all: order=20 budget=40'));
  writeFileSync(join(scripts, 'c-check.sh'), fakeStep('c', '# run-all: order=30 budget=40 default=no'));
  for (const [f, text] of Object.entries(extra)) writeFileSync(join(scripts, f), text);
  return dir;
}

function env(dir: string, vars: Record<string, string>): NodeJS.ProcessEnv {
  return { ...process.env, TANDEM_CHECK_DEVICE: 'simt', TANDEM_CHECK_SIMT_SCALE: '1', OUT: join(dir, 'out'), TANDEM_CHECK_WORK: join(dir, 'work'), ...vars };
}

function runAll(dir: string, vars: Record<string, string>) {
  const r = spawnSync('bash', ['scripts/device/run-all.sh'], { cwd: dir, env: env(dir, vars), encoding: 'utf8', timeout: 90_000 });
  return { status: r.status, output: r.stdout + r.stderr };
}

interface Report {
  complete: boolean;
  passed: boolean;
  items: string[];
  steps: Array<{ name: string; item: string; status: string; detail: string; budget: number; steps: Record<string, { status: string }> | null }>;
}
const report = (dir: string): Report => JSON.parse(readFileSync(join(dir, 'out/run-all.json'), 'utf8')) as Report;
const ran = (dir: string) => (existsSync(join(dir, 'ran.txt')) ? readFileSync(join(dir, 'ran.txt'), 'utf8').trim().split('\n') : []);

/** The files in results.tar.gz. */
function packed(dir: string): string[] {
  const r = spawnSync('tar', ['-tzf', join(dir, 'out/results.tar.gz')], { encoding: 'utf8' });
  return r.stdout.split('\n').filter(Boolean).map((p) => p.replace(/^\.\//, ''));
}

describe('scripts/device/run-all.sh (stand-in steps, dry run)', () => {
  it('runs the items in the order given, each with only its parts and its own budget', () => {
    const dir = tree();
    const r = runAll(dir, { TANDEM_RUN_STEPS: 'b:ok,a:ok@25' });
    expect(r.status, r.output).toBe(0);
    expect(ran(dir)).toEqual(['b:ok', 'a:ok']);
    const rep = report(dir);
    expect(rep.complete).toBe(true);
    expect(rep.passed).toBe(true);
    expect(rep.steps.map((s) => [s.item, s.status, s.budget])).toEqual([
      ['b:ok', 'pass', 40],
      ['a:ok@25', 'pass', 25],
    ]);
    expect(Object.keys(rep.steps[1].steps ?? {})).toEqual(['gpu', 'ok']);
    expect(packed(dir)).toEqual(expect.arrayContaining(['a/ok.json', 'a/summary-ok.json', 'b/ok.json', 'b/summary-ok.json']));
  });

  it('reports a failing part, a part past its budget and an item the deadline skips, and exits 1', () => {
    const dir = tree();
    const r = runAll(dir, { TANDEM_RUN_STEPS: 'a:ok+bad,b:slow@3,c:ok', TANDEM_RUN_DEADLINE: '45' });
    expect(r.status, r.output).toBe(1);
    const rep = report(dir);
    expect(rep.passed).toBe(false);
    const [a, b] = rep.steps;
    expect(a.status).toBe('fail');
    expect(a.steps?.ok.status).toBe('pass');
    expect(a.steps?.bad.status).toBe('fail');
    expect([b.status, b.detail]).toEqual(['fail', 'timed out after 3 s']);
    expect(rep.steps.map((s) => [s.item, s.status])[2]).toEqual(['c:ok', 'pass']); // a step marked default=no runs when named
    // 14 s: after b's 5 s, a's 40 s budget would be cut below 15 s: skipped, and said so.
    const lateDir = tree();
    const late = runAll(lateDir, { TANDEM_RUN_STEPS: 'b:ok+slow@5,a:ok@40', TANDEM_RUN_DEADLINE: '14' });
    expect(late.status, late.output).toBe(1);
    expect(late.output).toMatch(/=== a:ok@40: skipped, \d+ s left before the deadline \(budget 40 s\)/);
    expect(report(lateDir).steps.map((s) => [s.item, s.status, s.detail])).toEqual([
      ['b:ok+slow@5', 'fail', 'timed out after 5 s'],
      ['a:ok@40', 'skip', expect.stringMatching(/^no time left/)],
    ]);
    expect(ran(lateDir)).toEqual(['b:ok', 'b:slow']);
  }, 60_000);

  it('rewrites run-all.json and results.tar.gz after every item, so a run killed mid-way brings back what it finished', async () => {
    const dir = tree();
    const child = spawn('bash', ['scripts/device/run-all.sh'], { cwd: dir, env: env(dir, { TANDEM_RUN_STEPS: 'a:ok,b:slow' }), detached: true, stdio: 'ignore' });
    try {
      await pollUntil('the first item reported', () => existsSync(join(dir, 'out/run-all.json')) && report(dir).steps.length === 1, 30_000, 100);
      await pollUntil('the second item started', () => ran(dir).includes('b:slow'), 30_000, 100);
    } finally {
      process.kill(-child.pid!, 'SIGKILL');
    }
    const rep = report(dir);
    expect(rep.complete).toBe(false);
    expect(rep.items).toEqual(['a:ok', 'b:slow']);
    expect(rep.steps.map((s) => [s.item, s.status])).toEqual([['a:ok', 'pass']]);
    expect(packed(dir)).toContain('a/ok.json');
  });

  it('refuses a misspelt step, part, budget or plan before anything runs', () => {
    const dir = tree();
    const refusals: Array<[Record<string, string>, string]> = [
      [{ TANDEM_RUN_STEPS: 'a:ok,b:okk' }, "run-all: step 'b' has no part 'okk' (its parts: ok,bad,slow)"],
      [{ TANDEM_RUN_STEPS: 'a:ok,zz' }, "run-all: no step 'zz'"],
      [{ TANDEM_RUN_STEPS: 'a:ok@1m' }, "run-all: 'a:ok@1m': the budget after @ is whole seconds"],
      [{ TANDEM_RUN_PLAN: 'everything' }, "run-all: no plan 'everything'"],
    ];
    for (const [vars, message] of refusals) {
      const r = runAll(dir, vars);
      expect(r.status).toBe(2);
      expect(r.output).toContain(message);
    }
    expect(ran(dir)).toEqual([]);
  });
});

describe("scripts/device/run-all.sh's plans", () => {
  const list = (dir: string, vars: Record<string, string>) => {
    const r = spawnSync('bash', [join(dir, 'run-all.sh')], { cwd: repo, env: { ...process.env, TANDEM_RUN_LIST: '1', ...vars }, encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    return r.stdout.trim().split('\n');
  };
  const steps = readdirSync(deviceDir).filter((f) => f.endsWith('-check.sh')).map((f) => f.replace(/-check\.sh$/, ''));
  /** "moe:goldens+serve@150" -> moe, [goldens, serve]. */
  const parse = (item: string) => {
    const [name, parts] = item.split('@')[0].split(':');
    return { name, parts: parts ? parts.split('+') : [] };
  };
  const partsOf = (name: string) => readFileSync(join(deviceDir, `${name}-check.sh`), 'utf8').match(/^check_begin \S+ (\S+)/m)![1].split(',');

  it('name real steps and parts; every issue has checks, and the checks come before any benchmark', () => {
    const checks = list(deviceDir, { TANDEM_RUN_PLAN: 'checks' });
    const benches = list(deviceDir, { TANDEM_RUN_PLAN: 'benches' });
    const all = list(deviceDir, {});
    expect(all.slice(0, checks.length + benches.length)).toEqual([...checks, ...benches]);
    for (const item of all) {
      const { name, parts } = parse(item);
      expect(steps).toContain(name);
      for (const p of parts) expect(partsOf(name)).toContain(p);
    }
    const names = checks.map((i) => parse(i).name);
    // 33: cuda, kv-transfer, vendor goldens, sanitizer, kv-fault; 35: fp8; 36: moe; 37: spec.
    expect(names).toEqual(expect.arrayContaining(['cuda', 'vendor-goldens', 'kv-transfer', 'sanitizer', 'kv-fault', 'fp8', 'moe', 'spec']));
    // Each part runs once in `all` (an item without parts runs every part of its step).
    const partsRun = all.flatMap((i) => {
      const { name, parts } = parse(i);
      return (parts.length > 0 ? parts : partsOf(name)).map((p) => `${name}:${p}`);
    });
    expect(new Set(partsRun).size).toBe(partsRun.length);
  });

  it('`all` runs a step that no plan names at its end, unless it is marked default=no', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tandem-run-all-plans-'));
    temps.push(dir);
    for (const f of readdirSync(deviceDir).filter((n) => n.endsWith('.sh'))) copyFileSync(join(deviceDir, f), join(dir, f));
    writeFileSync(join(dir, 'new-check.sh'), fakeStep('new', '# run-all: order=5 budget=30'));
    writeFileSync(join(dir, 'later-check.sh'), fakeStep('later', '# run-all: order=6 budget=30 default=no'));
    const all = list(dir, {});
    expect(all.at(-1)).toBe('new');
    expect(all).not.toContain('later');
    expect(list(dir, { TANDEM_RUN_STEPS: 'later:ok' })).toEqual(['later:ok']);
  });
});
