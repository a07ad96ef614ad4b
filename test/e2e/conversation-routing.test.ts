/**
 * Sticky conversations through the KV tiers, on a real `runtime up` fleet (issue 38): two mocker
 * workers with 128-block pools and a host tier (G2), speedup 2, `--router-mode kv`. A conversation's first
 * turn runs on some worker W; enough other traffic then passes through both pools that W keeps
 * that turn only in its host tier. When the follow-up comes, W is the busier worker: two long
 * streams pinned there hold 86 blocks against 44-45 on the other's one, more than the turn's
 * cached prefix saves, so the block cost alone would send the turn away (chat, e.g.: W
 * 46 − 38 + 86 = 94 against 46 + 44 = 90; Responses: 48 − 39 + 86 = 95 against 48 + 45 = 93; the
 * follow-up's length moves by a block or two with the earlier output). The
 * follow-up, a chat whose messages extend the first turn's or a Responses call chained by
 * `previous_response_id`, lands on W anyway (prefix affinity: W holds most of the prompt, has
 * KV room and carries no more than twice the other's load) and finds the whole earlier prompt
 * cached, onboarded from G2: no other worker has it and W's pool lost it, so either miss would
 * show as 0 cached tokens.
 */
import { describe, expect, it } from 'vitest';
import { upForBlock } from './up.js';
import { seededWords } from './words.js';

const MAX_TOKENS = 8;
/** `--model tiny` serves the generated model under its directory's name. */
const MODEL = 'tiny-llama';

interface Turn {
  instance: string;
  promptTokens: number;
  cached: number;
  text: string;
  id?: string;
}

async function chat(url: string, messages: Array<{ role: string; content: string }>): Promise<Turn> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages, max_tokens: MAX_TOKENS, ignore_eos: true, temperature: 0 }),
  });
  if (res.status !== 200) throw new Error(`chat ${res.status}: ${await res.text()}`);
  const body = (await res.json()) as { choices: Array<{ message: { content: string } }>; usage: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } } };
  return { instance: res.headers.get('x-worker-instance-id')!, promptTokens: body.usage.prompt_tokens, cached: body.usage.prompt_tokens_details?.cached_tokens ?? 0, text: body.choices[0]!.message.content };
}

async function respond(url: string, input: string, previous?: string): Promise<Turn> {
  const res = await fetch(`${url}/v1/responses`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, input, max_output_tokens: MAX_TOKENS, temperature: 0, store: true, ...(previous !== undefined ? { previous_response_id: previous } : {}) }),
  });
  if (res.status !== 200) throw new Error(`responses ${res.status}: ${await res.text()}`);
  const body = (await res.json()) as { id: string; usage: { input_tokens: number; input_tokens_details?: { cached_tokens?: number } } };
  return { instance: res.headers.get('x-worker-instance-id')!, promptTokens: body.usage.input_tokens, cached: body.usage.input_tokens_details?.cached_tokens ?? 0, text: '', id: body.id };
}

const words = seededWords;

/** Other users' prompts, about 33 blocks each: sixteen turn both 128-block pools over twice. */
async function otherTraffic(url: string, seed: number): Promise<void> {
  await Promise.all(Array.from({ length: 16 }, (_, i) => chat(url, [{ role: 'user', content: words(seed * 100 + i, 200) }])));
}

/**
 * Long streams pinned to one worker (the direct-routing header; the router books them there),
 * prompts of `wordsCount` words each, up to 1000 output tokens (at speedup 2 they grow by about
 * 4 blocks a second, well within the holder's room while the follow-up is routed, and outlive
 * it). Resolves once every stream has delivered its first token (its prefill is done,
 * so the router counts it as active blocks only, not pending prefill too) to a function that
 * cancels them; meanwhile each is drained so it runs at the worker's pace.
 */
async function pinnedStreams(url: string, instance: string, prompts: number[], seed: number): Promise<() => void> {
  const stop = new AbortController();
  await Promise.all(
    prompts.map(async (wordsCount, i) => {
      const res = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        signal: stop.signal,
        headers: { 'content-type': 'application/json', 'x-worker-instance-id': instance },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: words(seed * 1000 + i, wordsCount) }], max_tokens: 1000, ignore_eos: true, stream: true }),
      });
      expect(res.status).toBe(200);
      const reader = res.body!.getReader();
      const decoder = new TextDecoder();
      let text = '';
      while (!/"content":"[^"]/.test(text)) {
        const { value, done } = await reader.read();
        if (done) throw new Error('stream ended before its first token');
        text += decoder.decode(value, { stream: true });
      }
      void (async () => {
        try {
          while (!(await reader.read()).done);
        } catch {
          // cancelled
        }
      })();
    }),
  );
  return () => stop.abort();
}

/** The other worker of the two. */
async function otherWorker(url: string, than: string): Promise<string> {
  for (let i = 0; i < 50; i++) {
    const t = await chat(url, [{ role: 'user', content: words(9000 + i, 10) }]);
    if (t.instance !== than) return t.instance;
  }
  throw new Error('only one worker answered');
}

/**
 * W busier than the other: two 43-block streams there, one 44-45-block stream on the other (the
 * word counts are tuned to these block counts: W stays within 2x the other's load, the affinity
 * bound, while its cost exceeds the other's; the prompts are seeded, so the counts are exact).
 */
async function busier(url: string, holder: string, other: string, seed: number): Promise<() => void> {
  const a = await pinnedStreams(url, holder, [162, 162], seed);
  const b = await pinnedStreams(url, other, [168], seed + 1);
  return () => {
    a();
    b();
  };
}

describe('follow-up turns land on the worker holding the conversation in its host tier', () => {
  const up = upForBlock('tandem-conversation-routing-', async () => [
    '--engine', 'mocker', '--model', 'tiny', '--workers', '2', '--router-mode', 'kv',
    '--num-gpu-blocks', '128', '--kv-host-cache-gb', '0.25', '--speedup-ratio', '2',
  ]);

  it('chat: the second turn extends the first turn messages and goes back to its worker, all of turn 1 cached', async () => {
    const first = [{ role: 'system', content: words(1, 20) }, { role: 'user', content: words(2, 120) }];
    const t1 = await chat(up.url(), first);
    expect(t1.cached).toBe(0);
    await otherTraffic(up.url(), 3);
    const stop = await busier(up.url(), t1.instance, await otherWorker(up.url(), t1.instance), 10);
    let t2: Turn;
    try {
      t2 = await chat(up.url(), [...first, { role: 'assistant', content: t1.text }, { role: 'user', content: words(4, 20) }]);
    } finally {
      stop();
    }
    expect(t2.instance).toBe(t1.instance);
    // Every full block of turn 1's prompt (its leading 16-token blocks) came back from G2.
    expect(t2.cached).toBeGreaterThanOrEqual(Math.floor(t1.promptTokens / 16) * 16 - 16);
  });

  it('Responses: a previous_response_id chain goes back to the first response worker, its prompt cached', async () => {
    const r1 = await respond(up.url(), words(5, 150));
    expect(r1.cached).toBe(0);
    await otherTraffic(up.url(), 6);
    const stop = await busier(up.url(), r1.instance, await otherWorker(up.url(), r1.instance), 20);
    let r2: Turn;
    try {
      r2 = await respond(up.url(), words(7, 20), r1.id);
    } finally {
      stop();
    }
    expect(r2.instance).toBe(r1.instance);
    expect(r2.cached).toBeGreaterThanOrEqual(Math.floor(r1.promptTokens / 16) * 16 - 16);
  });
});
