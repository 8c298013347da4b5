// Multiplane dashboard: REST for the lists, /api/v1/stream for live changes.
"use strict";
const $ = (id) => document.getElementById(id);
let token = localStorage.getItem("multiplane.token") || "";
let streamAbort = null;
let pageTimer = null, chart = null; // the open page's refresh and chart
let lastEventId = "";  // resume point: the stream resends what came after it
let asOf = 0;          // when the shown figures were true (ms since the epoch)
const STALE_MS = 3000; // no summary for this long: the figures are stale

// when shows a time with its date and zone.
const when = (t) => new Date(t).toLocaleString(undefined, {
  year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short" });

function cell(text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) { const s = document.createElement("span"); s.className = "state " + cls; s.textContent = text; td.textContent = ""; td.append(s); }
  return td;
}
const pct = (x) => (100 * (x || 0)).toFixed(1) + "%";
function linkCell(text, href) {
  const td = document.createElement("td"), a = document.createElement("a");
  a.href = href; a.textContent = text; td.append(a);
  return td;
}
function table(headers, rows) {
  const t = document.createElement("table"), thead = t.createTHead().insertRow(), tb = t.createTBody();
  headers.forEach((h) => { const th = document.createElement("th"); th.textContent = h; thead.append(th); });
  rows.forEach((cells) => { const tr = tb.insertRow(); tr.append(...cells); });
  return t;
}
function section(title, ...children) {
  const s = document.createElement("section"), h = document.createElement("h2");
  h.textContent = title; s.append(h, ...children);
  return s;
}
const para = (text, id) => { const p = document.createElement("p"); p.textContent = text; if (id) p.id = id; return p; };
const gbps = (b) => (b || 0) >= 1e9 ? (b / 1e9).toFixed(1) + " Gbit/s" : ((b || 0) / 1e6).toFixed(0) + " Mbit/s";

async function api(path, method = "GET", body) {
  const opts = { method, headers: { Authorization: "Bearer " + token } };
  if (body !== undefined) { opts.body = JSON.stringify(body); opts.headers["Content-Type"] = "application/json"; }
  const r = await fetch(path, opts);
  const out = r.status === 204 ? {} : await r.json();
  if (!r.ok) throw new Error(out.error ? out.error.message : r.statusText);
  return out;
}

// Drains: preview what a drain changes, confirm it, end it. Only roles
// that may operate see the actions (GET /api/v1/whoami).
let canOperate = false, canAdminister = false;
function renderDrains(items) {
  $("drains").tBodies[0].replaceChildren(...items.map((d) => {
    const tr = document.createElement("tr");
    tr.append(cell(String(d.id)), cell(`${d.subject_kind} ${d.subject}`), cell(d.reason), cell(d.created_by), cell(when(d.created_at)));
    const td = document.createElement("td");
    td.className = "operator-only";
    if (canOperate) {
      const b = document.createElement("button");
      b.type = "button"; b.textContent = "End"; b.setAttribute("aria-label", `End drain ${d.id} of ${d.subject_kind} ${d.subject}`);
      b.addEventListener("click", () => api(`/api/v1/drains/${d.id}`, "DELETE").then(loadDrains).catch(show));
      td.append(b);
    }
    tr.append(td);
    return tr;
  }));
}
const loadDrains = async () => renderDrains((await api("/api/v1/drains?limit=1000")).items);
let pending = null; // the drain previewed, to confirm
$("drain-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  pending = { subject_kind: "plane", subject: $("drain-plane").value, reason: $("drain-reason").value.trim() };
  try {
    const r = await api("/api/v1/drains?dry_run=true", "POST", pending);
    const aff = r.impact.affected || [];
    const left = aff.length ? aff.reduce((s, a) => s + a.capacity_after, 0) / aff.length : 1;
    // Projected load: today's traffic on the usable planes, over what is
    // left of their capacity without the drained one.
    const usable = lastPlanes.filter((p) => p.state !== "down" && p.state !== "draining");
    const traffic = usable.reduce((s, p) => s + p.utilization * p.capacity_bps, 0);
    const remaining = usable.filter((p) => p.name !== pending.subject).reduce((s, p) => s + p.capacity_bps, 0);
    const load = remaining > 0 ? `the other usable planes would carry about ${pct(traffic / remaining)} of their capacity` : "no usable plane would be left";
    $("drain-summary").textContent = `Draining plane ${pending.subject} changes ${aff.length} endpoints' path sets` +
      `, strands ${(r.impact.stranded || []).length}; they keep ${pct(left)} of their port capacity on average; ${load}.`;
    $("impact").tBodies[0].replaceChildren(...aff.map((a) => {
      const tr = document.createElement("tr");
      tr.append(cell(a.endpoint), cell(a.planes_before.join(", ")), cell(a.planes_after.join(", ")), cell(pct(a.capacity_before)), cell(pct(a.capacity_after)));
      return tr;
    }));
    $("drain-impact").hidden = false;
    $("drain-confirm").focus();
  } catch (e) { show(e); }
});
$("drain-confirm").addEventListener("click", async () => {
  try { await api("/api/v1/drains", "POST", pending); $("drain-impact").hidden = true; pending = null; await loadDrains(); } catch (e) { show(e); }
});
$("drain-cancel").addEventListener("click", () => { $("drain-impact").hidden = true; pending = null; });

