/**
 * `runtime frontend` as a process: it starts with file discovery, prints its URL, serves /live
 * and a not-ready /health with no workers, and exits 0 on SIGTERM. Its parser flags take
 * TANDEM_* values and refuse unknown ones.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { spawnTs } from '../harness/processes.js';

describe('runtime frontend (process)', () => {
  it('starts, serves /live and /health, and exits cleanly on SIGTERM', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tandem-frontend-cli-'));
    const child = spawnTs('test/frontend/fixtures/frontend-cli.ts', ['frontend', '--http-port', '0', '--host', '127.0.0.1', '--discovery', 'file', '--discovery-dir', dir], {
      TANDEM_LOG_LEVEL: 'warn',
      TANDEM_MIGRATION_LIMIT: '2',
      TANDEM_TOOL_CALL_PARSER: 'mistral',
      TANDEM_REASONING_PARSER: 'think',
    });
    try {
      const url = (await child.waitForLine(/^frontend listening on http:\/\/\S+$/)).slice('frontend listening on '.length).trim();
      expect((await fetch(`${url}/live`)).status).toBe(200);
      const health = await fetch(`${url}/health`);
      expect(health.status).toBe(503);
      expect(await health.json()).toMatchObject({ status: 'not_ready', models: [] });
      child.kill('SIGTERM');
      expect((await child.exited()).code).toBe(0);
    } finally {
      child.killNow();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('--tool-call-parser and --reasoning-parser refuse unknown values, from flags and from TANDEM_*', async () => {
    const flag = spawnTs('test/frontend/fixtures/frontend-cli.ts', ['frontend', '--http-port', '0', '--tool-call-parser', 'qwen']);
    expect((await flag.exited()).code).not.toBe(0);
    expect(flag.output()).toMatch(/--tool-call-parser[\s\S]*one of auto, hermes, llama3_json, mistral/);
    const env = spawnTs('test/frontend/fixtures/frontend-cli.ts', ['frontend', '--http-port', '0'], { TANDEM_REASONING_PARSER: 'deepseek' });
    expect((await env.exited()).code).toBe(2);
    expect(env.output()).toMatch(/TANDEM_REASONING_PARSER[\s\S]*one of none, think/);
  });
});
