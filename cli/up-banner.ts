/**
 * What `runtime up` prints once its fleet serves: where it is, what it serves, where to look
 * (dashboard, every process's /metrics) and a request that works on this fleet as it is started:
 * a chat request where a worker generates, an embeddings request where one embeds, with the key
 * header when the frontend needs a key. Pure: the caller gathers the facts.
 */

export interface UpFleetFacts {
  /** The frontend's base URL. */
  url: string;
  model: string;
  workers: { agg: number; prefill: number; decode: number; embedding: number };
  /** The frontend needs a key (`--api-key`, `--api-key-file`, `TANDEM_API_KEY`). */
  keyed: boolean;
  /** The key is in the environment as TANDEM_API_KEY, so `$TANDEM_API_KEY` in a curl works as printed. */
  keyInEnv: boolean;
  /** LoRA adapters every worker serves (`--lora name=DIR`), by name. */
  adapters: string[];
  /** Each worker's /metrics, in start order. */
  metrics: Array<{ name: string; url: string }>;
}

export function upBanner(f: UpFleetFacts): string {
  const w = f.workers;
  const pools = [w.agg ? `${w.agg} aggregated` : '', w.prefill ? `${w.prefill} prefill` : '', w.decode ? `${w.decode} decode` : '', w.embedding ? `${w.embedding} embedding` : ''];
  const lines = ['', `Tandem is serving ${f.model} at ${f.url}`, `  workers: ${pools.filter(Boolean).join(' + ')}`];
  if (f.adapters.length > 0) lines.push(`  adapters: ${f.adapters.join(', ')} (request one by its name as the model)`);
  lines.push(`  dashboard: ${f.url}/dashboard${f.keyed ? ' (asks for the key)' : ''}`);
  lines.push(`  metrics: ${f.url}/metrics (frontend)`);
  for (const m of f.metrics) lines.push(`           ${m.url} (${m.name})`);
  lines.push('', 'Try:');
  const key = f.keyed ? [`    -H "authorization: Bearer $TANDEM_API_KEY" \\`] : [];
  if (w.agg + w.decode > 0) {
    lines.push(
      `  curl -N ${f.url}/v1/chat/completions -H 'content-type: application/json' \\`,
      ...key,
      `    -d '{"model":"${f.model}","messages":[{"role":"user","content":"Hello!"}],"max_tokens":32,"stream":true}'`,
    );
  }
  if (w.embedding > 0) {
    lines.push(`  curl ${f.url}/v1/embeddings -H 'content-type: application/json' \\`, ...key, `    -d '{"model":"${f.model}","input":"Hello!"}'`);
  }
  // The key is not printed: this output often ends up in logs.
  if (f.keyed && !f.keyInEnv) lines.push('  (first: export TANDEM_API_KEY=<the key the frontend was given>)');
  lines.push('', 'Press Ctrl-C to stop.', '');
  return lines.join('\n');
}
