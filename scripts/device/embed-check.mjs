// On the GPU machine (run by embedding-goldens.sh with the unpacked bundle as the working directory): the
// pooling step on cuda against the CPU backend on the same tiny embedding model. Prints one
// JSON line {device, maxAbsDiff per pooling, ms, abort}; exits 1 when a difference exceeds bf16
// rounding or an aborted call is not cancelled between its passes.
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

// The engine of the bundle (or checkout) this runs in: the working directory's dist/.
const { createNativeEngine } = await import(pathToFileURL(join(process.cwd(), 'dist/workers/engines/native/index.js')).href);

const [modelDir, device = 'cuda'] = process.argv.slice(2);
const inputs = [[1, 2, 3, 4, 5, 6, 7], [300], Array.from({ length: 40 }, (_, i) => (i * 37) % 512)];
const tokens = Int32Array.from(inputs.flat());
const lengths = Int32Array.from(inputs.map((i) => i.length));
const cpu = await createNativeEngine({ modelDir, device: 'cpu', numBlocks: 16, threads: 4 });
const gpu = await createNativeEngine({ modelDir, device, numBlocks: 16, maxBatchTokens: 256, maxSeqs: 8 });
const out = { device: gpu.model.device, maxAbsDiff: {}, ms: {} };
let ok = true;
for (const pooling of ['mean', 'last']) {
  const want = await cpu.embed(tokens, lengths, pooling, true);
  const t0 = performance.now();
  const got = await gpu.embed(tokens, lengths, pooling, true);
  out.ms[pooling] = Number((performance.now() - t0).toFixed(2));
  let m = 0;
  for (let i = 0; i < want.length; i++) m = Math.max(m, Math.abs(want[i] - got[i]));
  out.maxAbsDiff[pooling] = m;
  if (!(m < 2e-2)) ok = false;
}
// An abort stops a call between its forward passes (issue 34, 1.2): 400 inputs of 200 tokens,
// one per 256-token pass; the engine answers the next call as before.
const many = Array.from({ length: 400 }, (_, k) => Array.from({ length: 200 }, (_, i) => (i * 13 + k) % 512));
const stop = new AbortController();
const call = gpu.embed(Int32Array.from(many.flat()), Int32Array.from(many.map((m) => m.length)), 'mean', true, stop.signal);
setImmediate(() => stop.abort());
out.abort = await call.then(() => 'finished', (err) => err.code);
if (out.abort !== 'cancelled') ok = false;
const again = await gpu.embed(tokens, lengths, 'mean', true);
if (again.length !== lengths.length * gpu.model.hiddenSize) ok = false;
await cpu.close();
await gpu.close();
console.log(JSON.stringify(out));
process.exit(ok ? 0 : 1);
