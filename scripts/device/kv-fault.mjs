// kill -9 of a prefill worker in the middle of a KV hand-off between device pools, on the GPU
// machine (scripts/device/kv-fault-check.sh runs it from the unpacked bundle; on simt it is a
// dry run of the same flow). One prefill and one decode worker on one device with
// --kv-layer-streaming, so the decode worker copies layer ranges over the IPC mapping while the
// prefill still computes: the prefill is killed as soon as the decode worker logs that its
// layer prefetch started. Then:
//   - the request still completes (the frontend falls back; the decode worker recomputes);
//   - the decode worker leaks nothing: no active blocks, no streaming staging blocks, no
//     transfer in flight;
//   - the decode worker still works (its device context survived reading a dead peer's pool):
//     the same prompt again, now aggregated on it, gives the same greedy tokens.
// Writes a JSON report; exits 1 when a check fails.
//
//   node scripts/device/kv-fault.mjs --device cuda --model DIR --prompt-tokens 16384 --out OUT.json
import { readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { startFleet } from '../../dist/bench/fleet/index.js';
import { metricSum, scrapeMetrics } from '../../dist/bench/disagg-common.js';

const { values: args } = parseArgs({
  options: {
    device: { type: 'string', default: 'cuda' },
    model: { type: 'string', default: 'tiny' },
    'prompt-tokens': { type: 'string', default: '16384' },
    'kv-cache-memory': { type: 'string', default: String(8 << 30) },
    out: { type: 'string', default: 'kv-fault.json' },
  },
});
const promptTokens = Number(args['prompt-tokens']);
const report = { device: args.device, model: args.model, promptTokens, checks: {} };
const check = (name, ok, detail) => {
  report.checks[name] = { ok, ...(detail !== undefined ? { detail } : {}) };
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${name}${detail !== undefined ? `: ${JSON.stringify(detail)}` : ''}`);
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function complete(url, model, prompt) {
  const r = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, prompt, max_tokens: 8, temperature: 0, ignore_eos: true, logprobs: 0, return_tokens_as_token_ids: true }),
  });
  const body = await r.json();
  if (!r.ok) throw new Error(`HTTP ${r.status}: ${JSON.stringify(body).slice(0, 300)}`);
  // Token ids, not text: a random model's ids past its tokenizer's vocabulary decode to nothing.
  return { tokens: body.choices[0].logprobs.tokens.map((t) => Number(t.slice('token_id:'.length))), headers: Object.fromEntries(r.headers) };
}

async function waitUntil(what, fn, ms) {
  const deadline = Date.now() + ms;
  let last;
  while (Date.now() < deadline) {
    last = await fn();
    if (last === true) return true;
    await sleep(50);
  }
  return last;
}

const fleet = await startFleet({
  mode: 'disagg',
  prefill: 1,
  decode: 1,
  engine: 'native',
  model: args.model,
  maxNumBatchedTokens: Math.max(512, promptTokens),
  maxNumSeqs: 8,
  extraWorkerArgs: ['--device', args.device, '--kv-layer-streaming', '--kv-cache-memory', args['kv-cache-memory'], '--kv-release-timeout', '5', '--kv-pull-timeout', '3'],
  extraFrontendArgs: ['--kv-layer-streaming', '--disagg-min-prefill-tokens', '1'],
  keepLogs: true,
  startTimeoutMs: 180_000,
});
let failed = false;
try {
  const prefill = fleet.workers.find((w) => w.role === 'prefill');
  const decode = fleet.workers.find((w) => w.role === 'decode');
  const vocab = Number(JSON.parse(readFileSync(`${fleet.modelDir}/config.json`, 'utf8')).vocab_size);
  let s = 7;
  const prompt = Array.from({ length: promptTokens }, () => 3 + ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) % (vocab - 3)));
  const logLength = readFileSync(decode.logFile, 'utf8').length;
  const answer = complete(fleet.url, fleet.model, prompt);
  answer.catch(() => undefined);
  // Kill as soon as the decode worker started copying layers (it logs before the first copy).
  const started = await waitUntil('prefetch', () => readFileSync(decode.logFile, 'utf8').slice(logLength).includes('KV layer prefetch started'), 120_000);
  process.kill(prefill.pid, 'SIGKILL');
  const decodeLog = () => readFileSync(decode.logFile, 'utf8').slice(logLength);
  check('layer prefetch started before the kill', started === true);
  await sleep(200);
  const streamedWhole = decodeLog().includes('KV streamed layer by layer');
  check('the kill landed mid-copy (the stream had not finished)', !streamedWhole);
  let first;
  try {
    first = await answer;
    check('the request completed after the kill', first.tokens.length === 8, { tokens: first.tokens, prefillWorker: first.headers['x-prefill-worker-id'] ?? null });
  } catch (err) {
    check('the request completed after the kill', false, String(err));
  }
  const leaks = async () => {
    const m = await scrapeMetrics(decode.statusUrl);
    const v = {
      activeBlocks: metricSum(m, 'tandem_worker_kv_active_blocks'),
      stagingBlocks: metricSum(m, 'tandem_worker_kv_stream_staging_blocks'),
      inflight: metricSum(m, 'tandem_worker_kv_transfers_inflight'),
    };
    return v.activeBlocks === 0 && v.stagingBlocks === 0 && v.inflight === 0 ? true : v;
  };
  const leak = await waitUntil('no leaks', leaks, 15_000);
  check('the decode worker holds no blocks, staging or transfers afterwards', leak === true, leak === true ? undefined : leak);
  try {
    const again = await complete(fleet.url, fleet.model, prompt);
    check('the decode worker still serves (aggregated now): same greedy tokens', first !== undefined && JSON.stringify(again.tokens) === JSON.stringify(first.tokens), { again: again.tokens });
  } catch (err) {
    check('the decode worker still serves (aggregated now): same greedy tokens', false, String(err));
  }
  report.decodeLog = decodeLog()
    .split('\n')
    .filter((l) => /KV layer|KV import|KV streamed|KV adopted|error/i.test(l))
    .slice(0, 20);
} catch (err) {
  check('the fault scenario ran', false, String(err?.stack ?? err));
} finally {
  failed = Object.values(report.checks).some((c) => !c.ok);
  writeFileSync(args.out, `${JSON.stringify(report, null, 2)}\n`);
  await fleet.stop();
}
process.exit(failed ? 1 : 0);