let lastPlanes = [];
// replaceRows re-renders a table body of rows keyed by data-plane without
// taking the keyboard focus away: live updates re-render every second,
// and a focused link or button would be lost with its row.
function replaceRows(tb, rows) {
  const active = document.activeElement, tr = active && tb.contains(active) ? active.closest("tr") : null;
  const idx = tr ? [...tr.querySelectorAll("a, button")].indexOf(active) : -1;
  tb.replaceChildren(...rows);
  if (tr && idx >= 0) {
    const again = [...tb.rows].find((r) => r.dataset.plane === tr.dataset.plane);
    again?.querySelectorAll("a, button")[idx]?.focus();
  }
}

function renderPlanes(items, sample) {
  lastPlanes = items;
  renderTiles(items, sample);
  const sel = $("drain-plane");
  if (sel.options.length !== items.length) {
    sel.replaceChildren(...items.map((p) => { const o = document.createElement("option"); o.value = o.textContent = p.name; return o; }));
    const ev = $("ev-plane"), keep = ev.value;
    ev.replaceChildren(new Option("all", ""), ...items.map((p) => new Option(p.name, p.name)));
    ev.value = keep;
  }
  replaceRows($("planes").tBodies[0], items.map((p) => {
    const tr = document.createElement("tr");
    tr.dataset.plane = p.name;
    tr.append(linkCell(p.name, "#/plane/" + encodeURIComponent(p.name)), cell(p.state, p.state), cell(`${p.links_up} / ${p.links_degraded} / ${p.links_down}`),
      cell(`${gbps(p.capacity_bps)} (${pct(p.capacity_ratio)})`), cell(pct(p.utilization)), cell(pct(p.loss_rate)), cell(pct(p.ecn_rate)));
    return tr;
  }));
}

