/** Bad configuration values give a clear message and exit code 2, from flags or from TANDEM_* env. */
import { describe, expect, it } from 'vitest';
import { spawnCli } from '../harness/processes.js';

async function run(args: string[], env: NodeJS.ProcessEnv = {}) {
  const p = spawnCli(args, env);
  const { code } = await p.exited();
  return { code, output: p.output() };
}

describe('runtime CLI configuration', () => {
  it('--help lists every subcommand of the design', async () => {
    const { code, output } = await run(['--help']);
    expect(code).toBe(0);
    for (const sub of ['up', 'frontend', 'worker', 'router', 'planner', 'bench', 'model']) {
      expect(output).toMatch(new RegExp(`^\\s+${sub}\\b`, 'm'));
    }
  });

  it('runtime planner with an unreadable --config names the file in one line and exits 2', async () => {
    const { code, output } = await run(['planner', '--config', 'x.yaml']);
    expect(code).toBe(2);
    expect(output).toContain('cannot read planner config x.yaml');
    expect(output).not.toMatch(/^\s+at /m);
  });

  it('an invalid flag value names the flag and the expected value, exit 2', async () => {
    const { code, output } = await run(['up', '--workers', 'many']);
    expect(code).toBe(2);
    expect(output).toMatch(/--workers/);
    expect(output).toMatch(/expected an integer/);
  });

  it('an invalid TANDEM_* environment value is rejected the same way', async () => {
    const { code, output } = await run(['up', '--help'], {}); // sanity: help works
    expect(code).toBe(0);
    expect(output).toContain('--http-port');
    const bad = await run(['up'], { TANDEM_HTTP_PORT: '99999' });
    expect(bad.code).toBe(2);
    expect(bad.output).toMatch(/http-port|TANDEM_HTTP_PORT/i);
    expect(bad.output).toMatch(/expected an integer in \[0, 65535\]/);
  });

  it('an unknown choice lists the allowed ones', async () => {
    const { code, output } = await run(['up', '--engine', 'vllm']);
    expect(code).toBe(2);
    expect(output).toContain('one of mocker, native');
  });
});
