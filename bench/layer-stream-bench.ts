/**
 * How much of a hand-off's copy layer-wise streaming hides (issue 24), on the host path: a
 * prefill-side child (test/disagg-workers/fixtures/layer-prefill.ts: the mocker spending its
 * modelled prefill layer by layer, writing each layer's KV and publishing the count in a UCX
 * progress slot) and this process as the decode side, for a 0.5B-shaped layout (24 layers,
 * 2 KV heads × 64, f32, 16-token blocks; 256 blocks = a 4k-token prompt = 96 MiB).
 *
 *   whole:     wait until the slot says all layers are written, then one whole-block pull
 *   streaming: streamLayers(): layer slices pulled as the slot reports them
 *
 * "exposed" is what the copy adds after the prefill's last layer (what TTFT would pay if the
 * decode side had to hold the KV before its first step), measured from the moment the decode
 * side's poll saw the last layer.
 *
 *   node --import tsx bench/layer-stream-bench.ts [--tls tcp|sm] [--layer-ms 10] [--blocks 256] [--repeats 3] [--out FILE]
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { streamLayers } from '../workers/disagg/layer-ready.js';
import { remoteLayerSource, type RemoteLayerProgress } from '../workers/disagg/layer-progress-region.js';
import { UcxTransferAgent, type KvTransferDescriptor } from '../workers/kv-transfer/index.js';
import { spawnTs } from '../test/harness/processes.js';

const HERE = dirname(fileURLToPath(import.meta.url));
const arg = (name: string, fallback: string): string => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1]! : fallback;
};
const TLS: Record<string, string> = { tcp: 'tcp', sm: 'sm,self' };
const tls = arg('tls', 'tcp');
const layerMs = Number(arg('layer-ms', '10'));
const numBlocks = Number(arg('blocks', '256'));
const repeats = Number(arg('repeats', '3'));
const out = arg('out', join(HERE, 'results', `layer-stream-${tls}.json`));
const NUM_LAYERS = 24;

interface Run {
  mode: 'whole' | 'streaming';
  exposedMs: number;
  copyMs: number;
  hiddenFraction: number;
  copies: number;
}

async function once(agent: UcxTransferAgent, mode: Run['mode']): Promise<Run> {
  const proc = spawnTs('test/disagg-workers/fixtures/layer-prefill.ts', [String(NUM_LAYERS), String(layerMs), '1', String(numBlocks), '2', '64'], { UCX_TLS: TLS[tls]! });
  try {
    const peer = JSON.parse(await proc.waitForLine(/^\{"kv"/, 30_000)) as { kv: KvTransferDescriptor; progress: RemoteLayerProgress; blockBytes: number; bytesPerLayer: number };
    const pool = agent.allocatePool({ numBlocks, blockBytes: peer.blockBytes, layout: peer.kv.layout });
    const into = Array.from({ length: numBlocks }, (_, i) => i);
    await agent.pull(peer.kv, pool, into); // connect and fault the pages in, outside the measurement
    const source = remoteLayerSource(agent, peer.progress, { intervalMs: 0.2 });
    try {
      proc.kill('SIGUSR1');
      if (mode === 'whole') {
        await source.whenBeyond(NUM_LAYERS - 1);
        const done = performance.now();
        await agent.pull(peer.kv, pool, into);
        const end = performance.now();
        return { mode, exposedMs: end - done, copyMs: end - done, hiddenFraction: 0, copies: 1 };
      }
      const r = await streamLayers({
        source,
        copy: async (range) => {
          await agent.pull(peer.kv, pool, into, { slice: { offset: range.first * peer.bytesPerLayer, bytes: (range.end - range.first) * peer.bytesPerLayer } });
        },
      });
      return { mode, exposedMs: r.report.exposedMs, copyMs: r.report.copyMs, hiddenFraction: r.report.hiddenFraction, copies: r.copies.length };
    } finally {
      source.close();
      agent.releasePool(pool);
    }
  } finally {
    proc.kill('SIGKILL');
    await proc.exited();
  }
}

const agent = UcxTransferAgent.create({ config: { TLS: TLS[tls]! } });
const runs: Run[] = [];
for (let i = 0; i < repeats; i++) for (const mode of ['whole', 'streaming'] as const) runs.push(await once(agent, mode));
agent.close();
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
const summary = (['whole', 'streaming'] as const).map((mode) => {
  const rs = runs.filter((r) => r.mode === mode);
  return { mode, exposedMs: mean(rs.map((r) => r.exposedMs)), copyMs: mean(rs.map((r) => r.copyMs)), hiddenFraction: mean(rs.map((r) => r.hiddenFraction)), copies: mean(rs.map((r) => r.copies)) };
});
for (const s of summary) console.log(`${s.mode.padEnd(9)} exposed ${s.exposedMs.toFixed(1)} ms  copy ${s.copyMs.toFixed(1)} ms  hidden ${(100 * s.hiddenFraction).toFixed(0)}%  copies ${s.copies.toFixed(1)}`);
mkdirSync(dirname(out), { recursive: true });
writeFileSync(
  out,
  `${JSON.stringify(
    {
      bench: 'layer-stream',
      layout: { numLayers: NUM_LAYERS, numKvHeads: 2, headDim: 64, dtype: 'f32', blockSize: 16, numBlocks, bytes: numBlocks * NUM_LAYERS * 2 * 16 * 128 * 4 },
      transport: tls,
      modelledPrefillMs: layerMs * NUM_LAYERS,
      machine: { cpus: cpus().length, cpu: cpus()[0]?.model, loadavg: loadavg() },
      summary,
      runs,
    },
    null,
    2,
  )}\n`,
);
console.log(`wrote ${out}`);
