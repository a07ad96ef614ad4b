// Serving checks against a running `runtime up` (scripts/device/cuda-check.sh starts it with
// --device cuda): one completion, one json_schema answer, then every schema of the corpus
// (schema-corpus.json, written by pack.sh from test/grammar/schema-corpus.ts) and the regex and
// choice cases of test/e2e/structured-validity.test.ts. An answer must parse, validate under
// ajv (+ formats) and finish "stop". Last, a LoRA load is refused with 400 (CUDA workers say
// supportsLora: false on their cards). Writes a JSON report; exits 1 on any failure.
//
//   node scripts/device/serve-check.mjs http://127.0.0.1:PORT OUT.json
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Ajv from 'ajv';
import addFormats from 'ajv-formats';

const [base, outPath] = process.argv.slice(2);
const here = dirname(fileURLToPath(import.meta.url));
// pack.sh writes the corpus beside this script; a dry run in place names one it made (cuda-check.sh).
const corpus = JSON.parse(readFileSync(process.env.TANDEM_SCHEMA_CORPUS ?? join(here, 'schema-corpus.json'), 'utf8'));
const MODEL = 'tiny-llama';
const REGEX = ['[0-9]{3}-[0-9]{4}', '(yes|no|maybe)', '[a-z]+@[a-z]+\\.(com|org)', 'v[0-9]+\\.[0-9]+\\.[0-9]+'];
const CHOICE = [['positive', 'negative', 'neutral'], ['red', 'green', 'blue', 'light green']];

async function post(path, body) {
  const r = await fetch(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const json = await r.json();
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}: ${JSON.stringify(json).slice(0, 300)}`);
  return json;
}

async function chat(i, extra) {
  const r = await post('/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: `case ${i}` }], max_tokens: 256, temperature: 0.8, seed: 1000 + i, ...extra });
  return { content: r.choices[0].message.content ?? '', finish: r.choices[0].finish_reason };
}

async function pool(jobs, n) {
  const out = new Array(jobs.length);
  let next = 0;
  await Promise.all(Array.from({ length: n }, async () => {
    while (next < jobs.length) {
      const i = next++;
      try {
        out[i] = await jobs[i]();
      } catch (err) {
        out[i] = { error: String(err) };
      }
    }
  }));
  return out;
}

const report = { base, failures: [] };
const t0 = performance.now();
const completion = await post('/v1/completions', { model: MODEL, prompt: 'The GPU says', max_tokens: 24, temperature: 0, ignore_eos: true });
report.completion = { text: completion.choices[0].text, usage: completion.usage };
if (completion.usage.completion_tokens !== 24) report.failures.push(`completion: ${completion.usage.completion_tokens} tokens, want 24`);

const ajv = new Ajv({ strict: false });
addFormats(ajv);
const outcomes = await pool(corpus.map((c, i) => () => chat(i, { response_format: { type: 'json_schema', json_schema: { name: `case_${i}`, schema: c.schema, strict: true } } })), 16);
let valid = 0;
outcomes.forEach((o, i) => {
  const name = corpus[i].name;
  if (o.error) return report.failures.push(`${name}: ${o.error}`);
  let value;
  try {
    value = JSON.parse(o.content);
  } catch {
    return report.failures.push(`${name}: not JSON (${o.finish}): ${JSON.stringify(o.content.slice(0, 120))}`);
  }
  const validate = ajv.compile(corpus[i].schema);
  if (!validate(value)) return report.failures.push(`${name}: ${ajv.errorsText(validate.errors)}`);
  if (o.finish !== 'stop') return report.failures.push(`${name}: finish_reason ${o.finish}`);
  valid++;
});
report.corpus = { schemas: corpus.length, valid, example: outcomes[0]?.content };

const exact = await pool([
  ...REGEX.map((p, i) => async () => ({ name: `regex ${p}`, ok: new RegExp(`^(?:${p})$`, 'u'), ...(await chat(200 + i, { structured_outputs: { regex: p } })) })),
  ...CHOICE.map((c, i) => async () => ({ name: `choice ${c.join('|')}`, ok: { test: (s) => c.includes(s) }, ...(await chat(300 + i, { structured_outputs: { choice: c } })) })),
], 8);
for (const o of exact) {
  if (o.error) report.failures.push(o.error);
  else if (!o.ok.test(o.content) || o.finish !== 'stop') report.failures.push(`${o.name}: ${JSON.stringify(o.content)} (${o.finish})`);
}
report.exact = exact.length;

// LoRA: a CUDA worker has no LoRA kernels, so its card says supportsLora: false and the frontend
// refuses a run-time load up front (400 naming why) instead of sending it to a worker that would
// fail it; no adapter files are needed for that.
const lora = await fetch(`${base}/v1/load_lora_adapter`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ lora_name: 'probe', lora_path: '/nonexistent/adapter' }) });
const loraBody = await lora.json().catch(() => ({}));
report.lora = { status: lora.status, message: loraBody?.error?.message };
if (lora.status !== 400 || !/runs LoRA adapters/.test(String(loraBody?.error?.message))) report.failures.push(`lora: load on a cuda fleet answered ${lora.status} ${JSON.stringify(loraBody).slice(0, 200)}, want 400 'no worker ... runs LoRA adapters'`);
report.seconds = (performance.now() - t0) / 1000;
writeFileSync(outPath, `${JSON.stringify(report, null, 2)}\n`);
console.log(`serve: completion ${JSON.stringify(report.completion.text)}; corpus ${valid}/${corpus.length} valid; ${exact.length} regex/choice; ${report.failures.length} failures in ${report.seconds.toFixed(1)} s`);
for (const f of report.failures) console.log(`  FAIL ${f}`);
process.exit(report.failures.length === 0 ? 0 : 1);
