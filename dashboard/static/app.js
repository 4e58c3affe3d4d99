// zpar dashboard: renders the state the controller pushes over a WebSocket (dashboard/state.py).
"use strict";

const PALETTE = ["#4f9cf7", "#a371f7", "#3fb950", "#f0883e", "#2ec4b6", "#db61a2",
  "#e3b341", "#79c0ff", "#56d364", "#ff7b72", "#d2a8ff", "#ffa657"];
const FAILED = "#f85149";
const dash = { state: null, bars: [], seq: 0, window: 60, charts: {}, socket: null };
window.zparDash = dash;

Chart.defaults.color = "#8391a5";
Chart.defaults.borderColor = "#263040";
Chart.defaults.font.size = 11;
Chart.defaults.animation = false;

const $ = (id) => document.getElementById(id);
const colourOf = (func) => PALETTE[(dash.state?.funcs?.[func] ?? 0) % PALETTE.length];
const clock = (t) => new Date(t * 1000).toLocaleTimeString([], { hour12: false });
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));

function bytes(n) {
  if (n == null) return "–";
  const u = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${u[i]}`;
}

function duration(s) {
  if (s == null) return "–";
  if (s < 1) return `${(s * 1000).toFixed(1)} ms`;
  if (s < 120) return `${s.toFixed(1)} s`;
  if (s < 7200) return `${Math.floor(s / 60)} min ${Math.floor(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

// -- charts ------------------------------------------------------------------------------

function makeCharts() {
  dash.charts.stream = new Chart($("stream"), {
    type: "bar",
    data: { labels: [], datasets: [] },
    options: {
      indexAxis: "y", maintainAspectRatio: false, parsing: { xAxisKey: "x", yAxisKey: "y" },
      datasets: { bar: { grouped: false, barPercentage: 0.9, categoryPercentage: 0.9, minBarLength: 2 } },
      scales: {
        x: { type: "linear", ticks: { callback: (v) => clock(v), maxTicksLimit: 8 } },
        y: { type: "category", grid: { display: false } },
      },
      plugins: {
        legend: { display: false },
        tooltip: {
          callbacks: {
            label: (c) => {
              const r = c.raw;
              return `${r.func} · ${r.msg_id} · ${duration(r.x[1] - r.x[0])}${r.failed ? " · FAILED" : ""}`;
            },
          },
        },
      },
    },
  });
  dash.charts.rate = new Chart($("rate-chart"), {
    type: "line",
    data: { labels: [], datasets: [
      { label: "tasks/s", data: [], borderColor: "#4f9cf7", backgroundColor: "rgba(79,156,247,.15)", fill: true, pointRadius: 0, tension: 0.25, yAxisID: "y" },
      { label: "failed/s", data: [], borderColor: FAILED, pointRadius: 0, yAxisID: "y" },
      { label: "latency (ms)", data: [], borderColor: "#e3b341", pointRadius: 0, borderDash: [4, 3], yAxisID: "y1", spanGaps: true },
    ] },
    options: {
      maintainAspectRatio: false,
      scales: {
        x: { ticks: { maxTicksLimit: 6 } },
        y: { beginAtZero: true, title: { display: true, text: "tasks/s" } },
        y1: { beginAtZero: true, position: "right", grid: { display: false }, title: { display: true, text: "ms" } },
      },
      plugins: { legend: { labels: { boxWidth: 10 } } },
    },
  });
  dash.charts.queues = new Chart($("queue-chart"), {
    type: "bar",
    data: { labels: [], datasets: [{ label: "tasks in hand", data: [], backgroundColor: "#a371f7" }] },
    options: { maintainAspectRatio: false, plugins: { legend: { display: false } }, scales: { y: { beginAtZero: true, ticks: { precision: 0 } } } },
  });
}

function drawStream(now) {
  const st = dash.state;
  const engines = st.engines;
  const labels = engines.map((e) => `engine ${e.id}`);
  const rowOf = new Map(engines.map((e) => [e.id, `engine ${e.id}`]));
  // the window, or less when the first bar is younger: the stream fills the chart
  const first = dash.bars.length ? dash.bars[0][2] : now;
  const from = Math.max(now - dash.window, Math.min(first, now - 10) - 1);
  const byFunc = new Map();
  for (const b of dash.bars) {
    const [, eid, start, end, func, failed, msgId] = b;
    if (end < from || !rowOf.has(eid)) continue;
    if (!byFunc.has(func)) byFunc.set(func, []);
    byFunc.get(func).push({ x: [start, Math.max(end, start)], y: rowOf.get(eid), func, failed: !!failed, msg_id: msgId });
  }
  const chart = dash.charts.stream;
  chart.data.labels = labels;
  chart.data.datasets = [...byFunc.entries()].map(([func, data]) => ({
    label: func, data,
    backgroundColor: colourOf(func),
    borderColor: (c) => (c.raw?.failed ? FAILED : colourOf(func)),
    borderWidth: (c) => (c.raw?.failed ? 2 : 0),
    borderSkipped: false,
  }));
  chart.options.scales.x.min = from;
  chart.options.scales.x.max = now;
  chart.update("none");
  let drawn = 0;
  chart.data.datasets.forEach((_, i) => { drawn += chart.getDatasetMeta(i).data.length; });
  $("stream").dataset.bars = drawn;
  const funcs = Object.keys(st.funcs);
  $("legend").innerHTML = funcs.map((f) => `<span><i style="background:${colourOf(f)}"></i>${esc(f)}</span>`).join("")
    + '<span class="failed"><i></i>failed</span>';
}

function drawRate() {
  const s = dash.state.series;
  const chart = dash.charts.rate;
  chart.data.labels = s.t.map(clock);
  chart.data.datasets[0].data = s.rate;
  chart.data.datasets[1].data = s.failed;
  chart.data.datasets[2].data = s.latency_ms;
  chart.update("none");
}

// -- tables ------------------------------------------------------------------------------

function drawEngines() {
  const rows = dash.state.engines.map((e) => {
    const cpu = e.cpu == null ? "–" : `<span class="meter"><i style="width:${Math.min(100, e.cpu)}%"></i></span>${e.cpu.toFixed(0)}%`;
    return `<tr data-engine="${e.id}" data-state="${e.state}"><td>${e.id}</td><td>${esc(e.host)}</td><td>${e.pid}</td>`
      + `<td><span class="state ${e.state}" title="${esc(e.reason)}">${e.state}</span></td><td>${e.in_hand}</td>`
      + `<td>${cpu}</td><td>${bytes(e.rss)}</td><td>${e.done}</td><td>${e.failed}</td><td>${duration(e.uptime)}</td></tr>`;
  });
  $("engines").tBodies[0].innerHTML = rows.join("") || '<tr><td colspan="10" class="empty">no engine yet</td></tr>';
}

function drawProgress() {
  const cs = dash.state.clients;
  $("progress").innerHTML = cs.map((c) => {
    const n = Math.max(1, c.submitted);
    const ok = ((c.finished - c.failed) / n) * 100;
    const bad = (c.failed / n) * 100;
    return `<div class="progress-row" data-client="${c.client}"><div class="head"><span>client ${c.client.slice(0, 10)}</span>`
      + `<span>${c.finished} / ${c.submitted}${c.failed ? ` · <b class="status-error">${c.failed} failed</b>` : ""} · ${c.pending} pending</span></div>`
      + `<div class="bar"><div class="done" style="width:${ok}%"></div><div class="failed" style="width:${bad}%"></div></div></div>`;
  }).join("") || '<div class="empty">no client has sent work yet</div>';
}

function drawQueues() {
  const q = dash.state.queues;
  const chart = dash.charts.queues;
  chart.data.labels = Object.keys(q.engines).map((id) => `engine ${id}`);
  chart.data.datasets[0].data = Object.values(q.engines);
  chart.update("none");
  const clients = Object.entries(q.clients).map(([c, n]) => `<span class="k">client ${c.slice(0, 10)}</span><span>${n} pending</span>`);
  $("queues").innerHTML = `<span class="k">in the scheduler, no engine yet</span><span>${q.unassigned}</span>` + clients.join("");
}

function drawController() {
  const st = dash.state;
  const m = st.memory;
  const t = st.totals;
  $("memory").innerHTML = `<span class="k">hub (controller process)</span><span>${bytes(m.controller)}</span>`
    + `<span class="k">task scheduler</span><span>${bytes(m.scheduler)}</span>`
    + Object.entries(t).map(([k, v]) => `<span class="k">tasks ${esc(k)}</span><span>${v}</span>`).join("")
    + (st.dropped_events ? `<span class="k">events dropped</span><span>${st.dropped_events}</span>` : "");
  const rows = [];
  for (const [proc, reasons] of Object.entries(st.refusals)) {
    for (const [reason, n] of Object.entries(reasons)) rows.push(`<tr><td>${esc(proc)}</td><td>${esc(reason)}</td><td>${n}</td></tr>`);
  }
  $("refusals").tBodies[0].innerHTML = rows.join("") || '<tr><td colspan="3" class="empty">none refused</td></tr>';
  const comms = st.extras.communicators || [];
  $("extras").innerHTML = (comms.length
    ? `<table><thead><tr><th>communicator</th><th>size</th><th>joined</th><th>state</th></tr></thead><tbody>${comms.map((c) => `<tr><td>${esc(c.comm_id)}</td><td>${c.size ?? "?"}</td><td>${c.members}</td><td>${c.state}</td></tr>`).join("")}</tbody></table>`
    : '<div class="empty">no communicator rendezvous at the hub now</div>')
    + '<div class="dim" style="margin-top:6px">Distributed arrays and typed-call registries live on the engines; the hub does not see them.</div>';
}

function drawHeader() {
  const st = dash.state;
  const t = st.totals;
  const failed = Object.entries(t).filter(([k]) => !["ok", "submitted", "retried"].includes(k)).reduce((a, [, v]) => a + v, 0);
  const done = Object.entries(t).filter(([k]) => !["submitted", "retried"].includes(k)).reduce((a, [, v]) => a + v, 0);
  const s = st.series.rate;
  $("engine-count").textContent = st.engine_count;
  $("busy-count").textContent = st.busy;
  $("rate").textContent = s.length ? s[s.length - 1] : 0;
  $("done-count").textContent = done;
  $("failed-count").textContent = failed;
  $("failed-count").classList.toggle("bad", failed > 0);
  $("queued-count").textContent = Object.values(st.queues.engines).reduce((a, b) => a + b, st.queues.unassigned);
}

function render(msg) {
  dash.state = msg;
  for (const b of msg.bars) if (b[0] > dash.seq) dash.bars.push(b);
  dash.seq = msg.seq;
  // the newest max_bars only, as the controller keeps (dask's status page draws 1,000 too)
  if (dash.bars.length > msg.max_bars) dash.bars = dash.bars.slice(-msg.max_bars);
  drawHeader();
  drawEngines();
  drawStream(msg.now);
  drawProgress();
  drawRate();
  drawQueues();
  drawController();
  document.body.dataset.updated = String(msg.now);
}

// -- the task table ----------------------------------------------------------------------

async function search(ev) {
  ev?.preventDefault();
  const q = new URLSearchParams(new FormData($("search")));
  const res = await fetch(`api/tasks?${q}`, { credentials: "same-origin" });
  const rows = res.ok ? await res.json() : [];
  $("tasks").tBodies[0].innerHTML = rows.map((r) => `<tr class="clickable" data-msg-id="${esc(r.msg_id)}">`
    + `<td>${esc(r.msg_id)}</td><td>${esc(r.func)}</td><td>${esc(r.label)}</td><td class="status-${esc(r.status)}">${esc(r.status)}</td>`
    + `<td>${r.engine ?? "–"}</td><td>${r.started ? clock(r.started) : "–"}</td><td>${r.started && r.completed ? duration(r.completed - r.started) : "–"}</td></tr>`).join("")
    || '<tr><td colspan="7" class="empty">no task matches</td></tr>';
  if (rows.length === 1) showTask(rows[0].msg_id);
}

async function showTask(msgId) {
  const res = await fetch(`api/task/${encodeURIComponent(msgId)}`, { credentials: "same-origin" });
  if (!res.ok) return;
  const r = await res.json();
  $("task-detail").hidden = false;
  $("detail-title").textContent = `${r.msg_id} · ${r.func} · ${r.status}${r.engine != null ? ` · engine ${r.engine}` : ""}`;
  $("traceback").textContent = r.traceback || r.error || "no error: the task succeeded";
}

$("search").addEventListener("submit", search);
$("tasks").addEventListener("click", (ev) => {
  const tr = ev.target.closest("tr[data-msg-id]");
  if (tr) showTask(tr.dataset.msgId);
});
document.querySelectorAll("[data-window]").forEach((b) => b.addEventListener("click", () => {
  dash.window = Number(b.dataset.window);
  document.querySelectorAll("[data-window]").forEach((x) => x.classList.toggle("on", x === b));
  if (dash.state) drawStream(dash.state.now);
}));

// -- the live feed -----------------------------------------------------------------------

function connect() {
  const url = new URL("ws", window.location.href);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(url);
  dash.socket = ws;
  ws.onopen = () => { $("live").className = "live on"; $("live").textContent = "live"; };
  ws.onmessage = (ev) => render(JSON.parse(ev.data));
  ws.onclose = () => {
    $("live").className = "live off";
    $("live").textContent = "disconnected: retrying";
    setTimeout(connect, 2000);
  };
}

makeCharts();
connect();
search();
