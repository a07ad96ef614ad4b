/**
 * Structured output is valid on a random model: through `runtime up` (frontend + one worker,
 * the tiny random model), with the mocker, the native engine on the CPU, and the native engine's
 * CUDA backend on the SIMT harness (`--device simt`: its kernels, graphs and device sampler with
 * the masks handed over while the forward runs, on the host), every schema of the
 * corpus (test/grammar/schema-corpus.ts) asked through the openai SDK's
 * `response_format: json_schema` comes back as JSON that parses and validates under ajv, with
 * finish_reason "stop" (max_tokens is generous; closing mode ends every output within it).
 * Regex and choice outputs (vLLM's `structured_outputs` extra field) match exactly.
 *
 * The model is random, so nothing but the grammar makes these outputs valid: a worker that
 * ignored the mask would fail nearly every case.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isNativeBuilt } from '../../native/index.js';
import { makeAjv } from '../grammar/compile-ir-tools.js';
import { SCHEMA_CORPUS } from '../grammar/schema-corpus.js';
import { freePort } from '../harness/ports.js';
import { startUp, stopAll, type Up } from './up.js';

const MODEL = 'tiny-llama';
const MAX_TOKENS = 256;
/** Requests in flight per engine: enough to batch, few enough for a loaded 2-core box. */
const CONCURRENCY = 16;

const REGEX_CASES = ['[0-9]{3}-[0-9]{4}', '(yes|no|maybe)', '[a-z]+@[a-z]+\\.(com|org)', 'v[0-9]+\\.[0-9]+\\.[0-9]+', '[A-Z][a-z]{2,6}( [A-Z][a-z]{2,6})?'];
const CHOICE_CASES = [['positive', 'negative', 'neutral'], ['red', 'green', 'blue', 'light green'], ['A', 'B']];

async function inPool<T>(jobs: Array<() => Promise<T>>, n: number): Promise<T[]> {
  const out: T[] = new Array(jobs.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(n, jobs.length) }, async () => {
      while (next < jobs.length) {
        const i = next++;
        out[i] = await jobs[i]!();
      }
    }),
  );
  return out;
}

interface Outcome {
  name: string;
  content: string;
  finish: string | null;
}

function validity(engine: string, args: string[]): void {
  describe(`structured output validity (${engine}, runtime up)`, () => {
    let cacheDir: string;
    let up: Up | undefined;
    let client: OpenAI;

    beforeAll(async () => {
      cacheDir = await mkdtemp(join(tmpdir(), `tandem-structured-${engine.replace(/\W+/g, '-')}-`));
      up = await startUp(cacheDir, [...args, '--model', 'tiny', '--workers', '1', '--http-port', String(await freePort()), '--log-level', 'warn']);
      client = new OpenAI({ baseURL: `${up.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
    }, 120_000);
    afterAll(async () => {
      if (up !== undefined) await stopAll([up]);
      await rm(cacheDir, { recursive: true, force: true });
    }, 60_000);

    async function ask(name: string, body: Record<string, unknown>, i: number): Promise<Outcome> {
      const r = await client.chat.completions.create({
        model: MODEL,
        messages: [{ role: 'user', content: `Answer case ${i}: ${name}` }],
        max_tokens: MAX_TOKENS,
        temperature: 0.8,
        seed: 1000 + i,
        ...body,
      } as unknown as OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming);
      const choice = r.choices[0]!;
      return { name, content: choice.message.content ?? '', finish: choice.finish_reason };
    }

    it(`every corpus schema (${SCHEMA_CORPUS.length}) gives JSON that parses and validates, finishing "stop"`, async () => {
      expect(SCHEMA_CORPUS.length).toBeGreaterThanOrEqual(50);
      const ajv = makeAjv();
      const outcomes = await inPool(
        SCHEMA_CORPUS.map((c, i) => () =>
          ask(c.name, { response_format: { type: 'json_schema', json_schema: { name: `case_${i}`, schema: c.schema, strict: true } } }, i),
        ),
        CONCURRENCY,
      );
      const failures: string[] = [];
      outcomes.forEach((o, i) => {
        let value: unknown;
        try {
          value = JSON.parse(o.content);
        } catch {
          failures.push(`${o.name}: not JSON (${o.finish}): ${JSON.stringify(o.content.slice(0, 200))}`);
          return;
        }
        const validate = ajv.compile(SCHEMA_CORPUS[i]!.schema);
        if (!validate(value)) failures.push(`${o.name}: ${ajv.errorsText(validate.errors)}: ${o.content.slice(0, 200)}`);
        if (o.finish !== 'stop') failures.push(`${o.name}: finish_reason ${o.finish}`);
      });
      expect(failures, failures.join('\n')).toEqual([]);
    }, 300_000);

    it('regex and choice outputs (structured_outputs) match exactly, finishing "stop"', async () => {
      const jobs: Array<() => Promise<Outcome & { ok: (s: string) => boolean }>> = [];
      REGEX_CASES.forEach((pattern, i) => {
        const re = new RegExp(`^(?:${pattern})$`, 'u');
        jobs.push(async () => ({ ...(await ask(`regex ${pattern}`, { structured_outputs: { regex: pattern } }, i)), ok: (s) => re.test(s) }));
      });
      CHOICE_CASES.forEach((choices, i) => {
        jobs.push(async () => ({ ...(await ask(`choice ${choices.join('|')}`, { structured_outputs: { choice: choices } }, 100 + i)), ok: (s) => choices.includes(s) }));
      });
      const outcomes = await inPool(jobs, CONCURRENCY);
      const failures = outcomes.filter((o) => !o.ok(o.content) || o.finish !== 'stop').map((o) => `${o.name}: ${JSON.stringify(o.content)} (${o.finish})`);
      expect(failures, failures.join('\n')).toEqual([]);
    }, 120_000);
  });
}

validity('mocker', ['--engine', 'mocker', '--speedup-ratio', '100']);
if (isNativeBuilt()) {
  validity('native', ['--engine', 'native', '--threads', '1']);
  validity('native, CUDA backend on the SIMT harness', ['--engine', 'native', '--device', 'simt', '--threads', '1']);
} else {
  describe.skip('structured output validity (native): the native addon is not built (npm run build:native)', () => {});
}
