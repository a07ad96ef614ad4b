/**
 * A model whose workers are all down is still a model (issue 34, item 1.4), with real
 * processes: `runtime frontend` and one mocker worker over file discovery, lease TTL 2 s. The
 * worker is killed with SIGKILL and stays down past its lease, so its card is gone (the
 * frontend says so in its log). A client must then get 503 `no_instances` with Retry-After,
 * which it retries, not 404 `model_not_found`, which it takes as permanent; and 200 once a
 * worker is back. `--migration-wait 0.5` keeps each 503 quick. Past `--model-grace-period` the
 * model is forgotten (404), as before.
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CliStack } from '../harness/cli-stack.js';
import { pollUntil } from '../harness/http.js';

async function chat(url: string, model: string): Promise<Response> {
  return fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
  });
}

describe('a model whose lone worker is down past its lease (real frontend + mocker worker, kill -9)', () => {
  let stack: CliStack;
  let shortGrace: string;

  beforeAll(async () => {
    stack = await CliStack.create({ tmpPrefix: 'tandem-model-grace-', leaseTtl: 2 });
    await stack.startFrontend(['--migration-wait', '0.5', '--retry-after', '3']);
    const second = await stack.startFrontend(['--migration-wait', '0.5', '--model-grace-period', '1']);
    shortGrace = (await second.waitForLine(/^frontend listening on http:\/\//)).slice('frontend listening on '.length).trim();
    await stack.startWorker('agg', ['--engine', 'mocker', '--speedup-ratio', '100']);
    await stack.waitForRoutable(1);
    await stack.waitForRoutable(1, { url: shortGrace });
  }, 90_000);

  afterAll(async () => {
    await stack?.close();
  }, 30_000);

  it('answers 503 no_instances with Retry-After while it is down, 200 after a worker is back; past the grace period, 404', async () => {
    expect((await chat(stack.url, stack.model)).status).toBe(200);
    await stack.kill9(stack.workers[0]!);
    // The lease expired and the card went: both frontends log it (each in its own words).
    await stack.frontend.waitForLine(/"msg":"model (removed|has no workers)/, 30_000);

    const down = await chat(stack.url, stack.model);
    expect(down.status).toBe(503);
    expect(down.headers.get('retry-after')).toBe('3');
    expect(((await down.json()) as { error: { code: string } }).error.code).toBe('no_instances');
    // The official client sees a retryable error, and the model still listed.
    const openai = new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const err = await openai.chat.completions.create({ model: stack.model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.InternalServerError);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(503);
    expect((await openai.models.list()).data.map((m) => m.id)).toContain(stack.model);

    // Past its 1 s grace period the other frontend has forgotten the model: 404, as before.
    await pollUntil('the frontend with --model-grace-period 1 forgot the model', async () => (await chat(shortGrace, stack.model)).status === 404, 15_000);

    await stack.startWorker('agg', ['--engine', 'mocker', '--speedup-ratio', '100']);
    await stack.waitForRoutable(1);
    expect((await chat(stack.url, stack.model)).status).toBe(200);
  }, 90_000);
});
