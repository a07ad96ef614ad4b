/**
 * How the planner command assembles its config from a profile, a config file, flags and TANDEM_*
 * variables. The KV capacity decode is sized with must be the profiled worker's unless someone
 * names another: 131072 is only the fallback for a profile that does not say.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { buildProgram } from '../../cli/main.js';
import { ConfigError } from '../../runtime/errors.js';
import { buildConfig, defaultPlannerConfig, loadPlannerProfile } from '../../planner/index.js';

const dir = mkdtempSync(join(tmpdir(), 'planner-command-'));
const model = { version: 1, prefill: { tokens: [128, 4096], ms: [18, 90] }, decode: { kvUsage: [0, 1], ms: [6, 34] } };
/** What `runtime profile --out` writes: the model plus the worker it measured (512 blocks × 32). */
const profiled = join(dir, 'profiled.json');
writeFileSync(profiled, JSON.stringify({ ...model, worker: { model: 'tiny', engine: 'mocker', contextLength: 2048, kvBlockSize: 32, totalKvBlocks: 512, kvCapacityTokens: 16384, maxNumBatchedTokens: 8192 } }));
const bare = join(dir, 'bare.json');
writeFileSync(bare, JSON.stringify(model));
const fileSaysKv = join(dir, 'config.json');
writeFileSync(fileSaysKv, JSON.stringify({ sla: { kvCapacityTokens: 32768 } }));
const fileSilent = join(dir, 'silent.json');
writeFileSync(fileSilent, JSON.stringify({ sla: { ttftMs: 400 } }));

describe('KV capacity: flag or config or TANDEM_* variable, else the profile, else 131072', () => {
  it('a profile from `runtime profile` carries its worker\'s KV capacity; a bare schema-v1 model does not', async () => {
    expect((await loadPlannerProfile(profiled)).kvCapacityTokens).toBe(16384);
    expect((await loadPlannerProfile(bare)).kvCapacityTokens).toBeUndefined();
    expect((await loadPlannerProfile(undefined)).kvCapacityTokens).toBeUndefined();
  });

  it('a malformed worker.kvCapacityTokens is a ConfigError naming the field', async () => {
    const broken = join(dir, 'broken.json');
    writeFileSync(broken, JSON.stringify({ ...model, worker: { kvCapacityTokens: -1 } }));
    await expect(loadPlannerProfile(broken)).rejects.toThrow(ConfigError);
    await expect(loadPlannerProfile(broken)).rejects.toThrow(/worker\.kvCapacityTokens must be an integer > 0, got -1/);
  });

  const table: [string, Parameters<typeof buildConfig>[0], string | undefined, number | undefined, number][] = [
    // name, flags, config file, profile's capacity, expected
    ['nothing says: the built-in default', {}, undefined, undefined, 131072],
    ['the profile says', {}, undefined, 16384, 16384],
    ['a config file without it: still the profile', { config: fileSilent }, undefined, 16384, 16384],
    ['the config file beats the profile', { config: fileSaysKv }, undefined, 16384, 32768],
    ['the flag beats the profile', { kvCapacityTokens: 4096 }, undefined, 16384, 4096],
    ['the flag beats the file and the profile', { config: fileSaysKv, kvCapacityTokens: 4096 }, undefined, 16384, 4096],
  ];
  for (const [name, flags, , profileKv, want] of table) {
    it(`buildConfig: ${name} → ${want}`, () => {
      expect(buildConfig(flags, undefined, { kvCapacityTokens: profileKv }).sla.kvCapacityTokens).toBe(want);
    });
  }

  it('a preloaded (YAML or JSON) config file beats the profile too', () => {
    expect(buildConfig({}, { sla: { kvCapacityTokens: 65536 } }, { kvCapacityTokens: 16384 }).sla.kvCapacityTokens).toBe(65536);
    expect(defaultPlannerConfig().sla.kvCapacityTokens).toBe(131072);
  });
});

describe('`runtime planner simulate --profile` (in process)', () => {
  afterEach(() => {
    vi.restoreAllMocks();
    delete process.env['TANDEM_KV_CAPACITY_TOKENS'];
  });

  async function simulatedKv(args: string[]): Promise<number> {
    const json = join(dir, `sim-${Math.random().toString(36).slice(2)}.json`);
    vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
    await buildProgram().parseAsync(['node', 'runtime', 'planner', 'simulate', '--hours', '0.05', '--no-compare', '--json', json, ...args]);
    return (JSON.parse(readFileSync(json, 'utf8')) as { config: { sla: { kvCapacityTokens: number } } }).config.sla.kvCapacityTokens;
  }

  it('sizes with the profiled worker\'s capacity, unless a flag or TANDEM_KV_CAPACITY_TOKENS names one', async () => {
    expect(await simulatedKv(['--profile', profiled])).toBe(16384);
    expect(await simulatedKv(['--profile', bare])).toBe(131072);
    expect(await simulatedKv(['--profile', profiled, '--kv-capacity-tokens', '8192'])).toBe(8192);
    process.env['TANDEM_KV_CAPACITY_TOKENS'] = '4096';
    expect(await simulatedKv(['--profile', profiled])).toBe(4096);
  });
});
