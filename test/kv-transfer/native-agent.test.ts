/**
 * Runs the C++ test binary (native/ucx/tests/ucx_agent_test.cc, built by
 * `node native/ucx/build.js`) on both transports: UcxAgent driven without Node.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../harness/processes.js';

const BINARY = join(REPO_ROOT, 'native/ucx/build/ucx_agent_test');

describe('ucx_agent_test (C++)', () => {
  it('the test binary was built with the addon', () => {
    expect(existsSync(BINARY), `${BINARY} missing: run node native/ucx/build.js`).toBe(true);
  });

  it.each(['tcp', 'sm,self'])('passes with UCX_TLS=%s', (tls) => {
    const run = spawnSync(BINARY, [], { env: { ...process.env, UCX_TLS: tls }, encoding: 'utf8', timeout: 30_000 });
    expect(run.stderr).not.toMatch(/CHECK failed/);
    expect(run.stdout).toContain('all checks passed');
    expect(run.status).toBe(0);
  });
});
