/**
 * Speculative decoding's flags refuse bad input in one line with exit 2, before anything starts:
 * on `runtime worker` (a --num-speculative-tokens out of [1, 32], an unknown method, a
 * --prompt-lookup-min above the max, speculation on an embedding worker, TANDEM_SPECULATIVE) and
 * through `runtime up` (the same checks on what it passes to its workers; an embedding-only fleet
 * asked to speculate). Spawns the built CLI (`npm run build` first).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnCli } from '../harness/processes.js';

async function run(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number | null; output: string }> {
  const p = spawnCli(args, env);
  const exit = await Promise.race([p.exited(), new Promise<undefined>((r) => setTimeout(() => r(undefined), 60_000))]);
  if (!exit) {
    await p.stop(20_000);
    throw new Error(`runtime ${args.join(' ')} was still running after 60 s:\n${p.output()}`);
  }
  return { code: exit.code, output: p.output() };
}

/** The one error line printed (beside the CLI's usage hint), free of a stack trace. */
function oneLine(output: string): string {
  const lines = output.trim().split('\n').filter((l) => l !== '(run with --help for usage)');
  expect(lines).toHaveLength(1);
  expect(output).not.toMatch(/^\s+at /m);
  return lines[0]!;
}

describe('speculative decoding flags', () => {
  let cacheDir: string;
  beforeAll(async () => {
    cacheDir = await mkdtemp(join(tmpdir(), 'tandem-spec-flags-'));
  });
  afterAll(async () => {
    await rm(cacheDir, { recursive: true, force: true });
  });

  const worker = ['worker', '--engine', 'mocker', '--model', 'tiny', '--discovery', 'file'];
  const workerCases: Array<{ what: string; args: string[]; env?: NodeJS.ProcessEnv; line: RegExp }> = [
    { what: '--num-speculative-tokens 0', args: ['--speculative', 'ngram', '--num-speculative-tokens', '0'], line: /--num-speculative-tokens <n>' argument '0' is invalid\. expected an integer in \[1, 32\]/ },
    { what: '--num-speculative-tokens 33', args: ['--speculative', 'suffix', '--num-speculative-tokens', '33'], line: /argument '33' is invalid\. expected an integer in \[1, 32\]/ },
    { what: 'an unknown method', args: ['--speculative', 'eagle'], line: /--speculative <method>' argument 'eagle' is invalid\. expected one of off, ngram, suffix/ },
    { what: '--prompt-lookup-min above --prompt-lookup-max', args: ['--speculative', 'ngram', '--prompt-lookup-min', '6', '--prompt-lookup-max', '3'], line: /--prompt-lookup-min must not exceed --prompt-lookup-max/ },
    { what: 'speculation on an embedding worker', args: ['--task', 'embed', '--speculative', 'ngram'], line: /--speculative is for generation workers, not --task embed/ },
    { what: 'a bad TANDEM_NUM_SPECULATIVE_TOKENS', args: ['--speculative', 'ngram'], env: { TANDEM_NUM_SPECULATIVE_TOKENS: '100' }, line: /TANDEM_NUM_SPECULATIVE_TOKENS .*expected an integer in \[1, 32\]/ },
  ];
  for (const c of workerCases) {
    it(`runtime worker: ${c.what} is one line, exit 2`, async () => {
      const { code, output } = await run([...worker, ...c.args], { TANDEM_CACHE_DIR: cacheDir, ...(c.env ?? {}) });
      expect(code).toBe(2);
      expect(oneLine(output)).toMatch(c.line);
    });
  }

  const upCases: Array<{ what: string; args: string[]; line: RegExp }> = [
    { what: 'a --num-speculative-tokens out of range (checked as every worker would)', args: ['--speculative', 'ngram', '--num-speculative-tokens', '64'], line: /--num-speculative-tokens <n>' argument '64' is invalid\..*\(runtime up passes it to every worker\)/ },
    { what: 'n-gram sizes the wrong way round (a worker flag rule, checked by up first)', args: ['--speculative', 'ngram', '--prompt-lookup-min', '6', '--prompt-lookup-max', '3'], line: /--prompt-lookup-min must not exceed --prompt-lookup-max .*\(runtime up passes it to every worker\)/ },
    { what: 'an embedding-only fleet asked to speculate', args: ['--embedding-workers', '1', '--speculative', 'suffix'], line: /--speculative is for generation workers; this fleet has only embedding workers/ },
  ];
  for (const c of upCases) {
    it(`runtime up: ${c.what} is one line, exit 2`, async () => {
      const { code, output } = await run(['up', '--engine', 'mocker', '--model', 'tiny', ...c.args], { TANDEM_CACHE_DIR: cacheDir });
      expect(code).toBe(2);
      expect(oneLine(output)).toMatch(c.line);
    });
  }
});
