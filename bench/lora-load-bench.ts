/**
 * What reading one LoRA adapter costs a worker (issue 34): the reader before it (each weight
 * file read whole, the buffers concatenated, then hashed) against `readPeftAdapter` now
 * (fstat, headers checked against the model's shapes, the weights streamed through the hash in
 * 1 MiB chunks). Two 0.5B-shaped adapters on all seven linear layers: rank 16 in bf16 (17.6 MB,
 * the size docs/lora.md quotes) and rank 64 in f32 (141 MB). Each reader runs in a fresh child
 * process: five loads one after another (median wall time), then four at once (the child's peak
 * RSS over its RSS before them, from /proc/self/status VmHWM). Both readers read the same files,
 * so the page cache serves both alike after the first run.
 * Writes bench/results/lora-load.json and prints a table.
 *
 *   node --import tsx bench/lora-load-bench.ts [--quick]
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { xxh3Seeded } from '../router/index.js';
import { parseSafetensorsHeader } from '../workers/models/safetensors.js';
import { makeTinyLora, readPeftAdapter, type LoraModelDims } from '../workers/lora/index.js';

const DIMS_05B: LoraModelDims = { hiddenSize: 896, intermediateSize: 4864, numLayers: 24, numHeads: 14, numKvHeads: 2, headDim: 64 };
const SEQUENTIAL = 5;
const CONCURRENT = 4;
const READERS = ['whole-file', 'streamed'] as const;
type Reader = (typeof READERS)[number];

/** The reader as it was: every weight file in memory, concatenated, hashed in one call. */
async function readWholeFiles(dir: string): Promise<string> {
  JSON.parse(await readFile(join(dir, 'adapter_config.json'), 'utf8'));
  const files = (await readdir(dir)).filter((f) => f.endsWith('.safetensors')).sort();
  const chunks: Uint8Array[] = [];
  for (const f of files) {
    const bytes = await readFile(join(dir, f));
    parseSafetensorsHeader(bytes, bytes.length);
    chunks.push(bytes);
  }
  return xxh3Seeded(Buffer.concat(chunks)).toString(16);
}

const read = (reader: Reader, dir: string): Promise<unknown> => (reader === 'whole-file' ? readWholeFiles(dir) : readPeftAdapter(dir, { dims: DIMS_05B }));

function rssKb(field: 'VmRSS' | 'VmHWM'): number {
  return Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync('/proc/self/status', 'utf8'))![1]);
}

/** In a child: one reader, one adapter; prints {medianMs, peakOverBaseMb}. */
async function child(reader: Reader, dir: string): Promise<void> {
  await read(reader, dir); // warm: the page cache and the code
  const times: number[] = [];
  for (let i = 0; i < SEQUENTIAL; i++) {
    const t0 = performance.now();
    await read(reader, dir);
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  const base = rssKb('VmRSS');
  // Reset the high-water mark to now (Linux >= 4.0: write 5 to clear_refs).
  writeFileSync('/proc/self/clear_refs', '5');
  await Promise.all(Array.from({ length: CONCURRENT }, () => read(reader, dir)));
  const peak = rssKb('VmHWM');
  process.stdout.write(`${JSON.stringify({ medianMs: times[Math.floor(times.length / 2)], peakOverBaseMb: (peak - base) / 1024 })}\n`);
}

interface Row {
  adapter: string;
  megabytes: number;
  reader: Reader;
  medianMs: number;
  peakOverBaseMb: number;
}

async function main(): Promise<void> {
  const quick = process.argv.includes('--quick');
  const scratch = mkdtempSync(join(tmpdir(), 'tandem-lora-load-'));
  const load0 = loadavg()[0]!;
  try {
    const adapters = [
      { name: 'rank 16 bf16', dir: await makeTinyLora({ dims: DIMS_05B, outDir: join(scratch, 'r16'), rank: 16, dtype: 'bf16', seed: 1 }) },
      ...(quick ? [] : [{ name: 'rank 64 f32', dir: await makeTinyLora({ dims: DIMS_05B, outDir: join(scratch, 'r64'), rank: 64, dtype: 'f32', seed: 2 }) }]),
    ];
    const rows: Row[] = [];
    for (const a of adapters) {
      const megabytes = readFileSync(join(a.dir, 'adapter_model.safetensors')).length / 1e6;
      // Alternate the readers so both see the same drift of a shared machine.
      for (const reader of READERS) {
        const out = execFileSync(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url), '--child', reader, a.dir], { encoding: 'utf8' });
        rows.push({ adapter: a.name, megabytes, reader, ...(JSON.parse(out.trim().split('\n').pop()!) as { medianMs: number; peakOverBaseMb: number }) });
      }
    }
    const header = `| adapter | MB | reader | load (median of ${SEQUENTIAL}) | peak RSS over base, ${CONCURRENT} at once |`;
    const lines = [header, '|---|---|---|---|---|', ...rows.map((r) => `| ${r.adapter} | ${r.megabytes.toFixed(1)} | ${r.reader} | ${r.medianMs.toFixed(1)} ms | ${r.peakOverBaseMb.toFixed(0)} MB |`)];
    process.stdout.write(`${lines.join('\n')}\n(load average ${load0.toFixed(1)} at start)\n`);
    const results = join(dirname(fileURLToPath(import.meta.url)), 'results');
    mkdirSync(results, { recursive: true });
    writeFileSync(join(results, 'lora-load.json'), `${JSON.stringify({ date: new Date().toISOString(), loadAverage: load0, sequential: SEQUENTIAL, concurrent: CONCURRENT, rows }, null, 2)}\n`);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

const i = process.argv.indexOf('--child');
if (i >= 0) await child(process.argv[i + 1] as Reader, process.argv[i + 2]!);
else await main();
