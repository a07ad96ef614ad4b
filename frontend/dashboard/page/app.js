// Tandem dashboard page: one EventSource on /dashboard/events, whole snapshots about once a
// second (frontend/dashboard/snapshot.ts is the contract), history kept here in fixed rings.
// Plain ES module, no build step; uPlot comes from /dashboard/assets/uPlot.iife.min.js (global).
/* global uPlot */

const EVENTS_URL = '/dashboard/events';
const SNAPSHOT_URL = '/dashboard/api/snapshot';
const REQUEST_URL = '/dashboard/api/requests/';
/** POST the key here as a header; the answer sets the dashboard's HttpOnly cookie. */
const SESSION_URL = '/dashboard/session';
/** 60 min at 1 Hz: the longest window. */
const HISTORY_POINTS = 3600;
/** After a non-200 answer EventSource gives up for good; we open a new one after this. */
const MANUAL_RETRY_MS = 2000;
const DECISIONS_SHOWN = 12;

const $ = (id) => document.querySelector(`[data-testid="${id}"]`);
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
/** Numbers from the server go into HTML as numbers only. */
const num = (v) => Number(v);
const fmt = (v, digits = 1) => (v === null || v === undefined || Number.isNaN(v) ? '—' : Number(v).toFixed(digits));
const pct = (v) => (v === null || v === undefined ? '—' : `${(v * 100).toFixed(0)}%`);
const shortId = (id) => (id.length > 8 ? id.slice(-8) : id);
/** "Qwen3MoeForCausalLM · 30.5B params, 3.3B active" beside a model's name, from its workers' cards. */
function modelInfo(m) {
  if (!m.architecture && !m.parameters) return '';
  const b = (n) => (n >= 1e9 ? `${(n / 1e9).toFixed(1)}B` : n >= 1e6 ? `${(n / 1e6).toFixed(1)}M` : n >= 1e3 ? `${(n / 1e3).toFixed(1)}K` : `${n}`);
  const p = m.parameters;
  const params = p ? ` · ${b(p.total)} params${p.active < p.total ? `, ${b(p.active)} active` : ''}` : '';
  const data = `data-architecture="${esc(m.architecture ?? '')}"${p ? ` data-params-total="${num(p.total)}" data-params-active="${num(p.active)}"` : ''}`;
  return ` <span class="arch muted" data-testid="arch-${esc(m.name)}" ${data}>${esc(m.architecture ?? '')}${params}</span>`;
}
/** instance id → the worker's name from its card (`runtime up`'s agg-0, embed-0, …), from the latest snapshot. */
let workerNames = new Map();
/** How a worker is shown everywhere: its name when it has one (as in `up`'s logs), else the id's last 8 hex digits. */
const workerLabel = (id) => workerNames.get(id) ?? shortId(id);
const clock = (t) => new Date(t).toLocaleTimeString();

function setStat(id, value, text) {
  const el = $(id);
  if (!el) return;
  el.dataset.value = String(value);
  el.textContent = text ?? String(value);
}

// ---------------------------------------------------------------- history rings

/** Time series with a fixed number of columns, stored in preallocated rings (NaN = no value). */
class History {
  constructor(columns, capacity = HISTORY_POINTS) {
    this.capacity = capacity;
    this.t = new Float64Array(capacity);
    this.cols = Array.from({ length: columns }, () => new Float64Array(capacity));
    this.size = 0;
    this.head = 0; // next write
  }

  push(tMs, values) {
    this.t[this.head] = tMs / 1000;
    for (let i = 0; i < this.cols.length; i++) {
      const v = values[i];
      this.cols[i][this.head] = v === null || v === undefined ? NaN : v;
    }
    this.head = (this.head + 1) % this.capacity;
    if (this.size < this.capacity) this.size++;
  }

  /** uPlot data for the points newer than `sinceS` (seconds), oldest first. */
  data(sinceS) {
    const out = [[], ...this.cols.map(() => [])];
    const start = (this.head - this.size + this.capacity) % this.capacity;
    for (let k = 0; k < this.size; k++) {
      const i = (start + k) % this.capacity;
      if (this.t[i] < sinceS) continue;
      out[0].push(this.t[i]);
      for (let c = 0; c < this.cols.length; c++) {
        const v = this.cols[c][i];
        out[c + 1].push(Number.isNaN(v) ? null : v);
      }
    }
    return out;
  }
}

