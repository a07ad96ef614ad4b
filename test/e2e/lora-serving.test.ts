/**
 * Multi-LoRA serving over a real `runtime up` fleet, through the `openai` SDK:
 * - native fleet (2 CPU workers, one adapter from --lora): /v1/models lists the adapter with
 *   `parent`; a request naming the adapter decodes differently from the base model and
 *   repeatably; POST /v1/load_lora_adapter (admin key only: --admin-api-key) adds one at run time; a
 *   corrupt adapter is refused with 400 and the fleet keeps serving.
 * - mocker fleet (steps take real time): unloading an adapter while its streams run lets them
 *   finish, and new requests for it get 404.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import OpenAI from 'openai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateText } from 'ai';
import { describe, expect, it } from 'vitest';
import { makeTinyModel, TINY_DIMS } from '../../workers/models/index.js';
import { makeTinyLora } from '../../workers/lora/index.js';
import { upForBlock } from './up.js';
import { chromiumPath, launchChromium } from '../dashboard/browser.js';

const KEY = 'sk-lora-test';
/** The load and unload routes take only the admin key (--admin-api-key). */
const ADMIN = 'sk-lora-admin';
const PROMPT = 'The quick brown fox jumps over the lazy dog and then';

async function fleetFiles(cacheDir: string): Promise<{ model: string; sql: string; chat: string; corrupt: string }> {
  const model = join(cacheDir, 'tiny-llama');
  await makeTinyModel({ arch: 'llama', outDir: model, dtype: 'f32', seed: 2 });
  const sql = await makeTinyLora({ dims: TINY_DIMS.llama, outDir: join(cacheDir, 'sql'), rank: 8, seed: 21 });
  const chat = await makeTinyLora({ dims: TINY_DIMS.llama, outDir: join(cacheDir, 'chat'), rank: 4, seed: 22, targets: ['q_proj', 'v_proj', 'down_proj'] });
  const corrupt = await makeTinyLora({ dims: TINY_DIMS.llama, outDir: join(cacheDir, 'corrupt'), rank: 4, seed: 23 });
  await writeFile(join(corrupt, 'adapter_model.safetensors'), 'this is not a safetensors file');
  return { model, sql, chat, corrupt };
}

async function post(url: string, path: string, body: object, key: string | null = ADMIN): Promise<{ status: number; text: string }> {
  const res = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key !== null ? { authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify(body),
  });
  return { status: res.status, text: await res.text() };
}

async function complete(client: OpenAI, model: string): Promise<string> {
  const r = await client.completions.create({ model, prompt: PROMPT, max_tokens: 12, temperature: 0 });
  return r.choices[0]!.text;
}

describe('LoRA serving: native fleet', () => {
  const files: { current?: Awaited<ReturnType<typeof fleetFiles>> } = {};
  const up = upForBlock('tandem-lora-native-', async (cacheDir) => {
    files.current = await fleetFiles(cacheDir);
    const f = files.current;
    return ['--engine', 'native', '--model', f.model, '--workers', '2', '--threads', '1', '--num-gpu-blocks', '256', '--lora', `sql=${f.sql}`, '--api-key', KEY, '--admin-api-key', ADMIN, '--log-level', 'warn'];
  });

  it('lists the adapter with its parent, and a request naming it decodes with it', async () => {
    const client = new OpenAI({ baseURL: `${up.url()}/v1`, apiKey: KEY });
    const models = (await client.models.list()).data as Array<{ id: string; parent?: string }>;
    expect(models.map((m) => m.id).sort()).toEqual(['sql', 'tiny-llama']);
    expect(models.find((m) => m.id === 'sql')!.parent).toBe('tiny-llama');
    expect(((await client.models.retrieve('sql')) as { parent?: string }).parent).toBe('tiny-llama');
    const base = await complete(client, 'tiny-llama');
    const sql = await complete(client, 'sql');
    expect(sql).not.toBe(base);
    expect(await complete(client, 'sql')).toBe(sql);
    expect(await complete(client, 'tiny-llama')).toBe(base);
    await expect(complete(client, 'nope')).rejects.toMatchObject({ status: 404 });
  });

  it('the ai SDK calls the adapter by name and gets what the openai SDK gets for the same request', async () => {
    const client = new OpenAI({ baseURL: `${up.url()}/v1`, apiKey: KEY });
    const sent: Array<Record<string, unknown>> = [];
    const provider = createOpenAICompatible({
      name: 'tandem',
      baseURL: `${up.url()}/v1`,
      apiKey: KEY,
      fetch: async (input, init) => {
        if (typeof init?.body === 'string') sent.push(JSON.parse(init.body) as Record<string, unknown>);
        return fetch(input, init);
      },
    });
    const r = await generateText({ model: provider.completionModel('sql'), prompt: PROMPT, maxOutputTokens: 12, temperature: 0 });
    expect(sent[0]).toMatchObject({ model: 'sql' });
    const same = await client.completions.create({ ...(sent[0] as object), stream: false } as OpenAI.CompletionCreateParamsNonStreaming);
    expect(r.text).toBe(same.choices[0]!.text);
    const base = await generateText({ model: provider.completionModel('tiny-llama'), prompt: PROMPT, maxOutputTokens: 12, temperature: 0 });
    expect(base.text).not.toBe(r.text);
  });

  it('load_lora_adapter needs the admin key, adds an adapter at run time; a corrupt one is refused and serving goes on', async () => {
    const f = files.current!;
    const client = new OpenAI({ baseURL: `${up.url()}/v1`, apiKey: KEY });
    expect((await post(up.url(), '/v1/load_lora_adapter', { lora_name: 'chat', lora_path: f.chat }, null)).status).toBe(401);
    expect((await post(up.url(), '/v1/load_lora_adapter', { lora_name: 'chat', lora_path: f.chat }, KEY)).status).toBe(401);
    const loaded = await post(up.url(), '/v1/load_lora_adapter', { lora_name: 'chat', lora_path: f.chat });
    expect(loaded).toMatchObject({ status: 200, text: expect.stringContaining("'chat'") });
    expect((await client.models.list()).data.map((m) => m.id)).toContain('chat');
    const chat = await complete(client, 'chat');
    expect(chat).not.toBe(await complete(client, 'sql'));
    expect(chat).not.toBe(await complete(client, 'tiny-llama'));
    const bad = await post(up.url(), '/v1/load_lora_adapter', { lora_name: 'broken', lora_path: f.corrupt });
    expect(bad.status).toBe(400);
    expect(bad.text).toMatch(/safetensors/);
    expect((await client.models.list()).data.map((m) => m.id)).not.toContain('broken');
    expect(await complete(client, 'chat')).toBe(chat);
    const dora = await makeTinyLora({ dims: TINY_DIMS.llama, outDir: join(f.chat, '..', 'dora'), rank: 4, extraConfig: { use_dora: true } });
    const refused = await post(up.url(), '/v1/load_lora_adapter', { lora_name: 'dora', lora_path: dora });
    expect(refused.status).toBe(400);
    expect(refused.text).toMatch(/DoRA/);
  });
});