// Tiles: every plane's state in text and colour, its figures and a
// sparkline of its utilisation over the last minutes (seeded from the
// series API, then a point per summary). The window grows from one
// minute to five as samples arrive, so a fresh page is not a sliver.
const SPARK_POINTS = 300, SPARK_MIN_POINTS = 60;
const spark = new Map(); // plane → utilisation samples, oldest first
function sparkline(values) {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  const width = Math.max(SPARK_MIN_POINTS, values.length);
  svg.setAttribute("viewBox", `0 0 ${width - 1} 100`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("aria-hidden", "true");
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  const off = width - values.length;
  line.setAttribute("points", values.map((v, i) => `${off + i},${(100 - 100 * Math.min(1, Math.max(0, v))).toFixed(1)}`).join(" "));
  svg.append(line);
  return svg;
}
function renderTiles(items, sample) {
  $("tiles").replaceChildren(...items.map((p) => {
    const vals = spark.get(p.name) || [];
    if (sample) { vals.push(p.utilization || 0); if (vals.length > SPARK_POINTS) vals.splice(0, vals.length - SPARK_POINTS); spark.set(p.name, vals); }
    const li = document.createElement("li"), h = document.createElement("h3"), a = document.createElement("a"), st = document.createElement("span");
    li.className = "tile " + p.state; li.dataset.plane = p.name;
    a.href = "#/plane/" + encodeURIComponent(p.name); a.textContent = p.name;
    st.className = "state " + p.state; st.textContent = p.state;
    h.append(a, st);
    const figs = para(`${pct(p.utilization)} used of ${gbps(p.capacity_bps)} · loss ${pct(p.loss_rate)} · ECN ${pct(p.ecn_rate)}`);
    figs.className = "figs";
    li.append(h, figs, sparkline(vals));
    return li;
  }));
}
async function seedSparks(items) {
  await Promise.all(items.map(async (p) => {
    const s = await api(`/api/v1/planes/${encodeURIComponent(p.name)}/series?since=5m`);
    spark.set(p.name, s.utilization.slice(-SPARK_POINTS));
  }));
}
// The fabric line: generation, how many endpoints applied it, drains.
async function loadFabricLine() {
  const [c, d] = await Promise.all([api("/api/v1/convergence"), api("/api/v1/drains?limit=1000")]);
  $("fabric-line").textContent = `generation ${c.target_generation}: ${c.applied} of ${c.endpoints} endpoints applied it; ` +
    (d.items.length ? `${d.items.length} active drain${d.items.length > 1 ? "s" : ""} (${d.items.map((x) => x.target).join(", ")})` : "no active drains");
}

// Demo control (fabricd run by bin/demo only): fail and restore a plane,
// or one endpoint's port, of the emulated fabric.
let demoMode = false;
function renderDemo(st) {
  replaceRows($("demo-planes").tBodies[0], st.planes.map((p) => {
    const tr = document.createElement("tr");
    tr.dataset.plane = p.name;
    tr.append(cell(p.name), cell(p.up ? "up" : "down", p.up ? "up" : "down"), cell(p.ports_down.join(", ") || "–"));
    const td = document.createElement("td");
    td.className = "operator-only";
    if (canOperate) {
      const b = document.createElement("button"), action = p.up ? "fail" : "restore";
      b.type = "button"; b.textContent = p.up ? "Fail plane" : "Restore plane";
      b.setAttribute("aria-label", `${b.textContent} ${p.name}`);
      b.addEventListener("click", () => api(`/api/v1/demo/${action}`, "POST", { plane: p.name }).then(renderDemo).catch(show));
      td.append(b);
    }
    tr.append(td);
    return tr;
  }));
  const sel = $("demo-port-plane");
  if (sel.options.length !== st.planes.length) sel.replaceChildren(...st.planes.map((p) => new Option(p.name, p.name)));
}
const loadDemo = async () => { if (demoMode) renderDemo(await api("/api/v1/demo")); };
$("demo-port-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const action = ev.submitter && ev.submitter.value === "restore" ? "restore" : "fail";
  api(`/api/v1/demo/${action}`, "POST", { plane: $("demo-port-plane").value, endpoint: $("demo-endpoint").value }).then(renderDemo).catch(show);
});
setInterval(() => { if (token && !$("overview").hidden) { loadDemo().catch(show); loadFabricLine().catch(show); } }, 2000);

function renderSwitches(items) {
  $("switches").tBodies[0].replaceChildren(...items.map((s) => {
    const tr = document.createElement("tr");
    tr.append(cell(s.name), cell(s.plane), cell(s.state, s.state), cell(s.reachable ? "streaming" : "unreachable", s.reachable ? "up" : "down"),
      cell(s.last_update ? when(s.last_update) : "–"));
    return tr;
  }));
}