// ---------------------------------------------------------------- charts

const TIME_INCRS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600];
const pad2 = (n) => String(n).padStart(2, '0');
function timeLabel(s, incr) {
  const d = new Date(s * 1000);
  const hm = `${pad2(d.getHours())}:${pad2(d.getMinutes())}`;
  return incr < 60 ? `${hm}:${pad2(d.getSeconds())}` : hm;
}
/** Axis numbers in at most 4 characters or so: 0.25, 12, 1.8k, 2M. */
function compact(v) {
  const a = Math.abs(v);
  if (a >= 1e6) return `${+(v / 1e6).toFixed(1)}M`;
  if (a >= 1e3) return `${+(v / 1e3).toFixed(1)}k`;
  if (a > 0 && a < 0.01) return v.toExponential(0);
  return String(+v.toFixed(3));
}

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || '#888';
}

/** A small uPlot time-series chart of fixed series, fed from one History. */
class Chart {
  constructor(testid, labels, history) {
    this.el = $(testid);
    this.labels = labels;
    this.history = history;
    this.plot = undefined;
  }

  build() {
    if (typeof uPlot === 'undefined' || !this.el) return;
    const colors = ['--s1', '--s2', '--s3', '--s4'].map(cssVar);
    const axis = { stroke: cssVar('--muted'), grid: { stroke: cssVar('--line'), width: 1 }, ticks: { stroke: cssVar('--line'), width: 1 }, size: 44, values: (_u, splits) => splits.map(compact) };
    // Whole seconds at least (1 Hz data), labelled as wall-clock time.
    const xAxis = { ...axis, size: 24, space: 60, incrs: TIME_INCRS, values: (_u, splits, _i, _space, incr) => splits.map((v) => timeLabel(v, incr)) };
    const opts = {
      width: Math.max(200, this.el.clientWidth),
      height: 150 - 24,
      cursor: { drag: { x: false, y: false } },
      legend: { show: true, live: false },
      scales: { x: { time: true }, y: { range: (_u, min, max) => [0, max > 0 ? max * 1.1 : 1] } },
      axes: [xAxis, axis],
      series: [{}, ...this.labels.map((label, i) => ({ label, stroke: colors[i % colors.length], width: 1.5, spanGaps: false, points: { show: false } }))],
    };
    this.el.textContent = '';
    this.plot = new uPlot(opts, this.history.data(0), this.el);
  }

  update(sinceS) {
    if (!this.plot) this.build();
    if (this.plot) this.plot.setData(this.history.data(sinceS));
  }

  resize() {
    if (this.plot && this.el) this.plot.setSize({ width: Math.max(200, this.el.clientWidth), height: 150 - 24 });
  }
}

const histories = {
  rate: new History(2),
  ttft: new History(3),
  itl: new History(3),
  kv: new History(3),
  transfer: new History(1),
  plannerRate: new History(2),
  plannerIsl: new History(2),
  plannerOsl: new History(2),
};
const charts = [
  new Chart('chart-rate', ['started', 'finished'], histories.rate),
  new Chart('chart-ttft', ['p50', 'p90', 'p99'], histories.ttft),
  new Chart('chart-itl', ['p50', 'p90', 'p99'], histories.itl),
  new Chart('chart-kv', ['aggregated', 'prefill', 'decode'], histories.kv),
  new Chart('chart-transfer', ['GB/s'], histories.transfer),
];
// Built only once a planner has published (their panel is hidden until then: zero width).
const plannerCharts = [
  new Chart('chart-planner-rate', ['predicted', 'observed'], histories.plannerRate),
  new Chart('chart-planner-isl', ['predicted', 'observed'], histories.plannerIsl),
  new Chart('chart-planner-osl', ['predicted', 'observed'], histories.plannerOsl),
];

let windowMinutes = 5;
let lastSnapshot;

function redrawCharts() {
  if (!lastSnapshot) return;
  const sinceS = lastSnapshot.t / 1000 - windowMinutes * 60;
  for (const c of charts) c.update(sinceS);
  if (lastSnapshot.planner) for (const c of plannerCharts) c.update(sinceS);
}

