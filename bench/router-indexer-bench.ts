/**
 * Router indexer benchmark (issue 5): event apply rate, findMatches latency at 16/64/256
 * workers × 100k/1M indexed (worker, block) entries, and the full routing decision for a
 * 4k-token prompt (hash 256 blocks + match + score + book).
 *
 *   node --expose-gc --max-semi-space-size=64 --import tsx bench/router-indexer-bench.ts [--quick]
 *
 * Apply rates count only the time inside `RadixIndexer.applyEvent`: events are kept compact
 * (`EventTape`) and turned into wire-shaped objects with fresh strings a batch at a time.
 *
 * (--max-semi-space-size=64 cuts young-GC promotion while building a 1M-entry index; it raised
 * the apply rate ~1.5x in our runs. Recommended for the router process too.)
 *
 * Writes a table to stdout and JSON to bench/results/router-indexer.json. Single-threaded,
 * one core: Node runs the index on the event loop thread.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { KvEventData, KvStoredBlock } from '../proto/wire.js';
import { BlockHasher } from '../router/block-hasher.js';
import { blockHashes } from '../router/hashing.js';
import { formatU64, u64ToBigint } from '../router/u64-decimal.js';
import { KvRouter } from '../router/kv-router.js';
import { RadixIndexer } from '../router/radix-indexer.js';
import { SeededRandom } from '../runtime/random.js';

const QUICK = process.argv.includes('--quick');
const LOAD_AT_START = os.loadavg()[0]!;
const rng = new SeededRandom(20240611);
const gc = (globalThis as { gc?: () => void }).gc;

const u32 = () => Math.floor(rng.next() * 4294967296);

function randU64(): string {
  return formatU64(u32(), u32());
}

function block(): KvStoredBlock {
  return { blockHash: randU64(), tokensHash: randU64() };
}

function percentile(sorted: Float64Array, p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/**
 * Per-call latency in µs. The n calls run in 5 rounds; besides the overall p50/p99 we keep the
 * lowest per-round p99, which filters out rounds where a shared machine descheduled us.
 */
function timeEach(
  n: number,
  warmup: number,
  fn: (i: number) => void,
  untimed?: (i: number) => void,
): { p50: number; p99: number; mean: number; p99BestRound: number } {
  for (let i = 0; i < warmup; i++) {
    untimed?.(i);
    fn(i);
  }
  const rounds = 5;
  const per = Math.ceil(n / rounds);
  const us = new Float64Array(per * rounds);
  let best = Infinity;
  for (let r = 0; r < rounds; r++) {
    for (let k = 0; k < per; k++) {
      const i = r * per + k;
      untimed?.(i);
      const t0 = process.hrtime.bigint();
      fn(i);
      us[i] = Number(process.hrtime.bigint() - t0) / 1000;
    }
    const round = us.slice(r * per, (r + 1) * per).sort();
    best = Math.min(best, percentile(round, 99));
  }
  const mean = us.reduce((a, b) => a + b, 0) / us.length;
  us.sort();
  return { p50: round(percentile(us, 50)), p99: round(percentile(us, 99)), mean: round(mean), p99BestRound: round(best) };
}

const round = (x: number, d = 2) => Math.round(x * 10 ** d) / 10 ** d;
/** JS heap plus ArrayBuffers (the index is mostly typed arrays now), in MB. */
const memMb = () => {
  gc?.();
  const m = process.memoryUsage();
  return (m.heapUsed + m.arrayBuffers) / 2 ** 20;
};

/**
 * KV events in compact form: hashes as u32 halves in typed arrays, turned into wire-shaped
 * `KvEventData` objects (fresh decimal strings, as msgpack decoding produces) a batch at a time,
 * outside the timed region. Keeping a million event objects alive for the whole run made every
 * full GC mark them, which measured the bench's heap rather than the indexer.
 */