function addEvent(e) {
  if (e.id && document.querySelector(`#events li[data-id="${e.id}"]`)) return; // already shown
  const li = document.createElement("li");
  if (e.id) li.dataset.id = e.id;
  li.textContent = `${when(e.at)} ${e.subject_kind} ${e.subject}: ${e.from || "?"} → ${e.to} ${e.reason ? "(" + e.reason + ")" : ""}`;
  $("events").prepend(li);
  while ($("events").children.length > 200) $("events").lastChild.remove();
}

async function refresh() {
  const me = await api("/api/v1/whoami");
  canOperate = me.can.includes("operate");
  canAdminister = me.can.includes("administer");
  document.body.classList.toggle("can-operate", canOperate);
  document.body.classList.toggle("can-administer", canAdminister);
  demoMode = !!me.demo;
  $("demo-section").hidden = !demoMode;
  const [planes, switches] = await Promise.all([api("/api/v1/planes"), api("/api/v1/switches?limit=1000")]);
  await seedSparks(planes.items);
  renderPlanes(planes.items);
  renderSwitches(switches.items);
  await Promise.all([loadDrains(), loadFabricLine()]);
  if (demoMode) {
    const eps = await api("/api/v1/endpoints?limit=1000");
    const sel = $("demo-endpoint");
    if (sel.options.length !== eps.items.length) sel.replaceChildren(...eps.items.map((e) => new Option(e.name, e.name)));
    await loadDemo();
  }
  const newest = await loadEvents();
  if (!lastEventId && newest) lastEventId = String(newest);
  fresh(Date.now());
}

// loadEvents shows the newest 200 events the filter selects, newest
// first; it returns the newest id. Only the latest call's answer is
// shown: an earlier filter's slower answer must not replace it.
let eventsLoad = 0;
async function loadEvents() {
  const mine = ++eventsLoad;
  const q = new URLSearchParams({ order: "desc", limit: "200", since: new Date(Date.now() - 1000 * Number($("ev-since").value)).toISOString() });
  if ($("ev-plane").value) q.set("plane", $("ev-plane").value);
  if ($("ev-kind").value) q.set("subject_kind", $("ev-kind").value);
  if ($("ev-subject").value.trim()) q.set("subject", $("ev-subject").value.trim());
  const events = await api("/api/v1/events?" + q);
  if (mine !== eventsLoad) return 0;
  $("events").replaceChildren();
  events.items.slice().reverse().forEach(addEvent);
  return events.items.length ? events.items[0].id : 0;
}
const filtered = () => $("ev-plane").value !== "" || $("ev-kind").value !== "" || $("ev-subject").value.trim() !== "";
let eventReload = null; // a filtered list reloads (debounced) on new transitions
$("event-filter").addEventListener("change", () => loadEvents().catch(show));
$("event-filter").addEventListener("submit", (e) => { e.preventDefault(); loadEvents().catch(show); });

// fresh records when the figures were true and shows it; stale marks
// them when no summary came for STALE_MS (the stream or fabricd is gone).
function fresh(t) {
  asOf = t;
  $("asof").textContent = "as of " + when(t);
  document.body.classList.remove("stale");
}
function stale() {
  if (!asOf) return;
  document.body.classList.add("stale");
  $("asof").textContent = "stale: as of " + when(asOf);
}
setInterval(() => { if (asOf && Date.now() - asOf > STALE_MS) stale(); }, 1000);

