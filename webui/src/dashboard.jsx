// Live dashboard: polls /metrics (open without the API key, as on vLLM) once a second and keeps
// the last 5 minutes as time series drawn with uPlot.
import { useEffect, useRef, useState } from 'preact/hooks';
import uPlot from 'uplot';

import { getText } from './api.js';
import { derive, parsePrometheus } from './metrics.js';

const POLL_MS = 1000;
const KEEP = 300;

const fmt = (v, digits = 1) => (v === undefined || v === null || Number.isNaN(v) ? '–' : Number(v).toFixed(digits));
const pct = (v) => (v === undefined || Number.isNaN(v) ? '–' : `${(100 * v).toFixed(1)}%`);
const ms = (v) => (v === undefined ? '–' : `${(1000 * v).toFixed(v < 0.01 ? 2 : 1)} ms`);

const compact = new Intl.NumberFormat('en', { notation: 'compact', maximumFractionDigits: 1 });

// One uPlot chart over series [t, ...ys]; redrawn when `data` changes.
function Chart({ title, series, data, id }) {
  const el = useRef(null);
  const plot = useRef(null);
  useEffect(() => {
    const width = Math.max(260, el.current.clientWidth || 320);
    const colors = ['#1d4ed8', '#b45309', '#047857', '#9d174d'];
    plot.current = new uPlot({
      width,
      height: 160,
      legend: { show: true },
      scales: { x: { time: true } },
      series: [{}, ...series.map((label, i) => ({ label, stroke: colors[i % colors.length], width: 2, spanGaps: true }))],
      // Compact tick labels (18.7K, not a 6-digit number cut to fit the axis).
      axes: [{ stroke: 'currentColor' }, { stroke: 'currentColor', size: 50, values: (u, ticks) => ticks.map((v) => compact.format(v)) }],
    }, data, el.current);
    const resize = () => {
      // Refs may already be cleared when a resize races the unmount.
      if (el.current && plot.current) plot.current.setSize({ width: Math.max(260, el.current.clientWidth), height: 160 });
    };
    window.addEventListener('resize', resize);
    return () => {
      window.removeEventListener('resize', resize);
      plot.current.destroy();
      plot.current = null;
    };
  }, []);
  useEffect(() => {
    if (plot.current) plot.current.setData(data);
  }, [data]);
  return (
    <figure class="chart" id={id} data-points={data[0].length}>
      <figcaption>{title}</figcaption>
      <div ref={el} role="img" aria-label={`${title}: chart of the last ${data[0].length} samples`} />
    </figure>
  );
}

function Stat({ label, value, id }) {
  return (
    <div class="stat">
      <div class="stat-label">{label}</div>
      <div class="stat-value" id={id}>{value}</div>
    </div>
  );
}