class EventTape {
  private readonly hashes: number[] = []; // per block: seq hi, seq lo, local hi, local lo
  private readonly ev: number[] = []; // per event: worker, kind (0 stored, 1 removed), parent block (-1 none), first ref, count
  private readonly refs: number[] = []; // block ids of events, in order
  get events(): number {
    return this.ev.length / 5;
  }
  newBlock(): number {
    this.hashes.push(u32(), u32(), u32(), u32());
    return this.hashes.length / 4 - 1;
  }
  stored(worker: number, parent: number, blocks: readonly number[]): void {
    this.ev.push(worker, 0, parent, this.refs.length, blocks.length);
    for (const b of blocks) this.refs.push(b);
  }
  removed(worker: number, blocks: readonly number[]): void {
    this.ev.push(worker, 1, -1, this.refs.length, blocks.length);
    for (const b of blocks) this.refs.push(b);
  }
  seqKey(b: number): string {
    return formatU64(this.hashes[4 * b]!, this.hashes[4 * b + 1]!);
  }
  localHash(b: number): bigint {
    return u64ToBigint(this.hashes[4 * b + 2]!, this.hashes[4 * b + 3]!);
  }
  /** Wire-shaped events [from, to). */
  materialize(from: number, to: number): Array<{ worker: number; data: KvEventData }> {
    const out: Array<{ worker: number; data: KvEventData }> = [];
    for (let e = from; e < to; e++) {
      const [worker, kind, parent, first, count] = this.ev.slice(5 * e, 5 * e + 5) as [number, number, number, number, number];
      const ids = this.refs.slice(first, first + count);
      if (kind === 1) {
        out.push({ worker, data: { type: 'removed', blockHashes: ids.map((b) => this.seqKey(b)) } });
        continue;
      }
      const blocks = ids.map((b) => ({ blockHash: this.seqKey(b), tokensHash: formatU64(this.hashes[4 * b + 2]!, this.hashes[4 * b + 3]!) }));
      out.push({ worker, data: parent < 0 ? { type: 'stored', blocks } : { type: 'stored', parentHash: this.seqKey(parent), blocks } });
    }
    return out;
  }
  /** Apply every event to `index`; returns the seconds spent inside `applyEvent` only. */
  applyTo(index: RadixIndexer, ids: readonly string[], from = 0, to = this.events): number {
    const BATCH = 2048;
    let ns = 0n;
    for (let at = from; at < to; at += BATCH) {
      const batch = this.materialize(at, Math.min(to, at + BATCH));
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < batch.length; i++) index.applyEvent(ids[batch[i]!.worker]!, batch[i]!.data);
      ns += process.hrtime.bigint() - t0;
    }
    return Number(ns) / 1e9;
  }
}

// ---- workload: system-prompt groups shared across workers, private suffixes per worker ----
const GROUPS = 32;
const PREFIX_BLOCKS = 32; // 512 tokens at block size 16
const SUFFIX_BLOCKS = 32;
const CHUNK = 16; // blocks per Stored event (one prefill chunk)

interface Group {
  blocks: number[];
  local: bigint[];
}
interface Sample {
  worker: number;
  group: number;
  suffixLocal: bigint[];
}

function makeGroups(tape: EventTape): Group[] {
  return Array.from({ length: GROUPS }, () => {
    const blocks = Array.from({ length: PREFIX_BLOCKS }, () => tape.newBlock());
    return { blocks, local: blocks.map((b) => tape.localHash(b)) };
  });
}

/** Stored events for `workers` workers holding ≈ `entries` (worker, block) pairs in total. */
function makeWorkload(workers: number, entries: number) {
  const tape = new EventTape();
  const groups = makeGroups(tape);
  const perWorker = Math.ceil(entries / workers);
  const samples: Sample[] = [];
  type Ev = { worker: number; parent: number; blocks: number[] };
  const streams: Ev[][] = [];
  for (let w = 0; w < workers; w++) {
    const mine: Ev[] = [];
    const has = new Set<number>();
    let n = 0;
    while (n < perWorker) {
      const g = Math.floor(GROUPS * rng.next() ** 2); // skewed: low groups are hot
      const group = groups[g]!;
      if (!has.has(g)) {
        has.add(g);
        for (let c = 0; c < PREFIX_BLOCKS; c += CHUNK) {
          mine.push({ worker: w, parent: c === 0 ? -1 : group.blocks[c - 1]!, blocks: group.blocks.slice(c, c + CHUNK) });
        }
        n += PREFIX_BLOCKS;
      }
      const suffix = Array.from({ length: SUFFIX_BLOCKS }, () => tape.newBlock());
      for (let c = 0; c < SUFFIX_BLOCKS; c += CHUNK) {
        mine.push({ worker: w, parent: c === 0 ? group.blocks[PREFIX_BLOCKS - 1]! : suffix[c - 1]!, blocks: suffix.slice(c, c + CHUNK) });
      }
      n += SUFFIX_BLOCKS;
      if (samples.length < 4096 && rng.next() < 0.2) samples.push({ worker: w, group: g, suffixLocal: suffix.map((b) => tape.localHash(b)) });
    }
    streams.push(mine);
  }
  // Interleave workers the way a shared event plane delivers them.
  for (let i = 0; streams.some((s) => i < s.length); i++) for (const s of streams) if (i < s.length) tape.stored(s[i]!.worker, s[i]!.parent, s[i]!.blocks);
  return { tape, groups, samples };
}