// follow reads the server-sent events with fetch (EventSource cannot send a token).
async function follow() {
  if (streamAbort) streamAbort.abort();
  streamAbort = new AbortController();
  const headers = { Authorization: "Bearer " + token };
  if (lastEventId) headers["Last-Event-ID"] = lastEventId; // no transition lost across reconnects
  const r = await fetch("/api/v1/stream", { headers, signal: streamAbort.signal });
  if (!r.ok) throw new Error("stream: " + r.statusText);
  $("live").textContent = "live"; $("live").className = "badge on";
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const msg = buf.slice(0, i); buf = buf.slice(i + 2);
      const ev = /^event: (.*)$/m.exec(msg), data = /^data: (.*)$/m.exec(msg), id = /^id: (.*)$/m.exec(msg);
      if (!ev || !data) continue;
      const d = JSON.parse(data[1]);
      if (id) lastEventId = id[1];
      if (ev[1] === "planes") renderPlanes(d);
      else if (ev[1] === "summary") { renderPlanes(d.planes, true); renderSwitches(d.switches); fresh(Date.parse(d.at)); }
      else if (ev[1] === "state_change") {
        if (!filtered()) addEvent(d);
        else { clearTimeout(eventReload); eventReload = setTimeout(() => loadEvents().catch(show), 300); }
        if (d.subject_kind === "plane" && (d.to === "draining" || d.from === "draining")) { loadDrains().catch(show); loadFabricLine().catch(show); } }
      else if (ev[1] === "end") stale(); // fabricd ends the stream (stopping, or the token expired)
    }
  }
  throw new Error("stream ended");
}

function show(err) {
  $("error").textContent = err ? String(err.message || err) : "";
  if (err) { $("live").textContent = "offline"; $("live").className = "badge off"; stale(); } // the stream is gone
}

async function start() {
  show(null);
  route();
  try { await refresh(); await follow(); } catch (e) { if (e.name !== "AbortError") { show(e); setTimeout(start, 3000); } }
}

$("login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  token = $("token").value.trim();
  localStorage.setItem("multiplane.token", token);
  start();
});

// Pages: #/plane/NAME, #/endpoint/NAME, and for admins #/audit and
// #/tokens; anything else is the overview.
async function route() {
  clearInterval(pageTimer); pageTimer = null;
  if (chart) { chart.destroy(); chart = null; }
  const m = /^#\/(plane|endpoint)\/(.+)$/.exec(location.hash) || /^#\/(audit|tokens)()$/.exec(location.hash);
  $("overview").hidden = !!m; $("page").hidden = !m;
  $("crumb").textContent = m ? ` / ${m[1]} ${decodeURIComponent(m[2])}`.trimEnd() : "";
  if (!m || !token) return;
  $("page").replaceChildren(para("Loading…"));
  try {
    const name = decodeURIComponent(m[2]);
    if (m[1] === "plane") await planePage(name);
    else if (m[1] === "audit") await auditPage();
    else if (m[1] === "tokens") await tokensPage();
    else {
      await endpointPage(name);
      pageTimer = setInterval(() => endpointPage(name).catch(show), 5000);
    }
  } catch (e) { show(e); }
}
window.addEventListener("hashchange", route);