for (const btn of document.querySelectorAll('.seg button')) {
  btn.addEventListener('click', () => {
    windowMinutes = Number(btn.dataset.minutes);
    for (const b of document.querySelectorAll('.seg button')) b.setAttribute('aria-pressed', String(b === btn));
    redrawCharts();
  });
}
// Chart colours come from CSS variables: rebuild the charts when the OS theme flips.
window.matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => {
  for (const c of [...charts, ...plannerCharts]) {
    c.plot?.destroy();
    c.plot = undefined;
  }
  redrawCharts();
});
let resizeTimer;
window.addEventListener('resize', () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => {
    for (const c of [...charts, ...plannerCharts]) c.resize();
  }, 150);
});

// ---------------------------------------------------------------- panels

function kvByRole(models) {
  const acc = { aggregated: [0, 0], prefill: [0, 0], decode: [0, 0] };
  let used = 0;
  for (const m of models) {
    for (const p of m.pools) {
      for (const w of p.workers) {
        if (w.state === 'gone') continue;
        acc[p.role][0] += w.kvUsedBlocks;
        acc[p.role][1] += w.kvTotalBlocks;
        used += w.kvUsedBlocks;
      }
    }
  }
  const share = ([u, t]) => (t > 0 ? (100 * u) / t : null);
  return { used, perRole: [share(acc.aggregated), share(acc.prefill), share(acc.decode)] };
}

/**
 * A worker's KV tiers (only workers that have them): G2 host and G3 disk occupancy, and the share
 * of its prefix lookups each tier served since it started (G1 = its engine pool). A row of its own
 * under the worker's, so pools without tiers keep their width.
 */
function tierRow(id, t, stale) {
  const bar = (used, cap) => {
    const share = cap > 0 ? Math.min(100, (100 * used) / cap) : 0;
    return `<span class="kvbar" title="${share.toFixed(1)}%"><i style="width:${share.toFixed(1)}%"></i></span><span class="kvtext">${num(used)}/${num(cap)}</span>`;
  };
  const h = t.hitRate;
  const attrs = `data-host-blocks="${num(t.hostBlocks)}" data-host-capacity="${num(t.hostCapacity)}" data-disk-blocks="${num(t.diskBlocks)}" data-disk-capacity="${num(t.diskCapacity)}"${h ? ` data-hit-device="${num(h.device)}" data-hit-host="${num(h.host)}" data-hit-disk="${num(h.disk)}"` : ''}`;
  const disk = t.diskCapacity > 0 ? `<span class="tier">G3 disk ${bar(t.diskBlocks, t.diskCapacity)}</span>` : '';
  const hits = `<span class="tier hits" title="share of prompt tokens looked up since the worker started, served by each tier">hits G1 ${pct(h?.device)} · G2 ${pct(h?.host)}${t.diskCapacity > 0 ? ` · G3 ${pct(h?.disk)}` : ''}</span>`;
  return `<tr class="tiers${stale ? ' stale' : ''}" data-testid="tiers-${esc(id)}" ${attrs}><td colspan="6"><span class="tier">G2 host ${bar(t.hostBlocks, t.hostCapacity)}</span>${disk}${hits}</td></tr>`;
}

/**
 * A speculating worker's acceptance since it started: accepted / drafted tokens and the tokens a
 * verify step returned on average (vLLM's mean acceptance length). A row of its own, like tiers.
 */
function specRow(id, s, stale) {
  const attrs = `data-drafts="${num(s.drafts)}" data-draft-tokens="${num(s.draftTokens)}"${s.acceptanceRate !== null ? ` data-acceptance="${num(s.acceptanceRate)}"` : ''}`;
  const length = s.meanAcceptedLength !== null ? s.meanAcceptedLength.toFixed(2) : '—';
  return `<tr class="tiers spec${stale ? ' stale' : ''}" data-testid="spec-${esc(id)}" ${attrs}><td colspan="6"><span class="tier" title="draft tokens accepted / verified since the worker started">speculative: acceptance ${pct(s.acceptanceRate)}</span><span class="tier" title="tokens a verify step returned on average (1 + accepted / verify steps)">${length} tokens / verify</span><span class="tier">${num(s.draftTokens)} drafts</span></td></tr>`;
}

