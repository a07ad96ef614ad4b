/**
 * The frontend with its default codec (frontend/preprocess over a real tiny Hugging Face model
 * directory from `makeTinyModel`): the chat template reaches the worker as the right token ids,
 * streamed text decodes whole characters, and stop strings work on real BPE tokens.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadTokenizer, ChatTemplate, type HfTokenizer } from '../../frontend/preprocess/index.js';
import { makeTinyModel, type TinyModelInfo } from '../../workers/models/index.js';
import { startFrontend, type FrontendHandle } from '../../frontend/frontend.js';
import { FakeCluster } from './fakes.js';
import { parseSse, postRaw, waitFor } from './harness.js';

const ANSWER = 'Grüße 🦊! The fox says hello.';

describe('frontend with a real tiny model (qwen3, ChatML)', () => {
  let dir: string;
  let info: TinyModelInfo;
  let tokenizer: HfTokenizer;
  let cluster: FakeCluster;
  let frontend: FrontendHandle;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tandem-frontend-tiny-'));
    info = await makeTinyModel({ arch: 'qwen3', outDir: dir, dtype: 'f32' });
    tokenizer = await loadTokenizer(dir);
    cluster = new FakeCluster();
    await cluster.addWorker(
      { tokens: tokenizer.encode(ANSWER, { addSpecialTokens: false }), eos: info.eosTokenIds[0]! },
      { name: 'tiny', modelPath: dir, tokenizerSource: dir, chatTemplateSource: dir, eosTokenIds: info.eosTokenIds, contextLength: 2048 },
    );
    frontend = await startFrontend({ discovery: cluster.frontendDiscovery, connector: cluster, host: '127.0.0.1', httpPort: 0 });
    await waitFor(() => frontend.models.names().length === 1);
    await frontend.models.settled();
  });
  afterAll(async () => {
    await frontend?.close();
    await cluster?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('renders the chat template, tokenizes without doubling specials, and decodes the answer', async () => {
    const messages = [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'Hi there' },
    ];
    const res = await postRaw(`${frontend.url}/v1/chat/completions`, JSON.stringify({ model: 'tiny', messages }));
    expect(res.status).toBe(200);
    const body = JSON.parse(res.text);
    expect(body.choices[0].message.content).toBe(ANSWER);
    expect(body.choices[0].finish_reason).toBe('stop');
    const template = await ChatTemplate.load(dir);
    const expected = tokenizer.encode(template.render(messages, { addGenerationPrompt: true }), { addSpecialTokens: false });
    expect(cluster.allCalls()[0]!.request.tokenIds).toEqual(expected);
    expect(body.usage.prompt_tokens).toBe(expected.length);
    expect(cluster.allCalls()[0]!.request.stop.stopTokenIds).toEqual(expect.arrayContaining(info.eosTokenIds));
  });

  it('streams whole characters and trims at a stop string that spans BPE tokens', async () => {
    const res = await postRaw(`${frontend.url}/v1/completions`, JSON.stringify({ model: 'tiny', prompt: 'Say:', stream: true, stop: ['says'] }));
    const chunks = parseSse(res.text).slice(0, -1).map((f) => JSON.parse(f));
    const texts = chunks.map((c) => c.choices[0].text as string);
    expect(texts.join('')).toBe('Grüße 🦊! The fox ');
    for (const t of texts) expect(t).not.toContain('\uFFFD');
    expect(chunks.at(-1).choices[0].finish_reason).toBe('stop');
  });
});