async function planePage(name) {
  const enc = encodeURIComponent(name);
  const [plane, links, all, switches] = await Promise.all([api(`/api/v1/planes/${enc}`), api(`/api/v1/links?plane=${enc}&limit=1000`),
    api("/api/v1/links?limit=1000"), api(`/api/v1/switches?plane=${enc}&limit=1000`)]);
  const head = document.createElement("h1");
  head.textContent = `Plane ${name} `;
  const st = document.createElement("span"); st.className = "state " + plane.state; st.textContent = plane.state; head.append(st);
  const figures = para(`capacity ${gbps(plane.capacity_bps)} of ${gbps(plane.total_bps)} (${pct(plane.capacity_ratio)}); utilisation ${pct(plane.utilization)}; ` +
    `loss ${pct(plane.loss_rate)}; ECN ${pct(plane.ecn_rate)}; links up/degraded/down ${plane.links_up}/${plane.links_degraded}/${plane.links_down}` +
    (plane.reason ? `; ${plane.reason}` : ""), "plane-figures");
  const chartBox = document.createElement("div"); chartBox.id = "plane-chart"; chartBox.setAttribute("role", "img");
  chartBox.setAttribute("aria-label", `Utilisation, loss and ECN of plane ${name} over the last 10 minutes`);
  const sw = table(["switch", "state", "telemetry", "last update"], switches.items.map((s) =>
    [cell(s.name), cell(s.state, s.state), cell(s.reachable ? "streaming" : "unreachable", s.reachable ? "up" : "down"), cell(s.last_update ? when(s.last_update) : "–")]));
  const lk = table(["link", "endpoint", "state", "reason", "endpoint evidence"], links.items.map((l) =>
    [cell(l.name), linkCell(l.endpoint, "#/endpoint/" + encodeURIComponent(l.endpoint)), cell(l.state, l.state), cell(l.reason || "–"),
      cell(l.endpoint_evidence ? `${l.endpoint_evidence.state}: ${l.endpoint_evidence.reason}` : "–")]));
  lk.id = "plane-links";
  // Hosts × planes: every endpoint's port on every plane.
  const planes = [...new Set(all.items.map((l) => l.plane))].sort();
  const hosts = [...new Set(all.items.map((l) => l.endpoint))].sort();
  const at = new Map(all.items.map((l) => [l.endpoint + "\u0000" + l.plane, l]));
  const mx = table(["endpoint", ...planes], hosts.map((h) => [linkCell(h, "#/endpoint/" + encodeURIComponent(h)),
    ...planes.map((p) => { const l = at.get(h + "\u0000" + p); return l ? cell(l.state, l.state) : cell("–"); })]));
  mx.id = "port-matrix";
  $("page").replaceChildren(head, figures, section("Last 10 minutes", chartBox), section("Switches", sw), section("Links", lk), section("Ports, hosts × planes", mx));
  const draw = async () => {
    const s = await api(`/api/v1/planes/${enc}/series?since=10m`);
    const data = [s.t, s.utilization.map((v) => 100 * v), s.loss_rate.map((v) => 100 * v), s.ecn_rate.map((v) => 100 * v)];
    if (!chart) {
      chart = new uPlot({ width: Math.min(900, chartBox.clientWidth || 600), height: 220, scales: { y: { range: [0, 100] } },
        series: [{}, { label: "utilisation %", stroke: "#1d4ed8" }, { label: "loss %", stroke: "#b91c1c" }, { label: "ECN %", stroke: "#b45309" }],
        axes: [{}, { label: "%" }] }, data, chartBox);
    } else chart.setData(data);
  };
  await draw();
  pageTimer = setInterval(() => draw().catch(show), 2000);
}

async function endpointPage(name) {
  const enc = encodeURIComponent(name);
  const ep = await api(`/api/v1/endpoints/${enc}`);
  const status = await api(`/api/v1/endpoints/${enc}/status`).catch(() => null);
  const pol = await api(`/api/v1/endpoints/${enc}/policy`).catch(() => null);
  const head = document.createElement("h1"); head.textContent = `Endpoint ${name}`;
  const ports = table(["plane", "address", "switch", "interface"], ep.ports.map((p) => [linkCell(p.plane, "#/plane/" + encodeURIComponent(p.plane)), cell(p.address), cell(p.switch), cell(p.interface)]));
  const parts = [head, section("Ports", ports)];
  if (!status) parts.push(section("Agent", para("No status: the agent is not running, or not connected to etcd.", "agent-status")));
  else {
    const rows = (status.paths || []).map((p) => [cell(p.plane), cell(String(p.tx_bytes)), cell(String(p.rx_bytes)), cell(pct(p.loss_ratio)),
      cell(p.rtt_us ? p.rtt_us + " µs" : "–"), cell(`${p.peers_reachable || 0} / ${p.peers_unreachable || 0}`)]);
    parts.push(section("Agent", para(`version ${status.version || "–"}, generation ${status.applied_generation} applied ${when(status.applied_at)} from ${status.source}` +
      ((status.errors || []).length ? `; errors: ${status.errors.join("; ")}` : ""), "agent-status"),
    table(["plane", "sent (bytes)", "received (bytes)", "loss", "RTT", "peers reachable / unreachable"], rows)));
  }
  if (pol) {
    const r = pol.rate_policy || {};
    parts.push(section("Path set and rate policy",
      para(`rate class ${r.class || "default"}; egress ${r.egress_bps ? gbps(r.egress_bps) : "unlimited"}; ingress ${r.ingress_bps ? gbps(r.ingress_bps) : "unlimited"}` +
        (pol.path_set.fallback ? `; fallback: ${pol.path_set.fallback}` : "")),
      table(["plane", "address", "weight"], pol.path_set.planes.map((p) => [cell(p.plane), cell(p.address), cell(p.weight.toFixed(3))]))));
  }
  $("page").replaceChildren(...parts);
}

