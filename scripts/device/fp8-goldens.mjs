// On the GPU machine (run by fp8-check.sh from the unpacked bundle's directory): the engine on an
// FP8 checkpoint against fp8_goldens.py's reference (transformers on the checkpoint where it loads
// the format, else the dequantized model). Per case: greedy tokens equal, or diverging only where
// the reference's own top-1/top-2 margin is inside the FP8 margin (a tenth of the first logits'
// RMS: e4m3 activations move logits by a few percent); first-step logits' relative L2 reported,
// within 10% (the engine's stated W8A8 bound, native/tests/fp8_checks.h: two roundings of the
// activations to e4m3, ours and the reference's or none, differ by about that much).
//
//   node fp8-goldens.mjs MODEL_DIR REF.json [device] [kvCacheDtype]   prints one JSON line; exit 1 on a failure
import { readFileSync } from 'node:fs';
import { createNativeEngine } from './dist/workers/engines/native/index.js';

const [modelDir, refPath, device = 'cuda', kvCacheDtype = 'auto'] = process.argv.slice(2);
const ref = JSON.parse(readFileSync(refPath, 'utf8'));
const engine = await createNativeEngine({ modelDir, device, numBlocks: 64, blockSize: 16, maxBatchTokens: 256, maxSeqs: 4, kvCacheDtype });
const bound = 0.1;
const out = { model: modelDir.split('/').pop(), reference: ref.reference, device: engine.deviceDescription, kvCacheDtype, cases: [] };
let ok = true;
for (const c of ref.cases) {
  const prompt = c.prompt;
  const blocks = Int32Array.from({ length: 4 }, (_, i) => i);
  const seq = (tokens, startPos) => ({
    seqId: 0,
    tokenIds: Int32Array.from(tokens),
    startPos,
    blockTable: blocks,
    sample: true,
    sampling: { temperature: 0 },
    history: Int32Array.from(tokens),
    numPromptTokens: prompt.length,
    requestSeed: 0,
  });
  const first = await engine.step({ sequences: [seq(prompt, 0)], returnLogits: true });
  const logits = first.logits;
  let num = 0, den = 0;
  for (let i = 0; i < logits.length; i++) {
    num += (logits[i] - c.first_logits[i]) ** 2;
    den += c.first_logits[i] ** 2;
  }
  const relL2 = Math.sqrt(num / den);
  const rms = Math.sqrt(den / logits.length);
  const tokens = [first.sampled[0].tokenId];
  for (let i = 1; i < c.greedy.length; i++) {
    const r = await engine.step({ sequences: [seq([tokens[i - 1]], prompt.length + i - 1)] });
    tokens.push(r.sampled[0].tokenId);
  }
  let equal = 0;
  while (equal < tokens.length && tokens[equal] === c.greedy[equal]) equal++;
  const divergedAt = equal < tokens.length ? equal : null;
  const margin = divergedAt !== null ? c.margins[divergedAt] : null;
  const withinMargin = divergedAt === null || margin < 0.1 * rms;
  const pass = relL2 <= bound && withinMargin;
  ok = ok && pass;
  out.cases.push({ promptTokens: prompt.length, equal, of: tokens.length, divergedAt, referenceMargin: margin, fp8Margin: 0.1 * rms, relL2, pass });
}
await engine.close();
console.log(JSON.stringify(out));
process.exit(ok ? 0 : 1);