function queryFor(s: Sample, groups: Group[]): bigint[] {
  // 4k tokens = 256 blocks: group prefix (32) + half of a cached suffix (16) + 208 new blocks.
  const q = [...groups[s.group]!.local, ...s.suffixLocal.slice(0, 16)];
  while (q.length < 256) q.push(BigInt(randU64()));
  return q;
}

const workerId = (w: number) => w.toString(16).padStart(16, '0');

type Latency = ReturnType<typeof timeEach>;

interface FindRow {
  workers: number;
  targetEntries: number;
  entries: number;
  nodes: number;
  /** JS heap + ArrayBuffers held by the index, per million (worker, block) entries. */
  memMbPerMillionEntries: number;
  applyEventsPerSec: number;
  applyBlocksPerSec: number;
  typical: Latency;
  hotPrefix: Latency;
}

function benchFind(workers: number, entries: number): FindRow {
  const { tape, groups, samples } = makeWorkload(workers, entries);
  const ids = Array.from({ length: workers }, (_, w) => workerId(w));
  const before = memMb();
  const index = new RadixIndexer();
  const secs = tape.applyTo(index, ids);
  const stats = index.stats();
  const memPerM = ((memMb() - before) / stats.entries) * 1e6;
  const queries = samples.slice(0, QUICK ? 300 : 2000).map((s) => queryFor(s, groups));
  const typical = timeEach(queries.length, 200, (i) => index.findMatches(queries[i % queries.length]!));
  // Worst case: every worker holds the same 256-block chain and the request matches all of it.
  const hot = Array.from({ length: 256 }, block);
  for (const id of ids) for (let c = 0; c < 256; c += CHUNK) {
    const parentHash = c === 0 ? undefined : hot[c - 1]!.blockHash;
    const blocks = hot.slice(c, c + CHUNK);
    index.applyEvent(id, parentHash === undefined ? { type: 'stored', blocks } : { type: 'stored', parentHash, blocks });
  }
  const hotQuery = hot.map((b) => BigInt(b.tokensHash));
  const check = index.findMatches(hotQuery);
  if (check.depths.size !== workers || check.maxDepth !== 256) throw new Error('hot-prefix check failed');
  const hotPrefix = timeEach(QUICK ? 300 : 1000, 100, () => index.findMatches(hotQuery));
  return {
    workers,
    targetEntries: entries,
    entries: stats.entries,
    nodes: stats.nodes,
    memMbPerMillionEntries: round(memPerM, 0),
    applyEventsPerSec: Math.round(tape.events / secs),
    applyBlocksPerSec: Math.round(stats.entries / secs),
    typical,
    hotPrefix,
  };
}

interface EventSizeRow {
  workers: number;
  blocksPerEvent: number;
  events: number;
  blocks: number;
  storedEventsPerSec: number;
  storedBlocksPerSec: number;
  removedEventsPerSec: number;
  removedBlocksPerSec: number;
}

/**
 * Stored then Removed events of `chunk` blocks each (1: decode-time stores and single
 * evictions, the per-event overhead case; 16: prefill chunks). Every worker grows sequences
 * of 64 blocks, each event continuing the worker's previous one; removal runs leaves first,
 * as an LRU evicts.
 */
function benchEventSize(workers: number, perWorker: number, chunk: number): EventSizeRow {
  const ids = Array.from({ length: workers }, (_, w) => workerId(w));
  const tape = new EventTape();
  const tails: number[] = new Array(workers).fill(-1);
  const all: Array<{ w: number; blocks: number[] }> = [];
  for (let i = 0; i < perWorker; i += chunk) {
    for (let w = 0; w < workers; w++) {
      const blocks = Array.from({ length: chunk }, () => tape.newBlock());
      tape.stored(w, i % 64 === 0 ? -1 : tails[w]!, blocks); // a new sequence every 64 blocks
      tails[w] = blocks[chunk - 1]!;
      all.push({ w, blocks });
    }
  }
  const storedEvents = tape.events;
  for (let k = all.length - 1; k >= 0; k--) tape.removed(all[k]!.w, [...all[k]!.blocks].reverse());
  const index = new RadixIndexer();
  const storeSecs = tape.applyTo(index, ids, 0, storedEvents);
  const blocks = index.stats().entries;
  const removeSecs = tape.applyTo(index, ids, storedEvents, tape.events);
  if (index.stats().entries !== 0 || index.stats().nodes !== 0) throw new Error('remove check failed');
  return {
    workers,
    blocksPerEvent: chunk,
    events: storedEvents,
    blocks,
    storedEventsPerSec: Math.round(storedEvents / storeSecs),
    storedBlocksPerSec: Math.round(blocks / storeSecs),
    removedEventsPerSec: Math.round(storedEvents / removeSecs),
    removedBlocksPerSec: Math.round(blocks / removeSecs),
  };
}