function renderFleet(models) {
  if (models.length === 0) {
    $('fleet').innerHTML = '<p class="muted">no models registered</p>';
    return;
  }
  const html = models
    .map((m) => {
      const pools = m.pools
        .map((p) => {
          const live = p.workers.filter((w) => w.state !== 'gone').length;
          const gone = p.workers.length - live;
          const rows = p.workers
            .map((w) => {
              const share = w.kvTotalBlocks > 0 ? Math.min(100, (100 * w.kvUsedBlocks) / w.kvTotalBlocks) : 0;
              // A stale report (the worker stopped reporting) shows as no load, dimmed, never its last numbers.
              const stale = w.state !== 'gone' && w.loadFresh === false;
              return `<tr data-testid="worker-${esc(w.instanceId)}" data-state="${esc(w.state)}" data-running="${num(w.running)}" data-waiting="${num(w.waiting)}" data-kv-used="${num(w.kvUsedBlocks)}" data-kv-total="${num(w.kvTotalBlocks)}" data-load-fresh="${w.loadFresh === false ? 'false' : 'true'}"${stale ? ' class="stale" title="no current load report from this worker"' : ''}>
<td class="wid" data-testid="name-${esc(w.instanceId)}" data-name="${esc(w.name ?? '')}" title="instance ${esc(w.instanceId)}">${esc(workerLabel(w.instanceId))}${w.loras ? ` <span class="loras" data-testid="loras-${esc(w.instanceId)}" title="LoRA adapters on this worker">${w.loras.map(esc).join(', ')}</span>` : ''}</td>
<td><span class="state ${esc(w.state)}">${esc(w.state)}</span></td>
<td>${num(w.running)}</td><td>${num(w.waiting)}</td>
<td><span class="kvbar" title="${share.toFixed(1)}%"><i style="width:${share.toFixed(1)}%"></i></span><span class="kvtext">${num(w.kvUsedBlocks)}/${num(w.kvTotalBlocks)}</span></td>
<td>${pct(w.prefixHitRate)}</td></tr>${w.tiers && w.state !== 'gone' ? tierRow(w.instanceId, w.tiers, stale) : ''}${w.spec && w.state !== 'gone' ? specRow(w.instanceId, w.spec, stale) : ''}`;
            })
            .join('');
          return `<div class="pool" data-testid="pool-${esc(p.role)}" data-model="${esc(m.name)}" data-worker-count="${live}" data-gone-count="${gone}">
<h4>${esc(p.role)} · ${live} worker${live === 1 ? '' : 's'}${gone ? ` · ${gone} gone` : ''}</h4>
<table class="grid workers"><thead><tr><th>worker</th><th>state</th><th>running</th><th>waiting</th><th>KV blocks</th><th>prefix hit</th></tr></thead><tbody>${rows}</tbody></table></div>`;
        })
        .join('');
      return `<div class="model" data-testid="model-${esc(m.name)}"><h3>${esc(m.name)}${modelInfo(m)}</h3><div class="pools">${pools}</div></div>`;
    })
    .join('');
  $('fleet').innerHTML = html;
}

function renderTraffic(s) {
  const tr = s.traffic;
  setStat('stat-request-rate', tr.requestRate, fmt(tr.requestRate));
  setStat('stat-inflight', tr.inflight);
  setStat('stat-queued', tr.queued);
  setStat('stat-requests-total', tr.requestsTotal);
  setStat('stat-migrations', tr.migrations);
  const errs = Object.entries(tr.errorsByType).filter(([, n]) => n > 0);
  const el = $('stat-errors');
  el.innerHTML = errs.length === 0 ? 'none' : errs.map(([code, n]) => `<span class="error" data-error="${esc(code)}">${esc(code)} ${num(n)}</span>`).join(' · ');
}

