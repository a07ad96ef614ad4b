/**
 * The mocker sized by --kv-cache-memory charges what the native engine on a GPU would: a block of
 * the model's shape in bf16, or in e4m3 with --kv-cache-dtype fp8, which holds twice the blocks
 * (the capacity the model card's totalKvBlocks carries to the router and the planner).
 */
import { describe, expect, it } from 'vitest';
import { mockerNumBlocks } from '../../workers/process/worker-engine.js';
import { kvBytesPerToken, parseModelConfig } from '../../workers/models/index.js';
import { ConfigError } from '../../runtime/errors.js';

// Llama-3.1-8B's KV shape: 32 layers x 8 KV heads x head_dim 128.
const config = parseModelConfig({
  model_type: 'llama',
  vocab_size: 128256,
  hidden_size: 4096,
  intermediate_size: 14336,
  num_hidden_layers: 32,
  num_attention_heads: 32,
  num_key_value_heads: 8,
  max_position_embeddings: 131072,
});

describe('mocker KV capacity', () => {
  it('8B shape, 16-token blocks in 1 GiB: 2 x 32 x 8 x 128 x 2 B = 128 KiB per bf16 token -> 512 blocks; e4m3 64 KiB -> 1024', () => {
    expect(kvBytesPerToken(config, 2)).toBe(131072);
    const gib = 1 << 30;
    expect(mockerNumBlocks({ kvCacheMemoryBytes: gib, blockSize: 16, kvCacheDtype: 'auto' }, config)).toBe(512);
    expect(mockerNumBlocks({ kvCacheMemoryBytes: gib, blockSize: 16, kvCacheDtype: 'bf16' }, config)).toBe(512);
    expect(mockerNumBlocks({ kvCacheMemoryBytes: gib, blockSize: 16, kvCacheDtype: 'fp8' }, config)).toBe(1024);
  });

  it('--num-gpu-blocks wins; neither flag keeps the 16384 default', () => {
    expect(mockerNumBlocks({ numGpuBlocks: 7, kvCacheMemoryBytes: 1 << 30, blockSize: 16, kvCacheDtype: 'fp8' }, config)).toBe(7);
    expect(mockerNumBlocks({ blockSize: 16, kvCacheDtype: 'fp8' }, config)).toBe(16384);
  });

  it('a budget smaller than one block is a configuration error', () => {
    expect(() => mockerNumBlocks({ kvCacheMemoryBytes: 1000, blockSize: 16, kvCacheDtype: 'fp8' }, config)).toThrow(ConfigError);
  });
});