/** Full decision: 4096-token prompt → hash (local + sequence) → match → cost → select → book. */
function benchDecision(workers: number, entries: number) {
  const BS = 16;
  const router = new KvRouter({ blockSize: BS });
  const toks = (n: number) => Array.from({ length: n }, () => Math.floor(rng.next() * 32000));
  const groupTokens = Array.from({ length: GROUPS }, () => toks(PREFIX_BLOCKS * BS));
  const ids = Array.from({ length: workers }, (_, w) => workerId(w));
  const perWorker = Math.ceil(entries / workers);
  const samples: Array<{ group: number; suffix: number[] }> = [];
  for (let w = 0; w < workers; w++) {
    const seen = new Map<string, { parent: string | undefined; tokensHash: string }>();
    while (seen.size < perWorker) {
      const g = Math.floor(GROUPS * rng.next() ** 2);
      const suffix = toks(SUFFIX_BLOCKS * BS);
      const { local, seq } = blockHashes([...groupTokens[g]!, ...suffix], BS);
      for (let i = 0; i < seq.length; i++) seen.set(seq[i]!.toString(), { parent: i === 0 ? undefined : seq[i - 1]!.toString(), tokensHash: local[i]!.toString() });
      if (samples.length < 1000) samples.push({ group: g, suffix });
    }
    const events: KvEventData[] = [...seen].map(([blockHash, b]) =>
      b.parent === undefined ? { type: 'stored', blocks: [{ blockHash, tokensHash: b.tokensHash }] } : { type: 'stored', parentHash: b.parent, blocks: [{ blockHash, tokensHash: b.tokensHash }] },
    );
    router.addWorker(ids[w]!, 0);
    router.applyDump({ workerId: ids[w]!, nextEventId: 0, events }, 0);
  }
  const candidates = ids.map((instanceId) => ({ instanceId, totalBlocks: 1_000_000 }));
  const prompts = samples.map((s) => [...groupTokens[s.group]!, ...s.suffix.slice(0, 16 * BS), ...toks(4096 - (PREFIX_BLOCKS + 16) * BS)]);
  let n = 0;
  let overlapSum = 0;
  const hasher = new BlockHasher(BS);
  const hashOnly = timeEach(QUICK ? 300 : 2000, 100, (i) => hasher.both(prompts[i % prompts.length]!));
  // The previous implementation (@node-rs/xxhash, one N-API call per hash), same run.
  const native = new BlockHasher(BS, { native: true });
  const hashOnlyNative = timeEach(QUICK ? 300 : 2000, 100, (i) => native.both(prompts[i % prompts.length]!));
  const hashed = prompts.map((p) => hasher.local(p));
  const matchOnly = timeEach(QUICK ? 300 : 2000, 100, (i) => router.indexer.findMatches(hashed[i % hashed.length]!));
  // Timed: route() = expire + hash + match + score + select + book. Freeing the previous
  // request (stream end) happens outside the timed region.
  const decision = timeEach(
    QUICK ? 300 : 2000,
    100,
    (i) => {
      const r = router.route({ requestId: `r${n}`, tokens: prompts[i % prompts.length]! }, candidates, n);
      if (r.kind === 'routed') overlapSum += r.decision.overlapBlocks;
    },
    () => {
      if (n > 0) router.onFinished(`r${n - 1}`, n);
      n++;
    },
  );
  return { workers, entries: router.stats().index.entries, promptTokens: 4096, hashBackend: hasher.backend, hashOnly, hashOnlyNative, matchOnly, decision, meanOverlapBlocks: round(overlapSum / n, 1) };
}

