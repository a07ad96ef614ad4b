/**
 * PreprocessPool: the same ids as inline tokenization, typed errors across the thread boundary,
 * a bounded queue, cancellation while queued, close(), and threads that never keep a process
 * alive.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadPromptModel, PreprocessPool, tokenizePrompt, type PromptModel, type PromptSource } from '../../frontend/preprocess/index.js';
import { spawnTs } from '../harness/processes.js';
import { tinyModels } from './fixtures.js';

let models: Awaited<ReturnType<typeof tinyModels>>;
let source: PromptSource;
let inline: PromptModel;
const pools: PreprocessPool[] = [];
const newPool = (options: ConstructorParameters<typeof PreprocessPool>[0]) => {
  const pool = new PreprocessPool(options);
  pools.push(pool);
  return pool;
};

beforeAll(async () => {
  models = await tinyModels(['qwen3']);
  source = { tokenizerDir: models.dir('qwen3'), templateDir: models.dir('qwen3') };
  inline = await loadPromptModel(source);
});
afterAll(async () => {
  await Promise.all(pools.map((p) => p.close()));
  await models.cleanup();
});

const conversation = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Grüße 🦊, how are you? '.repeat(50) },
];

describe('PreprocessPool', () => {
  it('returns the same ids as inline tokenization, as a transferred Uint32Array', async () => {
    const pool = newPool({ threads: 2 });
    const chat = await pool.run(source, { kind: 'chat', messages: conversation, addGenerationPrompt: true }, 100_000);
    const text = await pool.run(source, { kind: 'text', text: 'Say: the quick brown fox', addSpecialTokens: true }, 100_000);
    expect(chat.type).toBe('tokens');
    if (chat.type !== 'tokens' || text.type !== 'tokens') throw new Error('expected tokens');
    expect(chat.ids).toBeInstanceOf(Uint32Array);
    expect(Array.from(chat.ids)).toEqual(Array.from((tokenizePrompt(inline, { kind: 'chat', messages: conversation, addGenerationPrompt: true }, 100_000) as { ids: Uint32Array }).ids));
    expect(Array.from(text.ids)).toEqual(inline.tokenizer.encode('Say: the quick brown fox', { addSpecialTokens: true }));
  });

  it('answers too_long from the byte bound, and template errors keep their type and code (a 400 upstream)', async () => {
    const pool = newPool({ threads: 1 });
    expect(await pool.run(source, { kind: 'text', text: 'a'.repeat(13_000), addSpecialTokens: false }, 999)).toEqual({ type: 'too_long', minTokens: 1000 });
    const bad = pool.run(source, { kind: 'chat', messages: [{ role: 'user', content: [{ type: 'image_url' }] }], addGenerationPrompt: true }, 1000);
    await expect(bad).rejects.toMatchObject({ name: 'ChatTemplateError', code: 'invalid_argument' });
    const missing = pool.run({ tokenizerDir: source.tokenizerDir, templateDir: '/nonexistent' }, { kind: 'chat', messages: conversation, addGenerationPrompt: true }, 1000);
    await expect(missing).rejects.toMatchObject({ name: 'ChatTemplateMissingError', code: 'invalid_argument' });
    // The thread survives errors.
    expect((await pool.run(source, { kind: 'text', text: 'hi', addSpecialTokens: false }, 10)).type).toBe('tokens');
  });

  it('bounds its queue (resource_exhausted), drops a queued job whose request is cancelled, and close() fails the rest', async () => {
    const pool = newPool({ threads: 1, maxQueued: 1 });
    const slow = pool.run(source, { kind: 'text', text: 'the quick brown fox '.repeat(20_000), addSpecialTokens: false }, 1e9);
    const controller = new AbortController();
    const queued = pool.run(source, { kind: 'text', text: 'queued', addSpecialTokens: false }, 1e9, controller.signal);
    await expect(pool.run(source, { kind: 'text', text: 'one too many', addSpecialTokens: false }, 1e9)).rejects.toMatchObject({ code: 'resource_exhausted' });
    expect(pool.stats).toEqual({ started: 1, busy: 1, queued: 1 });
    controller.abort();
    await expect(queued).rejects.toMatchObject({ code: 'cancelled' });
    expect(pool.stats.queued).toBe(0);
    const waiting = pool.run(source, { kind: 'text', text: 'waiting', addSpecialTokens: false }, 1e9);
    const failed = Promise.all([expect(slow).rejects.toMatchObject({ code: 'unavailable' }), expect(waiting).rejects.toMatchObject({ code: 'unavailable' })]);
    await pool.close();
    await failed;
    expect(pool.stats.started).toBe(0);
    await expect(pool.run(source, { kind: 'text', text: 'late', addSpecialTokens: false }, 1e9)).rejects.toMatchObject({ code: 'unavailable' });
  });

  it('its threads do not keep a process alive: a script that never closes the pool still exits', async () => {
    const proc = spawnTs('test/preprocess/pool-exit.fixture.ts', [models.dir('qwen3')]);
    const exit = await Promise.race([proc.exited(), new Promise<'hung'>((r) => setTimeout(() => r('hung'), 30_000))]);
    if (exit === 'hung') proc.kill('SIGKILL');
    expect(exit, proc.output()).toEqual({ code: 0, signal: null });
    expect(proc.output()).toMatch(/^tokens [1-9]\d*$/m);
  });
});