// The audit log (admins): who did what, newest first.
async function auditPage() {
  const q = new URLSearchParams({ limit: "200" });
  const r = await api("/api/v1/audit?" + q);
  const head = document.createElement("h1"); head.textContent = "Audit log";
  const t = table(["time", "actor", "role", "action", "target", "status", "result", "from"], r.items.map((e) =>
    [cell(when(e.at)), cell(e.actor), cell(e.role || "–"), cell(e.action), cell(e.target || "–"), cell(String(e.status)), cell(e.result || "–"), cell(e.remote_addr || "–")]));
  t.id = "audit";
  $("page").replaceChildren(head, section(`Newest ${r.items.length} entries`, t));
}

// API tokens (admins): list, create (the secret is shown once), revoke.
async function tokensPage(created) {
  const r = await api("/api/v1/tokens?limit=1000");
  const head = document.createElement("h1"); head.textContent = "API tokens";
  const opt = (t) => t ? when(t) : "–";
  const t = table(["id", "name", "role", "prefix", "created", "expires", "revoked", "last used", "action"], r.items.map((k) => {
    const td = document.createElement("td");
    if (!k.revoked_at) {
      const b = document.createElement("button");
      b.type = "button"; b.textContent = "Revoke"; b.setAttribute("aria-label", `Revoke token ${k.id} (${k.name})`);
      b.addEventListener("click", () => { if (confirm(`Revoke token ${k.name}? Clients using it stop at once.`)) api(`/api/v1/tokens/${k.id}`, "DELETE").then(() => tokensPage()).catch(show); });
      td.append(b);
    }
    return [cell(String(k.id)), cell(k.name), cell(k.role), cell(k.prefix), cell(when(k.created_at)), cell(opt(k.expires_at)), cell(opt(k.revoked_at)), cell(opt(k.last_used_at)), td];
  }));
  t.id = "tokens";
  const form = document.createElement("form");
  form.id = "token-form"; form.setAttribute("aria-label", "Create a token");
  form.innerHTML = `<label>name <input id="token-name" required maxlength="128"></label>
    <label>role <select id="token-role"><option>viewer</option><option>operator</option><option>admin</option></select></label>
    <label>expires in <select id="token-ttl"><option value="0">never</option><option value="86400">1 day</option><option value="2592000" selected>30 days</option><option value="31536000">1 year</option></select></label>
    <button type="submit">Create token</button>`;
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = { name: $("token-name").value.trim(), role: $("token-role").value };
    const ttl = Number($("token-ttl").value);
    if (ttl) body.ttl_seconds = ttl;
    try { await tokensPage(await api("/api/v1/tokens", "POST", body)); } catch (e) { show(e); }
  });
  const parts = [head, section("Create", form)];
  if (created) parts.push(section("New token", para(`Token ${created.name} (${created.role}); copy it now, it is not shown again:`), para(created.token, "token-secret")));
  parts.push(section(`${r.items.length} tokens`, t));
  $("page").replaceChildren(...parts);
}

if (token) start();
