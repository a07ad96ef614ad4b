// On the GPU machine (run by fp8-check.sh; dist/ two levels up, in the bundle as in the repo):
// the engine on an FP8 checkpoint against fp8_goldens.py's reference (transformers on the
// checkpoint where it loads the format, else the dequantized model). Per case: greedy tokens
// equal, or diverging only where the reference's own top-1/top-2 gap is inside the FP8 margin
// (three standard deviations of a gap, from the case's measured logit error per entry);
// first-step logits' relative L2 reported, within the stated W8A8 bound below.
//
//   node fp8-goldens.mjs MODEL_DIR REF.json [device] [kvCacheDtype]   prints one JSON line; exit 1 on a failure
import { readFileSync } from 'node:fs';
import { createNativeEngine } from '../../dist/workers/engines/native/index.js';

const [modelDir, refPath, device = 'cuda', kvCacheDtype = 'auto'] = process.argv.slice(2);
const ref = JSON.parse(readFileSync(refPath, 'utf8'));
const engine = await createNativeEngine({ modelDir, device, numBlocks: 64, blockSize: 16, maxBatchTokens: 256, maxSeqs: 4, kvCacheDtype });
// W8A8 against an unquantized-activation reference, first logits' rel L2: the bound of
// test/native/fp8-engine.test.ts (measured 0.11-0.14 on make-tiny's random qwen3; real models
// land far lower). Against transformers' own FP8 path both sides quantize, and it is reported.
const bound = 0.2;
const out = { model: modelDir.split('/').pop(), reference: ref.reference, device: engine.deviceDescription, kvCacheDtype, cases: [] };
let ok = true;
for (const c of ref.cases) {
  const prompt = c.prompt;
  const blocks = Int32Array.from({ length: 4 }, (_, i) => i);
  const seq = (tokens, startPos, history = tokens) => ({
    seqId: 0,
    tokenIds: Int32Array.from(tokens),
    startPos,
    blockTable: blocks,
    sample: true,
    sampling: { temperature: 0 },
    history: Int32Array.from(history),
    numPromptTokens: prompt.length,
    requestSeed: 0,
  });
  const first = await engine.stepWithLogits({ sequences: [seq(prompt, 0)] });
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
    const r = await engine.step({ sequences: [seq([tokens[i - 1]], prompt.length + i - 1, [...prompt, ...tokens])] });
    tokens.push(r.sampled[0].tokenId);
  }
  let equal = 0;
  while (equal < tokens.length && tokens[equal] === c.greedy[equal]) equal++;
  const divergedAt = equal < tokens.length ? equal : null;
  const margin = divergedAt !== null ? c.margins[divergedAt] : null;
  // Where greedy may flip: the reference's top-1/top-2 gap under three standard deviations of a
  // difference of two logits, each off by this case's measured error per entry (relL2 x RMS).
  const fp8Margin = 3 * Math.SQRT2 * relL2 * rms;
  const withinMargin = divergedAt === null || margin < fp8Margin;
  const pass = relL2 <= bound && withinMargin;
  ok = ok && pass;
  out.cases.push({ promptTokens: prompt.length, equal, of: tokens.length, divergedAt, referenceMargin: margin, fp8Margin, relL2, pass });
}
await engine.close();
console.log(JSON.stringify(out));
process.exit(ok ? 0 : 1);