export function Dashboard() {
  const [d, setD] = useState(null);
  const [error, setError] = useState('');
  const [series, setSeries] = useState({ t: [], tokIn: [], tokOut: [], reqRate: [], running: [], waiting: [], kv: [], mbu: [], mfu: [] });
  useEffect(() => {
    let prev = null;
    let prevT = 0;
    let stopped = false;
    let timer = 0;
    const poll = async () => {
      try {
        const text = await getText('/metrics');
        const now = performance.now();
        const cur = parsePrometheus(text);
        const x = derive(cur, prev, (now - prevT) / 1000);
        prev = cur;
        prevT = now;
        if (stopped) return;
        setError('');
        setD(x);
        setSeries((s) => {
          const push = (arr, v) => [...arr.slice(-(KEEP - 1)), v ?? null];
          return {
            t: push(s.t, Date.now() / 1000),
            tokIn: push(s.tokIn, x.tokInRate),
            tokOut: push(s.tokOut, x.tokOutRate),
            reqRate: push(s.reqRate, x.reqRate),
            running: push(s.running, x.running),
            waiting: push(s.waiting, x.waiting),
            kv: push(s.kv, x.kvUsage === undefined ? undefined : 100 * x.kvUsage),
            mbu: push(s.mbu, x.mbu === undefined ? undefined : 100 * x.mbu),
            mfu: push(s.mfu, x.mfu === undefined ? undefined : 100 * x.mfu),
          };
        });
      } catch (e) {
        if (!stopped) setError(`cannot read /metrics: ${e.message}`);
      }
      if (!stopped) timer = setTimeout(poll, POLL_MS);
    };
    poll();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, []);

  return (
    <main class="dashboard" aria-labelledby="dash-title">
      <h1 id="dash-title">{d && d.router ? 'Router' : 'Server'} dashboard</h1>
      {error && <p class="error" role="alert">{error}</p>}
      {d && (
        <section class="stats" aria-label="Current values">
          <Stat id="stat-running" label="Running" value={fmt(d.running, 0)} />
          <Stat id="stat-waiting" label="Waiting" value={fmt(d.waiting, 0)} />
          {d.router && <Stat id="stat-req-rate" label="Requests/s routed" value={fmt(d.reqRate)} />}
          {!d.router && <Stat id="stat-tok-out" label="Tokens/s out" value={fmt(d.tokOutRate)} />}
          {!d.router && <Stat id="stat-tok-in" label="Tokens/s in" value={fmt(d.tokInRate)} />}
          {!d.router && <Stat label="K/V blocks used / total" value={`${fmt(d.kvUsed, 0)} / ${fmt(d.kvTotal, 0)}`} />}
          {!d.router && <Stat label="Prefix-cache hit rate" value={pct(d.prefixHit)} />}
          {!d.router && <Stat label="Speculation acceptance" value={pct(d.specAccept)} />}
          {!d.router && <Stat label="TTFT p50 / p90 / p99" value={d.ttft.map(ms).join(' / ')} />}
          {!d.router && <Stat label="TPOT (ITL) p50 / p90 / p99" value={d.itl.map(ms).join(' / ')} />}
          {!d.router && <Stat label="MBU / MFU (since start)" value={`${pct(d.mbuAll)} / ${pct(d.mfuAll)}`} />}
        </section>
      )}
      {d && d.router && (
        <section aria-labelledby="backends-title">
          <h2 id="backends-title">Backends</h2>
          <div class="table-wrap">
            <table>
              <thead><tr><th scope="col">Backend</th><th scope="col">Health</th><th scope="col">In flight</th><th scope="col">Running</th><th scope="col">Waiting</th><th scope="col">Requests</th><th scope="col">Routed share</th><th scope="col">Failures</th></tr></thead>
              <tbody>
                {d.backends.map((b) => (
                  <tr key={b.backend}>
                    <td>{b.backend}</td>
                    <td class={b.healthy ? 'ok' : 'bad'}>{b.healthy ? 'healthy' : 'out'}</td>
                    <td>{fmt(b.inFlight, 0)}</td>
                    <td>{b.running < 0 ? '?' : fmt(b.running, 0)}</td>
                    <td>{b.waiting < 0 ? '?' : fmt(b.waiting, 0)}</td>
                    <td>{fmt(b.requests, 0)}</td>
                    <td>{pct(b.share)}</td>
                    <td>{fmt(b.failures, 0)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </section>
      )}
      <section class="charts" aria-label="Time series">
        {d && d.router
          ? <Chart key="rr" id="chart-router" title="Requests/s routed" series={['requests/s']} data={[series.t, series.reqRate]} />
          : <Chart key="tok" id="chart-tokens" title="Tokens/s" series={['in (prompt)', 'out (generated)']} data={[series.t, series.tokIn, series.tokOut]} />}
        <Chart id="chart-requests" title="Requests" series={['running', 'waiting']} data={[series.t, series.running, series.waiting]} />
        {!(d && d.router) && <Chart id="chart-kv" title="K/V cache usage %" series={['used']} data={[series.t, series.kv]} />}
        {!(d && d.router) && <Chart id="chart-roofline" title="MBU / MFU % against the roofline, per interval" series={['MBU (memory-bound steps)', 'MFU (compute-bound steps)']} data={[series.t, series.mbu, series.mfu]} />}
      </section>
      {d && !d.router && d.mbuAll === undefined && (
        <p class="note">MBU and MFU need this machine's measured ceilings: run <code>sluice bench --roofline</code> once, then restart the server.</p>
      )}
    </main>
  );
}
