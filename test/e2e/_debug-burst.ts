import { Agent, request as httpRequest } from 'node:http';
import { E2eCluster, MODEL } from './cluster.js';
const cluster = await E2eCluster.start({ workers: 2, workerArgs: ['--speedup-ratio', '100', '--num-gpu-blocks', '8192', '--max-num-seqs', '1024', '--load-metrics-interval', '100'], frontendArgs: ['--max-inflight-requests', '1100'], leaseTtl: 10 });
const agent = new Agent({ keepAlive: true, maxSockets: 1000 });
const errs: string[] = []; let ok = 0; const statuses = new Map<number, number>();
await Promise.all(Array.from({ length: 1000 }, (_, i) => new Promise<void>((resolve) => {
  const payload = JSON.stringify({ model: MODEL, prompt: `request ${i}`, max_tokens: 8 + (i % 25), ignore_eos: true, stream: true });
  const req = httpRequest(`${cluster.url}/v1/completions`, { method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } }, (res) => {
    statuses.set(res.statusCode!, (statuses.get(res.statusCode!) ?? 0) + 1);
    res.resume(); res.on('end', () => { ok++; resolve(); }); res.on('error', (e) => { errs.push(`res#${i} ${e.message}`); resolve(); });
  });
  req.on('error', (e) => { errs.push(`req#${i} ${e.message}`); resolve(); });
  req.end(payload);
})));
console.log('ok', ok, 'statuses', [...statuses], 'errors', errs.length, errs.slice(0, 5));
console.log(cluster.frontend.output().split('\n').filter((l) => !l.includes('"level":30')).slice(-20).join('\n'));
for (const w of cluster.workers) console.log(w.proc.output().split('\n').filter((l) => !l.includes('"level":30')).slice(-10).join('\n'));
const m = await (await fetch(`${cluster.url}/metrics`)).text(); console.log(m.split('\n').filter((l) => /eventloop_lag_(max|p99|mean)_seconds /.test(l)).join('\n'));
for (const w of cluster.workers) { const t = await (await fetch(`${w.statusUrl}/metrics`)).text(); console.log('worker', t.split('\n').filter((l) => /eventloop_lag_max_seconds /.test(l)).join('\n')); }
agent.destroy();
await cluster.close();
