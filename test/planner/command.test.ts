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
import { buildConfig, defaultPlannerConfig, loadPlannerProfile, plannerPerf, plannerPerfSource } from '../../planner/index.js';
import { sizePrefill } from '../../planner/policy/sla-sizing.js';

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

/**
 * Step time by the served model's active parameters (perf-model `stepTimeModel`, as the mocker
 * sleeps and the router predicts): `runtime up --planner` without a profile passes the model's
 * counts. Worked example, Qwen3-30B-A3B (share 0.10982), 100 prompts/s of 1000 tokens, TTFT
 * target 100 ms, utilization cap 0.9 (sla-sizing.ts):
 *   dense reading   S = 32.106 ms, k = (100 − 32.106) / 32.106 = 2.1147, ρ* = 2k / (1 + 2k) = 0.8088
 *                   → 100 · 0.032106 / 0.8088 = 3.970 workers → 4
 *   active share    S = 3.526 ms, ρ* = 0.9821 → capped 0.9 → 100 · 0.003526 / 0.9 = 0.392 → 1
 */
describe('the planner\'s step times: a profile as it is, else the default fit × the model\'s active share', () => {
  const QWEN3_30B_A3B = { total: 30_532_110_336, active: 3_353_020_416 };

  it('no profile: a MoE is charged its active share (4 prefill workers → 1 at 100 prompts/s of 1000 tokens)', async () => {
    const none = await loadPlannerProfile(undefined);
    expect(none.measured).toBe(false);
    const dense = plannerPerf(none);
    const moe = plannerPerf(none, QWEN3_30B_A3B);
    expect(dense.prefillMs(1000)).toBeCloseTo(32.106, 3);
    expect(moe.prefillMs(1000)).toBeCloseTo(3.526, 3);
    const d = sizePrefill(dense, 100, 1000, 100, 0.9);
    const m = sizePrefill(moe, 100, 1000, 100, 0.9);
    expect(d.utilization).toBeCloseTo(0.8088, 4);
    expect(d.replicas).toBeCloseTo(3.970, 3);
    expect(m.utilization).toBe(0.9);
    expect(m.replicas).toBeCloseTo(0.392, 3);
    expect([Math.ceil(d.replicas), Math.ceil(m.replicas)]).toEqual([4, 1]);
    expect(plannerPerfSource(none, QWEN3_30B_A3B)).toBe('the default fit x active share 0.1098');
    expect(plannerPerfSource(none, { total: 10, active: 10 })).toBe('the default fit');
  });

  it('a measured profile is the model\'s own: the counts change nothing', async () => {
    const p = await loadPlannerProfile(bare);
    expect(p.measured).toBe(true);
    expect(plannerPerf(p, QWEN3_30B_A3B).prefillMs(128)).toBe(18);
    expect(plannerPerfSource(p, QWEN3_30B_A3B)).toBe('the perf profile');
  });
});
