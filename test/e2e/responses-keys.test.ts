/**
 * Stored responses belong to the API key that made them (issue 34, item 1.7): `runtime up`
 * with two keys, the `openai` SDK as each. Key k2 gets 404 for k1's response on retrieve,
 * delete and cancel, and a 400 naming `previous_response_id` when it chains from it, exactly
 * as for an id that was never stored; k1 still reads, chains from and deletes its own.
 */
import OpenAI from 'openai';
import { beforeAll, describe, expect, it } from 'vitest';
import { upForBlock } from './up.js';
import { rejection } from './sdk-errors.js';

const K1 = 'key-one-secret';
const K2 = 'key-two-secret';

describe('stored responses are scoped by API key (runtime up, --api-key k1,k2)', () => {
  const served = upForBlock('tandem-responses-keys-', async () => ['--engine', 'mocker', '--model', 'tiny', '--workers', '1', '--speedup-ratio', '100', '--api-key', `${K1},${K2}`, '--log-level', 'warn']);
  let one: OpenAI;
  let two: OpenAI;
  let base: { model: string; max_output_tokens: number };
  beforeAll(async () => {
    one = new OpenAI({ baseURL: `${served.url()}/v1`, apiKey: K1, maxRetries: 0 });
    two = new OpenAI({ baseURL: `${served.url()}/v1`, apiKey: K2, maxRetries: 0 });
    const models = await one.models.list();
    base = { model: models.data[0]!.id, max_output_tokens: 8 };
  });

  it("k2 cannot retrieve, chain from, cancel or delete k1's response; k1 can", async () => {
    const mine = await one.responses.create({ ...base, input: 'first turn' });
    expect(mine.id).toMatch(/^resp_/);

    const retrieve = await rejection(two.responses.retrieve(mine.id));
    expect(retrieve.status).toBe(404);
    const chained = await rejection(two.responses.create({ ...base, input: 'second turn', previous_response_id: mine.id }));
    expect(chained.status).toBe(400);
    expect(chained.param).toBe('previous_response_id');
    // The same answers as for an id nobody stored: k2 learns nothing about k1's ids.
    const never = 'resp_0123456789abcdef01234567';
    expect((await rejection(two.responses.retrieve(never))).message).toBe(retrieve.message.replace(mine.id, never));
    const cancel = await rejection(two.responses.cancel(mine.id));
    expect(cancel.status).toBe(404);
    const deleted = await rejection(two.responses.delete(mine.id));
    expect(deleted.status).toBe(404);

    // k1's response is untouched by all that.
    expect((await one.responses.retrieve(mine.id)).id).toBe(mine.id);
    const next = await one.responses.create({ ...base, input: 'second turn', previous_response_id: mine.id });
    expect(next.previous_response_id).toBe(mine.id);
    await one.responses.delete(mine.id);
    expect((await rejection(one.responses.retrieve(mine.id))).status).toBe(404);
  }, 60_000);

  it('each key keeps its own: k2 stores, k1 cannot see it', async () => {
    const theirs = await two.responses.create({ ...base, input: 'k2 only' });
    expect((await two.responses.retrieve(theirs.id)).id).toBe(theirs.id);
    expect((await rejection(one.responses.retrieve(theirs.id))).status).toBe(404);
  }, 60_000);
});
