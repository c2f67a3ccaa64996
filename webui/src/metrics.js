// Prometheus text (format 0.0.4) -> samples, and the dashboard's numbers derived from two
// successive scrapes of `sluice serve`'s or `sluice router`'s /metrics (docs/server.md,
// docs/router.md).

// -> Map(name -> [{labels: {k: v}, value}])
export function parsePrometheus(text) {
  const out = new Map();
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    if (m[3]) for (const l of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    const value = m[4] === '+Inf' ? Infinity : m[4] === '-Inf' ? -Infinity : Number(m[4]);
    if (!out.has(m[1])) out.set(m[1], []);
    out.get(m[1]).push({ labels, value });
  }
  return out;
}

// Sum of a family's samples whose labels include `match`; undefined when absent.
export function sum(s, name, match = {}) {
  const rows = s.get(name);
  if (!rows) return undefined;
  let v = 0;
  let any = false;
  for (const r of rows) {
    if (Object.entries(match).every(([k, x]) => r.labels[k] === x)) {
      v += r.value;
      any = true;
    }
  }
  return any ? v : undefined;
}

// Quantile q of a histogram from its cumulative buckets (linear inside a bucket, as
// Prometheus' histogram_quantile). `prev` (an earlier scrape) makes it over the interval.
export function histogramQuantile(s, name, q, prev) {
  const rows = (s.get(`${name}_bucket`) || []).map((r) => ({ le: Number(r.labels.le === '+Inf' ? Infinity : r.labels.le), v: r.value }));
  if (!rows.length) return undefined;
  if (prev) {
    const before = new Map((prev.get(`${name}_bucket`) || []).map((r) => [r.labels.le, r.value]));
    for (const r of rows) r.v -= before.get(r.le === Infinity ? '+Inf' : String(r.le)) ?? 0;
  }
  rows.sort((a, b) => a.le - b.le);
  const total = rows[rows.length - 1].v;
  if (!(total > 0)) return undefined;
  const rank = q * total;
  let lo = 0;
  let below = 0;
  for (const r of rows) {
    if (r.v >= rank) {
      if (r.le === Infinity) return lo;
      return lo + (r.le - lo) * ((rank - below) / Math.max(r.v - below, 1e-12));
    }
    lo = r.le;
    below = r.v;
  }
  return lo;
}

const rate = (cur, prev, name, dt, match) => {
  const a = sum(cur, name, match);
  const b = sum(prev, name, match);
  return a === undefined || b === undefined || dt <= 0 ? undefined : Math.max(0, a - b) / dt;
};

// Per-interval ratio of two counters' increases (MBU: roofline seconds / measured seconds of
// the memory-bound steps in the interval).
const ratioOfRates = (cur, prev, num, den, match) => {
  const dn = (sum(cur, num, match) ?? NaN) - (sum(prev, num, match) ?? NaN);
  const dd = (sum(cur, den, match) ?? NaN) - (sum(prev, den, match) ?? NaN);
  return dd > 0 ? dn / dd : undefined;
};

// The dashboard's view of one scrape, `prev` the one before it (or null), `dt` seconds apart.
export function derive(cur, prev, dt) {
  const d = {
    router: cur.has('sluice_router_backend_healthy'),
    running: sum(cur, 'sluice_num_requests_running'),
    waiting: sum(cur, 'sluice_num_requests_waiting'),
    kvUsed: sum(cur, 'sluice_kv_blocks_used'),
    kvTotal: sum(cur, 'sluice_kv_blocks_total'),
    kvUsage: sum(cur, 'sluice_kv_cache_usage_ratio'),
    prefixHit: sum(cur, 'sluice_prefix_cache_hit_ratio'),
    // Without drafts (no speculation configured) the ratio means nothing: shown as '–'.
    specAccept: sum(cur, 'sluice_spec_draft_tokens_total') > 0 ? sum(cur, 'sluice_spec_acceptance_ratio') : undefined,
    mbuAll: sum(cur, 'sluice_engine_mbu'),
    mfuAll: sum(cur, 'sluice_engine_mfu'),
    ttft: [0.5, 0.9, 0.99].map((q) => histogramQuantile(cur, 'sluice_time_to_first_token_seconds', q)),
    itl: [0.5, 0.9, 0.99].map((q) => histogramQuantile(cur, 'sluice_inter_token_latency_seconds', q)),
    generated: sum(cur, 'sluice_generation_tokens_total'),
  };
  if (prev) {
    d.tokInRate = rate(cur, prev, 'sluice_prompt_tokens_computed_total', dt);
    d.tokOutRate = rate(cur, prev, 'sluice_generation_tokens_total', dt);
    d.mbu = ratioOfRates(cur, prev, 'sluice_engine_roofline_seconds_total', 'sluice_engine_forward_seconds_total', { bound: 'memory' });
    d.mfu = ratioOfRates(cur, prev, 'sluice_engine_roofline_seconds_total', 'sluice_engine_forward_seconds_total', { bound: 'compute' });
  }
  if (d.router) {
    const backends = (cur.get('sluice_router_backend_healthy') || []).map((r) => r.labels.backend);
    const total = sum(cur, 'sluice_router_requests_total') || 0;
    d.backends = backends.map((b) => {
      const m = { backend: b };
      const requests = sum(cur, 'sluice_router_requests_total', m) || 0;
      return {
        backend: b,
        healthy: sum(cur, 'sluice_router_backend_healthy', m) === 1,
        inFlight: sum(cur, 'sluice_router_in_flight', m),
        running: sum(cur, 'sluice_router_backend_running', m),
        waiting: sum(cur, 'sluice_router_backend_waiting', m),
        requests,
        share: total > 0 ? requests / total : undefined,
        failures: sum(cur, 'sluice_router_failures_total', m),
      };
    });
    if (prev) d.reqRate = rate(cur, prev, 'sluice_router_requests_total', dt);
    d.running = d.backends.reduce((a, b) => a + Math.max(0, b.running ?? 0), 0);
    d.waiting = d.backends.reduce((a, b) => a + Math.max(0, b.waiting ?? 0), 0);
  }
  return d;
}