function renderRouting(r) {
  const mode = $('routing-mode');
  mode.dataset.mode = r.mode;
  mode.textContent = r.mode;
  $('stat-index-blocks').textContent = r.indexBlocks === undefined ? '—' : String(r.indexBlocks);
  $('stat-gap-recoveries').textContent = r.gapRecoveries === undefined ? '—' : String(r.gapRecoveries);
  const shown = r.decisions.slice(-DECISIONS_SHOWN).reverse();
  if (shown.length === 0) {
    $('routing-decisions').innerHTML = '<p class="muted">no decisions yet</p>';
    return;
  }
  $('routing-decisions').innerHTML = shown
    .map((d) => {
      const cands = [...d.candidates]
        .sort((a, b) => (a.cost ?? 0) - (b.cost ?? 0))
        .map((c) => `<span class="cand${c.instanceId === d.winner ? ' winner' : ''}" data-testid="candidate-${esc(c.instanceId)}" title="instance ${esc(c.instanceId)}">${esc(workerLabel(c.instanceId))}${d.promptBlocks > 0 ? ` · overlap ${num(c.overlapBlocks)}/${num(d.promptBlocks)}` : ''}${c.cost === null ? '' : ` · cost ${fmt(c.cost, 2)}`}${c.predictedTtftMs === undefined ? '' : ` · TTFT≈${fmt(c.predictedTtftMs, 1)} ms`}</span>`)
        .join('');
      // --router-cost latency: the winner's predicted TTFT beside the measured one (the model's error).
      const won = d.candidates.find((c) => c.instanceId === d.winner);
      const predicted = won?.predictedTtftMs;
      const ttft = predicted === undefined ? '' : `<span class="ttft" data-testid="ttft-${esc(d.requestId)}">TTFT predicted ${fmt(predicted, 1)} / measured ${d.measuredTtftMs === undefined ? '…' : fmt(d.measuredTtftMs, 1)} ms</span>`;
      const attrs = `${predicted === undefined ? '' : ` data-predicted-ttft-ms="${predicted}"`}${d.measuredTtftMs === undefined ? '' : ` data-measured-ttft-ms="${d.measuredTtftMs}"`}`;
      return `<div class="decision" data-testid="decision-${esc(d.requestId)}" data-request-id="${esc(d.requestId)}" data-winner="${esc(d.winner)}"${attrs}>
<div class="head"><span>${clock(d.t)}</span><a data-inspect="${esc(d.requestId)}" title="inspect">${esc(d.requestId)}</a><span>→ <b class="wid" title="instance ${esc(d.winner)}">${esc(workerNames.has(d.winner) ? workerNames.get(d.winner) : d.winner)}</b></span><span>${esc(d.decidedBy)}</span>${ttft}</div>
<div class="cands">${cands}</div></div>`;
    })
    .join('');
}

function renderDisagg(d, finishedTotal) {
  // Share and count are over the same requests: everything finished since the frontend started.
  setStat('stat-disagg-share', d.share, pct(d.share));
  const finished = $('stat-disagg-share');
  finished.dataset.finished = String(num(finishedTotal));
  $('stat-disagg-finished').textContent = `of ${num(finishedTotal)} finished`;
  setStat('stat-disagg-total', d.disaggregatedTotal);
  setStat('stat-transfer-gbps', d.transferGBps, fmt(d.transferGBps, 3));
  $('stat-transfer-latency').textContent = `${fmt(d.transferLatencyMs.p50)} / ${fmt(d.transferLatencyMs.p99)}`;
  setStat('stat-fallbacks', d.fallbacks);
}

function renderPlanner(p) {
  const panel = $('panel-planner');
  if (!p) {
    panel.hidden = true;
    return;
  }
  const wasHidden = panel.hidden;
  panel.hidden = false;
  if (wasHidden) for (const c of plannerCharts) c.plot = undefined; // rebuild at the visible width
  $('planner-source').textContent = `${p.source} · last ${clock(p.lastSeen)}`;
  $('planner-pools').tBodies[0].innerHTML = p.pools
    .map((x) => `<tr data-testid="planner-pool-${esc(x.name)}" data-current="${num(x.current)}" data-desired="${num(x.desired)}"><td>${esc(x.name)}</td><td>${num(x.current)}</td><td${x.current !== x.desired ? ' class="error"' : ''}>${num(x.desired)}</td></tr>`)
    .join('');
  $('planner-decisions').tBodies[0].innerHTML = [...p.decisions]
    .reverse()
    .map((x) => `<tr><td>${clock(x.t)}</td><td>${esc(x.pool)}</td><td>${num(x.from)} → ${num(x.to)}</td><td class="reason">${esc(x.reason)}</td></tr>`)
    .join('');
}

function record(s) {
  const tr = s.traffic;
  histories.rate.push(s.t, [tr.requestRate, tr.finishRate]);
  histories.ttft.push(s.t, [tr.ttft.p50, tr.ttft.p90, tr.ttft.p99]);
  histories.itl.push(s.t, [tr.itl.p50, tr.itl.p90, tr.itl.p99]);
  const kv = kvByRole(s.models);
  histories.kv.push(s.t, kv.perRole);
  setStat('stat-kv-used', kv.used);
  histories.transfer.push(s.t, [s.disagg.transferGBps]);
  const p = s.planner;
  if (p) {
    histories.plannerRate.push(s.t, [p.predicted?.rate, p.observed?.rate]);
    histories.plannerIsl.push(s.t, [p.predicted?.isl, p.observed?.isl]);
    histories.plannerOsl.push(s.t, [p.predicted?.osl, p.observed?.osl]);
  }
}

