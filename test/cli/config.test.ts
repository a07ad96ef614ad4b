/** Bad configuration values give a clear message and exit code 2, from flags or from TANDEM_* env. */
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { buildProgram } from '../../cli/main.js';
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

  it('up --help names the engines and says why --discovery has no memory backend', async () => {
    const { code, output } = await run(['up', '--help']);
    expect(code).toBe(0);
    const flat = output.replace(/\s+/g, ' ');
    expect(flat).toMatch(/--engine <engine> worker engine: mocker \| native/);
    expect(flat).toMatch(/--discovery <kind> file \| etcd \(not memory: [^)]*\)/);
  });

  it('an unknown choice lists the allowed ones', async () => {
    const { code, output } = await run(['up', '--engine', 'vllm']);
    expect(code).toBe(2);
    expect(output).toContain('one of mocker, native');
  });

  // Every refusal reads the same: one line "runtime: …", exit 2, no commander "error:" and no second line.
  const oneLine = (output: string) => output.trimEnd().split('\n');

  it('--workers -1 is one standard line: the bound as a reader says it, not 2^53 − 1', async () => {
    const { code, output } = await run(['up', '--workers', '-1']);
    expect(code).toBe(2);
    expect(oneLine(output)).toEqual([`runtime: option '--workers <n>' argument '-1' is invalid. expected an integer >= 0, got '-1' (\`runtime up --help\` lists the options)`]);
  });

  it('a bad TANDEM_PLANNER_MODE says what was expected like every other parser (not commander\'s "Allowed choices")', async () => {
    const { code, output } = await run(['planner', 'simulate', '--synthetic', 'diurnal-bursty'], { TANDEM_PLANNER_MODE: 'fastest' });
    expect(code).toBe(2);
    expect(oneLine(output)).toEqual([`runtime: environment variable TANDEM_PLANNER_MODE (option '--mode <mode>'): expected one of sla, load, got 'fastest' (\`runtime planner simulate --help\` lists the options)`]);
  });

  it('a choice flag on the command line names the choices the same way', async () => {
    const { code, output } = await run(['planner', 'simulate', '--topology', 'mesh']);
    expect(code).toBe(2);
    expect(oneLine(output)).toHaveLength(1);
    expect(output).toMatch(/^runtime: option '--topology <t>' argument 'mesh' is invalid\. expected one of agg, disagg, got 'mesh' /);
  });

  it('a worker refuses a flag combination on one line, exit 2, by the rules runtime up checks too', async () => {
    const { code, output } = await run(['worker', '--model', 'tiny', '--kv-disk-cache-gb', '1']);
    expect(code).toBe(2);
    expect(oneLine(output)).toEqual(['runtime: --kv-disk-cache-dir / --kv-disk-cache-gb need --kv-host-cache-gb: the disk tier sits below the host tier']);
  });
});

describe('one environment variable, one meaning', () => {
  /** Every TANDEM_* variable of the program → the flags (command and flag) that read it. */
  function readers(): Map<string, string[]> {
    const out = new Map<string, string[]>();
    const visit = (cmd: ReturnType<typeof buildProgram>, path: string) => {
      for (const o of cmd.options) if (o.envVar) out.set(o.envVar, [...(out.get(o.envVar) ?? []), `${path} ${o.long}`]);
      for (const c of cmd.commands) visit(c, `${path} ${c.name()}`.trim());
    };
    visit(buildProgram(), '');
    return out;
  }

  it('TANDEM_MODE is the worker role and TANDEM_LORA an adapter to serve; the planner and make-tiny flags of the same names read their own', () => {
    const r = readers();
    expect(r.get('TANDEM_MODE')).toEqual(['worker --mode']);
    expect(r.get('TANDEM_LORA')).toEqual(['up --lora', 'worker --lora']);
    expect(r.get('TANDEM_PLANNER_MODE')).toEqual(['planner --mode', 'planner simulate --mode']);
    expect(r.get('TANDEM_MAKE_TINY_LORA')).toEqual(['model make-tiny --lora']);
  });

  it('make-tiny writes adapters for TANDEM_MAKE_TINY_LORA and ignores a TANDEM_LORA meant for the workers', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tandem-env-names-'));
    try {
      const a = await run(['model', 'make-tiny', '--arch', 'llama', '--out', join(dir, 'a')], { TANDEM_LORA: 'sql=/adapters/sql' });
      expect(a.code, a.output).toBe(0);
      expect(await readdir(join(dir, 'a'))).not.toContain('loras');
      const b = await run(['model', 'make-tiny', '--arch', 'llama', '--out', join(dir, 'b')], { TANDEM_MAKE_TINY_LORA: '2' });
      expect(b.code, b.output).toBe(0);
      expect((await readdir(join(dir, 'b', 'loras'))).sort()).toEqual(['lora-0', 'lora-1']);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
