/**
 * The native engine on any model directory against a golden fixture made from that directory
 * by make_goldens.py (the PyTorch reference): the first-step logits within --tolerance and the
 * greedy continuation token for token, case by case. The goldens test does the same for the
 * make-tiny fixtures; this is the check for a real checkpoint (docs/real-model.md).
 *
 *   node --import tsx scripts/goldens/check-model.ts --model DIR --golden FILE.json
 *        [--tolerance 1e-3] [--threads N] [--device cpu]
 *
 * Prints one line per case and exits 0 when every case matches, 1 otherwise.
 */
import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { StepSequence } from '../../workers/engines/engine.js';
import { createNativeEngine } from '../../workers/engines/native/index.js';

interface GoldenCase {
  prompt: number[];
  greedy: number[];
  first_logits: number[];
  min_greedy_margin?: number;
}

const { values } = parseArgs({
  options: {
    model: { type: 'string' },
    golden: { type: 'string' },
    tolerance: { type: 'string', default: '1e-3' },
    threads: { type: 'string' },
    device: { type: 'string', default: 'cpu' },
  },
});
if (values.model === undefined || values.golden === undefined) {
  console.error('usage: check-model.ts --model DIR --golden FILE.json [--tolerance 1e-3] [--threads N] [--device cpu]');
  process.exit(2);
}
const tolerance = Number(values.tolerance);
const golden = JSON.parse(await readFile(values.golden, 'utf8')) as { weights_sha256?: string; vocab_size: number; cases: GoldenCase[] };

// The fixture names the weights it was made from: comparing against other weights proves nothing.
const hash = createHash('sha256');
for (const name of (await readdir(values.model)).filter((n) => n.endsWith('.safetensors')).sort()) hash.update(await readFile(join(values.model, name)));
if (golden.weights_sha256 !== undefined && hash.digest('hex') !== golden.weights_sha256) {
  console.error(`${values.golden} was made from other weights than ${values.model} (weights_sha256 differs)`);
  process.exit(1);
}

const longest = Math.max(...golden.cases.map((c) => c.prompt.length + c.greedy.length));
const blockSize = 16;
const numBlocks = Math.ceil(longest / blockSize) + 1;
const engine = await createNativeEngine({
  modelDir: values.model,
  numBlocks,
  blockSize,
  device: values.device,
  ...(values.threads !== undefined ? { threads: Number(values.threads) } : {}),
});
const table = Int32Array.from({ length: numBlocks }, (_, i) => i);
const step = (tokens: number[], startPos: number): StepSequence => ({
  seqId: 0,
  tokenIds: Int32Array.from(tokens),
  startPos,
  blockTable: table,
  sample: true,
  sampling: { temperature: 0 },
  history: tokens,
  numPromptTokens: tokens.length,
  requestSeed: 0,
});

let failed = 0;
try {
  if (engine.info.vocabSize !== golden.vocab_size) throw new Error(`vocab ${engine.info.vocabSize} != the fixture's ${golden.vocab_size}`);
  for (const [i, c] of golden.cases.entries()) {
    const first = await engine.stepWithLogits({ sequences: [step(c.prompt, 0)] });
    let diff = 0;
    for (let k = 0; k < c.first_logits.length; k++) diff = Math.max(diff, Math.abs(first.logits[k]! - c.first_logits[k]!));
    const got = [first.sampled[0]!.tokenId];
    while (got.length < c.greedy.length) {
      const r = await engine.step({ sequences: [step([got[got.length - 1]!], c.prompt.length + got.length - 1)] });
      got.push(r.sampled[0]!.tokenId);
    }
    const firstMismatch = got.findIndex((t, k) => t !== c.greedy[k]);
    const ok = diff < tolerance && firstMismatch < 0;
    if (!ok) failed++;
    console.log(
      `case ${i} (prompt ${c.prompt.length} tokens): max |Δ logit| ${diff.toExponential(2)} (tolerance ${tolerance}), ` +
        (firstMismatch < 0 ? `${got.length} greedy tokens identical` : `greedy differs from token ${firstMismatch} (${got[firstMismatch]} vs ${c.greedy[firstMismatch]})`) +
        (ok ? '' : '  FAIL'),
    );
  }
} finally {
  await engine.close();
}
console.log(failed === 0 ? 'all cases match' : `${failed} of ${golden.cases.length} cases differ`);
process.exitCode = failed === 0 ? 0 : 1;