function main(): void {
  // Let the JIT optimize the apply and match paths before anything is timed (otherwise the
  // first row measures the interpreter), then drop the warm-up index.
  benchEventSize(16, 256, 1);
  benchEventSize(16, 256, 16);
  benchFind(16, 50_000);
  gc?.();
  const sizes = QUICK ? [100_000] : [100_000, 1_000_000];
  const fleets = [16, 64, 256];
  const find: FindRow[] = [];
  for (const entries of sizes) {
    for (const workers of fleets) {
      const row = benchFind(workers, entries);
      find.push(row);
      console.log(JSON.stringify(row));
      gc?.();
    }
  }
  const perWorker = QUICK ? 1024 : 4096;
  // Short runs (≈ 0.2 s each) on a shared machine: 3 fresh runs each, reporting the best and
  // the median of each rate.
  const eventSizes = [1, 16].map((chunk) => {
    const runs = [0, 1, 2].map(() => {
      const r = benchEventSize(64, perWorker, chunk);
      gc?.();
      return r;
    });
    const pick = (k: 'storedEventsPerSec' | 'storedBlocksPerSec' | 'removedEventsPerSec' | 'removedBlocksPerSec') => {
      const xs = runs.map((r) => r[k]).sort((a, b) => a - b);
      return { best: xs[2]!, median: xs[1]! };
    };
    return {
      workers: runs[0]!.workers,
      blocksPerEvent: chunk,
      events: runs[0]!.events,
      blocks: runs[0]!.blocks,
      runs: runs.length,
      storedEventsPerSec: pick('storedEventsPerSec'),
      storedBlocksPerSec: pick('storedBlocksPerSec'),
      removedEventsPerSec: pick('removedEventsPerSec'),
      removedBlocksPerSec: pick('removedBlocksPerSec'),
    };
  });
  for (const r of eventSizes) console.log(JSON.stringify(r));
  const decision = benchDecision(64, 100_000);
  console.log(JSON.stringify(decision));

  console.log('\n| workers | entries | nodes | apply events/s (16-block) | apply blocks/s | findMatches p50 / p99 / best-round p99 µs | hot-prefix p50 / p99 / best-round p99 µs | MB per 1M entries (heap + ArrayBuffers) |');
  console.log('|---|---|---|---|---|---|---|---|');
  for (const r of find) {
    console.log(
      `| ${r.workers} | ${r.entries} | ${r.nodes} | ${r.applyEventsPerSec.toLocaleString('en')} | ${r.applyBlocksPerSec.toLocaleString('en')} | ${r.typical.p50} / ${r.typical.p99} / ${r.typical.p99BestRound} | ${r.hotPrefix.p50} / ${r.hotPrefix.p99} / ${r.hotPrefix.p99BestRound} | ${r.memMbPerMillionEntries} |`,
    );
  }
  console.log('\n| blocks per event | events | stored events/s | stored blocks/s | removed events/s | removed blocks/s |  (best of 3 (median))');
  console.log('|---|---|---|---|---|---|');
  const n = (x: { best: number; median: number }) => `${x.best.toLocaleString('en')} (${x.median.toLocaleString('en')})`;
  for (const r of eventSizes) {
    console.log(`| ${r.blocksPerEvent} | ${r.events.toLocaleString('en')} | ${n(r.storedEventsPerSec)} | ${n(r.storedBlocksPerSec)} | ${n(r.removedEventsPerSec)} | ${n(r.removedBlocksPerSec)} |`);
  }
  const lat = (l: Latency) => `${l.p50} / ${l.p99} / ${l.p99BestRound}`;
  console.log(`\ndecision (4096-token prompt, ${decision.workers} workers, ${decision.entries} entries), p50 / p99 / best-round p99 µs:`);
  console.log(`| full route() | ${lat(decision.decision)} |`);
  console.log(`| hash 256 blocks, local + sequence (${decision.hashBackend}) | ${lat(decision.hashOnly)} |`);
  console.log(`| hash 256 blocks, @node-rs/xxhash per block (previous) | ${lat(decision.hashOnlyNative)} |`);
  console.log(`| findMatches alone | ${lat(decision.matchOnly)} |`);
  console.log(`mean overlap ${decision.meanOverlapBlocks} blocks`);

  const out = {
    generatedAt: new Date().toISOString(),
    quick: QUICK,
    machine: { node: process.version, cpus: os.cpus().length, cpuModel: os.cpus()[0]?.model, totalMemGb: round(os.totalmem() / 2 ** 30, 1), loadAvg1mAtStart: round(LOAD_AT_START, 1), loadAvg1mAtEnd: round(os.loadavg()[0]!, 1) },
    workload: { groups: GROUPS, prefixBlocks: PREFIX_BLOCKS, suffixBlocks: SUFFIX_BLOCKS, blocksPerStoredEvent: CHUNK, queryBlocks: 256 },
    findMatches: find,
    eventSizes,
    decision,
  };
  const file = path.join(path.dirname(new URL(import.meta.url).pathname), 'results', 'router-indexer.json');
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, JSON.stringify(out, null, 2) + '\n');
  console.log(`\nwrote ${file}`);
}

main();