describe('LoRA serving: unload under traffic (mocker fleet)', () => {
  const files: { current?: Awaited<ReturnType<typeof fleetFiles>> } = {};
  const up = upForBlock('tandem-lora-mocker-', async (cacheDir) => {
    files.current = await fleetFiles(cacheDir);
    const f = files.current;
    return ['--engine', 'mocker', '--model', f.model, '--workers', '2', '--lora', `sql=${f.sql}`, '--api-key', KEY, '--admin-api-key', ADMIN, '--log-level', 'warn'];
  });

  it.skipIf(chromiumPath() === undefined)('the dashboard (chromium) shows the adapters of each worker as they are loaded', async () => {
    const browser = await launchChromium();
    try {
      const page = await browser.newPage();
      await page.goto(`${up.url()}/dashboard?api_key=${KEY}`);
      const lorasOf = async (): Promise<string[]> => page.locator('[data-testid^="loras-"]').allTextContents();
      await expect.poll(lorasOf, { timeout: 15_000 }).toEqual(['sql', 'sql']);
      expect((await post(up.url(), '/v1/load_lora_adapter', { lora_name: 'extra', lora_path: files.current!.chat })).status).toBe(200);
      await expect.poll(lorasOf, { timeout: 15_000 }).toEqual(['extra, sql', 'extra, sql']);
      expect((await post(up.url(), '/v1/unload_lora_adapter', { lora_name: 'extra' })).status).toBe(200);
      await expect.poll(lorasOf, { timeout: 15_000 }).toEqual(['sql', 'sql']);
    } finally {
      await browser.close();
    }
  }, 60_000);

  it('running streams finish; new requests for the adapter get 404; loading while streams run cuts none', async () => {
    const f = files.current!;
    const client = new OpenAI({ baseURL: `${up.url()}/v1`, apiKey: KEY });
    const streams = await Promise.all(
      Array.from({ length: 4 }, () => client.completions.create({ model: 'sql', prompt: PROMPT, max_tokens: 600, stream: true, ignore_eos: true } as OpenAI.CompletionCreateParamsStreaming)),
    );
    let finished = 0;
    const collected = streams.map(async (s) => {
      let n = 0;
      let finish: string | null | undefined;
      for await (const chunk of s) {
        if (chunk.choices[0]?.text) n++;
        finish = chunk.choices[0]?.finish_reason ?? finish;
      }
      finished++;
      return { n, finish };
    });
    await new Promise((r) => setTimeout(r, 150));
    expect((await post(up.url(), '/v1/load_lora_adapter', { lora_name: 'chat', lora_path: f.chat })).status).toBe(200);
    expect((await post(up.url(), '/v1/unload_lora_adapter', { lora_name: 'sql' })).status).toBe(200);
    await expect(complete(client, 'sql')).rejects.toMatchObject({ status: 404 });
    // The streams were still running through the load and the unload (600 tokens: seconds of
    // mocker steps, so a load slowed by a busy machine still lands inside them).
    expect(finished).toBe(0);
    for (const r of await Promise.all(collected)) expect(r.finish).toBe('length');
    expect((await client.models.list()).data.map((m) => m.id).sort()).toEqual(['chat', 'tiny-llama']);
    expect((await post(up.url(), '/v1/unload_lora_adapter', { lora_name: 'sql' })).status).toBe(404);
    expect(typeof (await complete(client, 'chat'))).toBe('string');
  });
});
