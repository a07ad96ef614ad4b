import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HfTokenizer, TokenizerLoadError, loadTokenizer, type HfTokenizer as Tok } from '../../frontend/preprocess/index.js';
import { tinyModels } from './fixtures.js';

let models: Awaited<ReturnType<typeof tinyModels>>;
let qwen: Tok;
beforeAll(async () => {
  models = await tinyModels(['qwen2']);
  qwen = await loadTokenizer(models.dir('qwen2'));
});
afterAll(async () => models.cleanup());

describe('HfTokenizer', () => {
  it('exposes vocab size, special ids and eos from tokenizer_config', () => {
    expect(qwen.vocabSize).toBe(512);
    expect(qwen.eosToken).toBe('<|im_end|>');
    expect(qwen.bosToken).toBeUndefined();
    expect([509, 510, 511].every((id) => qwen.isSpecial(id))).toBe(true);
    expect(qwen.isSpecial(qwen.encode('the', { addSpecialTokens: false })[0]!)).toBe(false);
  });

  it('the byte table agrees with the library decoder for every complete token', () => {
    const table = qwen.tokenBytes!;
    expect(table.offsets).toHaveLength(qwen.vocabSize + 1);
    const utf8 = new TextDecoder('utf-8', { fatal: true });
    let checked = 0;
    for (let id = 0; id < qwen.vocabSize; id++) {
      const bytes = table.bytes.subarray(table.offsets[id]!, table.offsets[id + 1]!);
      let text: string;
      try {
        text = utf8.decode(bytes);
      } catch {
        continue; // a lone byte of a multi-byte character: no text on its own
      }
      expect(text, `token ${id}`).toBe(qwen.decode([id], { skipSpecialTokens: false }));
      checked++;
    }
    expect(checked).toBeGreaterThan(300);
  });

  it('decode of nothing is empty text, not an error', () => {
    expect(qwen.decode([])).toBe('');
  });

  it('missing or broken files are TokenizerLoadError (config_invalid)', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tandem-badtok-'));
    try {
      await expect(loadTokenizer(dir)).rejects.toBeInstanceOf(TokenizerLoadError);
      await writeFile(join(dir, 'tokenizer.json'), '{not json');
      await expect(loadTokenizer(dir)).rejects.toMatchObject({ code: 'config_invalid' });
      expect(() => HfTokenizer.fromJson({ version: '1.0' })).toThrow(TokenizerLoadError);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('accepts AddedToken-dict special tokens in tokenizer_config (older configs)', async () => {
    const json = JSON.parse(await readFile(join(models.dir('qwen2'), 'tokenizer.json'), 'utf8'));
    const t = HfTokenizer.fromJson(json, { eos_token: { __type: 'AddedToken', content: '<|im_end|>' } });
    expect(t.eosTokenId).toBe(511);
  });
});