let snapshots = 0;
function onSnapshot(s) {
  workerNames = new Map(s.models.flatMap((m) => m.pools.flatMap((p) => p.workers.filter((w) => w.name).map((w) => [w.instanceId, w.name]))));
  lastSnapshot = s;
  snapshots++;
  document.body.dataset.snapshots = String(snapshots);
  const fe = $('frontend-id');
  fe.dataset.value = s.frontend.instanceId;
  fe.textContent = `frontend ${s.frontend.instanceId}${s.frontend.draining ? ' (draining)' : ''} · ${s.frontend.dashboardClients} viewer${s.frontend.dashboardClients === 1 ? '' : 's'}`;
  record(s);
  renderFleet(s.models);
  renderTraffic(s);
  renderRouting(s.routing);
  renderDisagg(s.disagg, s.traffic.finishedTotal ?? 0);
  renderPlanner(s.planner);
  redrawCharts();
}

// ---------------------------------------------------------------- connection

function setConn(state, text) {
  const el = $('conn-status');
  el.dataset.state = state;
  el.textContent = text ?? state;
}

let source;
let everConnected = false;
let lastFrameAt = 0;

function connect() {
  source = new EventSource(EVENTS_URL);
  source.addEventListener('open', () => {
    everConnected = true;
    setConn('live');
  });
  source.addEventListener('snapshot', (e) => {
    lastFrameAt = Date.now();
    const conn = $('conn-status');
    if (conn.dataset.state !== 'live') setConn('live');
    conn.dataset.frames = String(Number(conn.dataset.frames ?? 0) + 1); // lets a test wait for the next snapshots
    onSnapshot(JSON.parse(e.data));
  });
  source.addEventListener('error', () => {
    // CONNECTING: the browser retries by itself (frontend gone; `retry:` is 2 s).
    // CLOSED: a non-200 answer (401, 503 while starting): find out which, then retry ourselves.
    setConn(everConnected ? 'reconnecting' : 'connecting');
    if (source.readyState === EventSource.CLOSED) {
      source = undefined;
      void checkAuth().then((needsKey) => {
        if (needsKey) showAuth();
        else setTimeout(connect, MANUAL_RETRY_MS);
      });
    }
  });
}

/** True when the frontend answers 401 (an API key is required and none or a wrong one is held). */
async function checkAuth() {
  try {
    const res = await fetch(SNAPSHOT_URL, { credentials: 'same-origin', cache: 'no-store' });
    return res.status === 401;
  } catch {
    return false;
  }
}

/** The key prompt: the only thing shown until the frontend takes a key (body[data-auth] hides the panels). */
function showAuth(refused = false) {
  setConn('auth', 'API key needed');
  document.body.dataset.auth = 'needed';
  $('auth-form').hidden = false;
  $('auth-error').hidden = !refused;
  $('auth-input').focus();
}

$('auth-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const input = $('auth-input');
  const key = input.value.trim();
  if (!key) return;
  // The key goes once, as a header, to /dashboard/session, whose answer sets an HttpOnly cookie
  // that the stream and every fetch then carry (frontend/dashboard/dashboard-auth.ts): the key
  // is never in a URL, and the page keeps it nowhere (no storage; the cookie is not readable).
  let ok = false;
  try {
    const res = await fetch(SESSION_URL, { method: 'POST', headers: { authorization: `Bearer ${key}` }, credentials: 'same-origin', cache: 'no-store' });
    ok = res.ok;
  } catch {
    ok = false;
  }
  input.value = '';
  if (!ok) return showAuth(true);
  $('auth-form').hidden = true;
  delete document.body.dataset.auth;
  setConn('connecting');
  if (!source) connect();
});

setInterval(() => {
  if (lastFrameAt === 0) return;
  const age = Math.round((Date.now() - lastFrameAt) / 1000);
  $('snapshot-age').textContent = age <= 2 ? '' : `last update ${age} s ago`;
}, 1000);

// ---------------------------------------------------------------- request inspector

