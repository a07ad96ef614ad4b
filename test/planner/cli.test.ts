/**
 * `runtime planner simulate` as a process (the built CLI: run `npm run build` first): a small
 * synthetic run prints the comparison and writes JSON; bad configuration is one clear line and
 * exit code 2.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { spawnCli } from '../harness/processes.js';

async function run(args: string[]) {
  const p = spawnCli(args);
  const { code } = await p.exited();
  return { code, output: p.output() };
}

const dir = mkdtempSync(join(tmpdir(), 'planner-cli-'));

describe('runtime planner simulate', () => {
  it('replays a synthetic trace and prints planner vs static peak vs static average', async () => {
    const json = join(dir, 'sim.json');
    const decisions = join(dir, 'decisions.jsonl');
    const { code, output } = await run(['planner', 'simulate', '--synthetic', 'diurnal-bursty', '--hours', '2', '--peak-rps', '20', '--json', json, '--decisions', decisions]);
    expect(code, output).toBe(0);
    expect(output).toMatch(/planner \(sla, kalman\)/);
    expect(output).toMatch(/static peak/);
    expect(output).toMatch(/static average/);
    const report = JSON.parse(readFileSync(json, 'utf8')) as { runs: { label: string; attainment: number; workerHours: number }[] };
    expect(report.runs.map((r) => r.label)).toEqual(['planner (sla, kalman)', 'static peak', 'static average']);
    const lines = readFileSync(decisions, 'utf8').trim().split('\n');
    // 2 h at 60 s intervals, 2 pools → 240 decisions, each with a rule and a reason
    expect(lines).toHaveLength(240);
    const first = JSON.parse(lines[0]!) as { rule: string; reason: string };
    expect(first.rule).toMatch(/^sla\.|no_signal/);
    expect(first.reason.length).toBeGreaterThan(10);
  });

  it('reads a Mooncake trace file and a perf profile', async () => {
    const trace = join(dir, 'trace.jsonl');
    const lines: string[] = [];
    for (let i = 0; i < 600; i++) lines.push(JSON.stringify({ timestamp: i * 500, input_length: 1000, output_length: 100, hash_ids: [] }));
    writeFileSync(trace, lines.join('\n') + '\n');
    const profile = join(dir, 'profile.json');
    writeFileSync(profile, JSON.stringify({ version: 1, prefill: { tokens: [128, 4096], ms: [18, 90] }, decode: { kvUsage: [0, 1], ms: [6, 34] } }));
    const { code, output } = await run(['planner', 'simulate', '--trace', trace, '--profile', profile, '--topology', 'agg', '--interval', '30']);
    expect(code, output).toBe(0);
    expect(output).toMatch(/trace: 600 requests over 0\.1 h, mean 2\.0 req\/s/);
  });

  const bad: [string, string[], RegExp][] = [
    ['negative interval', ['--interval', '-5'], /intervalS: must be a number > 0/],
    ['unreadable profile', ['--profile', '/nonexistent/profile.json'], /perf profile \/nonexistent\/profile\.json: cannot read/],
    ['unreadable trace', ['--trace', '/nonexistent/trace.jsonl'], /cannot read trace/],
  ];
  for (const [name, args, re] of bad) {
    it(`${name}: clear error, exit 2`, async () => {
      const { code, output } = await run(['planner', 'simulate', '--hours', '0.1', ...args]);
      expect(code).toBe(2);
      expect(output).toMatch(re);
      expect(output).not.toMatch(/at .*\.js:\d+/); // one line, no stack trace
    });
  }

  it('config file: unknown pool and min > max are refused with exit 2', async () => {
    const unknown = join(dir, 'unknown.json');
    writeFileSync(unknown, JSON.stringify({ pools: { encode: { min: 1, max: 2 } } }));
    const r1 = await run(['planner', 'simulate', '--hours', '0.1', '--config', unknown]);
    expect(r1.code).toBe(2);
    expect(r1.output).toMatch(/pools\.encode: unknown pool/);
    const minmax = join(dir, 'minmax.json');
    writeFileSync(minmax, JSON.stringify({ pools: { prefill: { min: 5, max: 2 }, decode: { min: 1, max: 4 } } }));
    const r2 = await run(['planner', 'simulate', '--hours', '0.1', '--config', minmax]);
    expect(r2.code).toBe(2);
    expect(r2.output).toMatch(/pools\.prefill: min 5 > max 2/);
  });
});
