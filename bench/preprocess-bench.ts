/**
 * Prompt tokenization inline (on the calling thread) versus on the PreprocessPool, per prompt
 * size, with the tiny qwen3 tokenizer and its ChatML template. Shows where a thread round trip
 * (structured clone in, transferred Uint32Array out) stops costing more than it saves, which is
 * what hf-codec.ts's DEFAULT_INLINE_MAX_CHARS is set from, and the pool's throughput with all
 * threads busy.
 * Run: node --import tsx bench/preprocess-bench.ts [--quick]
 * Prints a table and writes bench/results/preprocess.json.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PreprocessPool, defaultPreprocessThreads, loadPromptModel, tokenizePrompt, type PromptSpec } from '../frontend/preprocess/index.js';
import { makeTinyModel } from '../workers/models/index.js';

const QUICK = process.argv.includes('--quick');
const SENTENCE = 'The quick brown fox jumps over the lazy dog, and Grüße to the 🦊. ';

function chat(chars: number): PromptSpec {
  return { kind: 'chat', messages: [{ role: 'user', content: SENTENCE.repeat(Math.ceil(chars / SENTENCE.length)).slice(0, chars) }], addGenerationPrompt: true };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(os.tmpdir(), 'tandem-preprocess-bench-'));
  await makeTinyModel({ arch: 'qwen3', outDir: dir });
  const source = { tokenizerDir: dir, templateDir: dir };
  const model = await loadPromptModel(source);
  const threads = defaultPreprocessThreads();
  const pool = new PreprocessPool({ threads });
  // Start every thread and load the model in each.
  await Promise.all(Array.from({ length: threads }, () => pool.run(source, chat(64), Infinity)));

  const rows: Array<Record<string, number>> = [];
  const sizes = QUICK ? [256, 2048, 16_384, 262_144] : [64, 256, 1024, 2048, 4096, 16_384, 65_536, 262_144, 1_048_576];
  for (const chars of sizes) {
    const spec = chat(chars);
    const reps = Math.max(3, Math.min(200, Math.floor(2_000_000 / chars)));
    let tokens = 0;
    const inline: number[] = [];
    for (let i = 0; i < reps; i++) {
      const t0 = performance.now();
      const r = tokenizePrompt(model, spec, Infinity);
      inline.push(performance.now() - t0);
      if (r.type === 'tokens') tokens = r.ids.length;
    }
    const pooled: number[] = [];
    for (let i = 0; i < reps; i++) {
      const t0 = performance.now();
      await pool.run(source, spec, Infinity);
      pooled.push(performance.now() - t0);
    }
    // Throughput with every thread busy (the event loop only dispatches).
    const batch = threads * 4;
    const t0 = performance.now();
    await Promise.all(Array.from({ length: batch }, () => pool.run(source, spec, Infinity)));
    const poolSeconds = (performance.now() - t0) / 1000;
    const row = {
      chars,
      tokens,
      inline_ms: +median(inline).toFixed(3),
      pool_ms: +median(pooled).toFixed(3),
      inline_mtok_s: +(tokens / median(inline) / 1000).toFixed(2),
      pool_all_threads_mtok_s: +((tokens * batch) / poolSeconds / 1e6).toFixed(2),
    };
    rows.push(row);
  }
  await pool.close();
  rmSync(dir, { recursive: true, force: true });

  console.log(`threads ${threads}, cpus ${os.cpus().length}, node ${process.version}`);
  console.log('chars'.padStart(9), 'tokens'.padStart(8), 'inline ms'.padStart(10), 'pool ms'.padStart(9), 'inline Mtok/s'.padStart(14), 'pool(all) Mtok/s'.padStart(17));
  for (const r of rows) {
    console.log(
      String(r.chars).padStart(9),
      String(r.tokens).padStart(8),
      r.inline_ms!.toFixed(3).padStart(10),
      r.pool_ms!.toFixed(3).padStart(9),
      r.inline_mtok_s!.toFixed(2).padStart(14),
      r.pool_all_threads_mtok_s!.toFixed(2).padStart(17),
    );
  }
  const out = join(dirname(fileURLToPath(import.meta.url)), 'results', 'preprocess.json');
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, JSON.stringify({ date: new Date().toISOString(), cpus: os.cpus().length, threads, node: process.version, quick: QUICK, rows }, null, 2));
  console.log(`wrote ${out}`);
}

await main();
