// Speculative decoding on a GPU through the whole stack (scripts/device/spec-check.sh, step
// `serve`): a frontend and two native workers on one device over the same model, one plain and
// one with --speculative, each under its own model name. The same greedy requests (plain
// completions, a JSON schema, a regex, stop strings, short max_tokens, penalties with
// logit_bias, a seeded sampled one) sent to both at once must return the same token ids, and
// the speculating worker's vLLM-named counters must show accepted drafts. Writes a JSON report.
//
//   node scripts/device/spec-serve.mjs --device cuda|simt --model DIR --method ngram|suffix --out FILE
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const { values: args } = parseArgs({
  options: {
    device: { type: 'string', default: 'cuda' },
    model: { type: 'string' },
    method: { type: 'string', default: 'suffix' },
    out: { type: 'string', default: 'spec-serve.json' },
    'kv-cache-memory': { type: 'string', default: '2147483648' },
  },
});
const dir = mkdtempSync(join(tmpdir(), 'tandem-spec-serve-'));
const common = ['--discovery', 'file', '--discovery-dir', join(dir, 'discovery'), '--event-plane', 'direct', '--log-level', 'info'];
const children = [];

function start(args, ready) {
  const child = spawn(process.execPath, ['bin/runtime.js', ...args], { env: { ...process.env, TANDEM_LOG_FORMAT: 'json' }, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let out = '';
  return new Promise((resolve, reject) => {
    const onData = (b) => {
      out += b.toString();
      const m = ready.exec(out);
      if (m) resolve({ child, match: m, output: () => out });
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('exit', (code) => reject(new Error(`${args[0]} exited ${code}: ${out.slice(-2000)}`)));
  });
}

const stopAll = () => Promise.all(children.map((c) => new Promise((r) => (c.exitCode !== null ? r() : (c.once('exit', r), c.kill('SIGTERM'))))));

try {
  const front = await start(['frontend', ...common, '--http-port', '0'], /frontend listening on (http:\/\/\S+)/);
  const url = front.match[1];
  const worker = async (name, extra) => {
    const w = await start(
      ['worker', ...common, '--engine', 'native', '--device', args.device, '--model', args.model, '--model-name', name, '--kv-cache-memory', args['kv-cache-memory'], '--max-num-seqs', '32', '--status-port', '0', ...extra],
      /"msg":"status server listening"[^\n]*\n(?:[^\n]*\n)*?[^\n]*"msg":"worker ready"/,
    );
    return JSON.parse(/\{[^\n]*"msg":"status server listening"[^\n]*\}/.exec(w.output())[0]).url;
  };
  await worker('plain', []);
  const statusUrl = await worker('spec', ['--speculative', args.method]);
  for (let i = 0; i < 300; i++) {
    const body = await (await fetch(`${url}/v1/models`)).json().catch(() => ({ data: [] }));
    if (['plain', 'spec'].every((m) => body.data?.some((d) => d.id === m))) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  const complete = async (model, body) => {
    const res = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model, logprobs: 0, return_tokens_as_token_ids: true, ...body }) });
    const j = await res.json();
    if (res.status !== 200) throw new Error(`${model}: ${res.status} ${JSON.stringify(j)}`);
    return { ids: j.choices[0].logprobs.tokens.map((t) => Number(t.replace('token_id:', ''))), finish: j.choices[0].finish_reason };
  };
  // Ids under 500: the tiny tokenizer (which a random model of a real shape borrows) has 512.
  const prompt = Array.from({ length: 200 }, (_, i) => (i * 7919 + 13) % 500);
  const cases = [
    ['greedy 128', { prompt, max_tokens: 128, temperature: 0, ignore_eos: true }],
    ['greedy repeated prompt', { prompt: [...prompt.slice(0, 80), ...prompt.slice(0, 80)], max_tokens: 96, temperature: 0, ignore_eos: true }],
    ['max_tokens 3', { prompt, max_tokens: 3, temperature: 0, ignore_eos: true }],
    ['penalties and logit_bias', { prompt, max_tokens: 64, temperature: 0, ignore_eos: true, presence_penalty: 0.5, repetition_penalty: 1.2, logit_bias: { 17: 4, 23: -100 } }],
    ['seeded sampling', { prompt, max_tokens: 64, temperature: 0.9, top_k: 50, seed: 77, ignore_eos: true }],
    ['json schema', { prompt, max_tokens: 96, temperature: 0, structured_outputs: { json: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'string', maxLength: 12 } }, required: ['a', 'b'] } } }],
    ['regex', { prompt, max_tokens: 48, temperature: 0, structured_outputs: { regex: '(ab|cd){2,9}[0-9]{3}' } }],
  ];
  const results = [];
  let failures = 0;
  const runs = await Promise.all(cases.flatMap(([, body]) => [complete('plain', body), complete('spec', body)]));
  cases.forEach(([name], i) => {
    const [a, b] = [runs[2 * i], runs[2 * i + 1]];
    const same = JSON.stringify(a) === JSON.stringify(b);
    if (!same) failures++;
    results.push({ case: name, same, plainTokens: a.ids.length, specTokens: b.ids.length, ...(same ? {} : { plain: a, spec: b }) });
    console.log(`${same ? 'ok  ' : 'FAIL'} ${name}: ${a.ids.length} tokens`);
  });
  const metrics = await (await fetch(`${statusUrl}/metrics`)).text();
  const value = (name) => Number(new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, 'm').exec(metrics)?.[1] ?? NaN);
  const counters = { drafts: value('vllm:spec_decode_num_drafts_total'), draftTokens: value('vllm:spec_decode_num_draft_tokens_total'), acceptedTokens: value('vllm:spec_decode_num_accepted_tokens_total') };
  console.log(`spec counters: ${JSON.stringify(counters)}`);
  if (!(counters.acceptedTokens > 0)) failures++;
  writeFileSync(args.out, `${JSON.stringify({ device: args.device, model: args.model, method: args.method, results, counters, failures }, null, 2)}\n`);
  await stopAll();
  process.exit(failures === 0 ? 0 : 1);
} catch (err) {
  console.error(err);
  await stopAll();
  process.exit(1);
}