function bar(cls, label, ms, total) {
  if (ms === null || ms === undefined || ms <= 0 || total <= 0) return '';
  return `<span class="${cls}" style="width:${Math.max(2, (100 * ms) / total).toFixed(1)}%" title="${label} ${fmt(ms)} ms">${label} ${fmt(ms, 0)}</span>`;
}

function renderRequest(r) {
  const t = r.timings;
  const total = Math.max(t.totalMs, 1);
  // Named workers show as `agg-0 (<its 16-digit id>)`: the id stays findable in logs and headers.
  const named = (id) => (workerNames.has(id) ? `${workerNames.get(id)} (${id})` : id);
  const path = [r.prefillWorker ? `prefill ${named(r.prefillWorker)}` : '', ...r.workers.map((w, i) => `${r.prefillWorker ? 'decode' : 'worker'}${r.workers.length > 1 ? ` #${i + 1}` : ''} ${named(w)}`)].filter(Boolean);
  return `<div class="path">${bar('queue', 'queue', t.queueMs, total)}${bar('prefill', 'prefill', t.prefillMs, total)}${bar('transfer', 'transfer', t.transferMs, total)}${bar('decode', 'decode', t.decodeMs, total)}</div>
<dl class="kv">
<dt>model</dt><dd>${esc(r.model)}</dd>
${r.endpoint ? `<dt>endpoint</dt><dd data-testid="inspect-endpoint">${esc(r.endpoint)}</dd>` : ''}
<dt>path</dt><dd class="wid" data-testid="inspect-workers" data-workers="${esc(r.workers.join(','))}" data-prefill="${esc(r.prefillWorker ?? '')}">${path.map(esc).join(' → ')}</dd>
${r.inputs !== undefined ? `<dt>inputs</dt><dd data-testid="inspect-inputs">${num(r.inputs)}</dd>` : ''}
<dt>tokens</dt><dd>prompt ${num(r.promptTokens)} (cached <b data-testid="inspect-cached">${num(r.cachedTokens)}</b>) · completion ${num(r.completionTokens)}</dd>
<dt>timing ms</dt><dd>queue ${fmt(t.queueMs)} · prefill ${fmt(t.prefillMs)} · transfer ${fmt(t.transferMs)} · TTFT ${fmt(t.ttftMs)} · decode ${fmt(t.decodeMs)} · total ${fmt(t.totalMs)}</dd>
<dt>finish</dt><dd>${esc(r.finishReason ?? '—')}${r.error ? ` <span class="error">error ${esc(r.error)}</span>` : ''}${r.migrations ? ` · ${num(r.migrations)} migration(s)` : ''}</dd>
${r.routing ? `<dt>routing</dt><dd>${r.routing.candidates.map((c) => `${esc(workerLabel(c.instanceId))}${c.instanceId === r.routing.winner ? ' (winner)' : ''} overlap ${num(c.overlapBlocks)}${c.cost === null ? '' : ` cost ${fmt(c.cost, 2)}`}`).join(' · ')}</dd>` : ''}
<dt>started</dt><dd>${new Date(r.startedAt).toLocaleString()}</dd>
</dl>`;
}

async function inspect(id) {
  const out = $('inspect-result');
  out.dataset.found = '';
  out.textContent = 'looking up…';
  try {
    const res = await fetch(REQUEST_URL + encodeURIComponent(id), { credentials: 'same-origin', cache: 'no-store' });
    if (res.status === 404) {
      out.dataset.found = 'false';
      out.innerHTML = `<p class="muted">request <code>${esc(id)}</code> is not known here: still running (requests are recorded when they end), never seen by this frontend, or older than its last 4096</p>`;
      return;
    }
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    out.innerHTML = renderRequest(await res.json());
    out.dataset.found = 'true';
  } catch (err) {
    out.dataset.found = 'false';
    out.innerHTML = `<p class="error">${esc(err.message ?? String(err))}</p>`;
  }
}

$('inspect-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const id = $('inspect-input').value.trim();
  if (id) void inspect(id);
});
$('routing-decisions').addEventListener('click', (e) => {
  const id = e.target?.dataset?.inspect;
  if (!id) return;
  $('inspect-input').value = id;
  void inspect(id);
});

// `#key-refused`: the frontend sent a page load with a wrong `?api_key=` back here.
if (location.hash === '#key-refused') {
  history.replaceState(null, '', location.pathname + location.search);
  showAuth(true);
} else connect();
