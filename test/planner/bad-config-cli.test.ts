/**
 * More bad configuration through the real CLI (beside live-cli.test.ts, which has the basic
 * cases): the same mistakes reached another way (in the config file rather than a flag, a
 * profile that is readable but wrong) must still be one clear line and exit 2, with nothing
 * started. Spawns the built CLI: run `npm run build` first.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { spawnCli } from '../harness/processes.js';

async function run(args: string[]) {
  const p = spawnCli(args);
  const { code } = await p.exited();
  return { code, output: p.output() };
}

const dir = mkdtempSync(join(tmpdir(), 'planner-bad-config-'));
const file = (name: string, text: string) => {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
};
const negInterval = file('neg-interval.yaml', 'mode: load\nintervalS: -10\n');
const minMaxYaml = file('minmax.yaml', 'mode: load\npools:\n  agg:\n    min: 4\n    max: 2\n');
const wrongSchema = file('wrong-schema.json', JSON.stringify({ version: 1, prefill: { tokens: [128], ms: [-1] }, decode: { kvUsage: [0], ms: [5] } }));
const futureVersion = file('v9.json', JSON.stringify({ version: 9, prefill: { tokens: [128], ms: [10] }, decode: { kvUsage: [0], ms: [5] } }));
const notJson = file('not-json.json', '{ "version": 1,');

describe('bad planner config reached another way: clear error, exit 2', () => {
  const cases: [string, string[], RegExp][] = [
    ['planner: negative interval in the config file', ['planner', '--config', negInterval], /intervalS: must be a number > 0/],
    ['planner: a profile that breaks the schema', ['planner', '--mode', 'sla', '--frontend-metrics-url', 'http://127.0.0.1:9/metrics', '--profile', wrongSchema], /prefill\.ms points must be > 0/],
    ['planner: a profile of an unknown version', ['planner', '--mode', 'sla', '--frontend-metrics-url', 'http://127.0.0.1:9/metrics', '--profile', futureVersion], /unsupported version 9/],
    ['planner: a profile that is not JSON', ['planner', '--mode', 'sla', '--frontend-metrics-url', 'http://127.0.0.1:9/metrics', '--profile', notJson], /not-json\.json: invalid JSON/],
    ['up: min > max in the config file', ['up', '--planner', 'load', '--max-workers', '3', '--planner-config', minMaxYaml], /min 4 > max 2/],
    ['up: negative interval in the config file', ['up', '--planner', 'load', '--max-workers', '3', '--planner-config', negInterval], /intervalS: must be a number > 0/],
    ['up: a profile that breaks the schema', ['up', '--planner', 'sla', '--max-workers', '3', '--planner-profile', wrongSchema], /prefill\.ms points must be > 0/],
    ['up: an unreadable --perf-profile for the mocker workers', ['up', '--workers', '1', '--perf-profile', '/nonexistent/p.json'], /perf profile \/nonexistent\/p\.json: cannot read/],
    ['up: --perf-profile with the native engine', ['up', '--engine', 'native', '--perf-profile', wrongSchema], /--perf-profile is for the mocker engine/],
    ['simulate: a profile of an unknown version', ['planner', 'simulate', '--hours', '0.1', '--profile', futureVersion], /unsupported version 9/],
  ];
  for (const [name, args, re] of cases) {
    it(name, async () => {
      const { code, output } = await run(args);
      expect(code, output).toBe(2);
      expect(output).toMatch(re);
      expect(output.trim().split('\n')).toHaveLength(1); // one line
      expect(output).not.toMatch(/started \(pid/); // nothing was started
    });
  }
});
