/**
 * `runtime planner` (live) and `runtime up --planner`: bad configuration is one clear line and
 * exit 2, before anything starts (no kube API, no workers). Spawns the built CLI: run
 * `npm run build` first.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { spawnCli } from '../harness/processes.js';

async function run(args: string[], env: NodeJS.ProcessEnv = {}) {
  const p = spawnCli(args, env);
  const { code } = await p.exited();
  return { code, output: p.output() };
}

const dir = mkdtempSync(join(tmpdir(), 'planner-live-cli-'));
const yamlUnknown = join(dir, 'unknown.yaml');
writeFileSync(yamlUnknown, 'mode: load\npools:\n  encode:\n    min: 1\n    max: 2\n');
const minMax = join(dir, 'minmax.json');
writeFileSync(minMax, JSON.stringify({ pools: { prefill: { min: 5, max: 2 }, decode: { min: 1, max: 4 } } }));
const badYaml = join(dir, 'bad.yml');
writeFileSync(badYaml, 'mode: [load\n');

describe('bad planner config: clear error, exit 2', () => {
  const cases: [string, string[], RegExp, NodeJS.ProcessEnv?][] = [
    ['planner: unknown pool (YAML)', ['planner', '--config', yamlUnknown], /pools\.encode: unknown pool/],
    ['planner: min > max', ['planner', '--config', minMax], /pools\.prefill: min 5 > max 2/],
    ['planner: malformed YAML', ['planner', '--config', badYaml], /bad\.yml: invalid YAML/],
    ['planner: negative interval', ['planner', '--mode', 'load', '--interval', '-1'], /intervalS: must be a number > 0/],
    ['planner: negative interval from TANDEM_INTERVAL', ['planner', '--mode', 'load'], /intervalS: must be a number > 0/, { TANDEM_INTERVAL: '-3' }],
    ['planner: unreadable profile', ['planner', '--mode', 'sla', '--frontend-metrics-url', 'http://127.0.0.1:9/metrics', '--profile', '/nonexistent/profile.json'], /perf profile \/nonexistent\/profile\.json: cannot read/],
    ['planner: sla without frontend metrics', ['planner', '--mode', 'sla'], /sla mode needs --frontend-metrics-url/],
    ['up: min > max', ['up', '--planner', 'load', '--min-workers', '3', '--max-workers', '2'], /min 3 > max 2/],
    ['up: negative interval', ['up', '--planner', 'load', '--max-workers', '3', '--planner-interval', '-1'], /intervalS: must be a number > 0/],
    ['up: unreadable profile', ['up', '--planner', 'sla', '--max-workers', '3', '--planner-profile', '/nonexistent/profile.json'], /perf profile \/nonexistent\/profile\.json: cannot read/],
    ['up: no budget', ['up', '--planner', 'load'], /--planner needs --max-workers/],
    ['up: unknown pool in the config file', ['up', '--planner', 'load', '--max-workers', '3', '--planner-config', yamlUnknown], /pools\.encode: unknown pool/],
  ];
  for (const [name, args, re, env] of cases) {
    it(name, async () => {
      const { code, output } = await run(args, env);
      expect(code, output).toBe(2);
      expect(output).toMatch(re);
      expect(output).not.toMatch(/at .*\.js:\d+/); // one line, no stack trace
      expect(output).not.toMatch(/started \(pid/); // nothing was started
    });
  }
});
