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
let canOperate = false;
function renderDrains(items) {
  $("drains").tBodies[0].replaceChildren(...items.map((d) => {
    const tr = document.createElement("tr");
    tr.append(cell(String(d.id)), cell(`${d.target_kind} ${d.target}`), cell(d.reason), cell(d.created_by), cell(when(d.created_at)));
    const td = document.createElement("td");
    td.className = "operator-only";
    if (canOperate) {
      const b = document.createElement("button");
      b.type = "button"; b.textContent = "End"; b.setAttribute("aria-label", `End drain ${d.id} of ${d.target_kind} ${d.target}`);
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
  pending = { target_kind: "plane", target: $("drain-plane").value, reason: $("drain-reason").value.trim() };
  try {
    const r = await api("/api/v1/drains?dry_run=true", "POST", pending);
    const aff = r.impact.affected || [];
    const left = aff.length ? aff.reduce((s, a) => s + a.capacity_after, 0) / aff.length : 1;
    // Projected load: today's traffic on the usable planes, over what is
    // left of their capacity without the drained one.
    const usable = lastPlanes.filter((p) => p.state !== "down" && p.state !== "draining");
    const traffic = usable.reduce((s, p) => s + p.utilization * p.capacity_bps, 0);
    const remaining = usable.filter((p) => p.name !== pending.target).reduce((s, p) => s + p.capacity_bps, 0);
    const load = remaining > 0 ? `the other usable planes would carry about ${pct(traffic / remaining)} of their capacity` : "no usable plane would be left";
    $("drain-summary").textContent = `Draining plane ${pending.target} changes ${aff.length} endpoints' path sets` +
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
function renderPlanes(items) {
  lastPlanes = items;
  const sel = $("drain-plane");
  if (sel.options.length !== items.length) {
    sel.replaceChildren(...items.map((p) => { const o = document.createElement("option"); o.value = o.textContent = p.name; return o; }));
    const ev = $("ev-plane"), keep = ev.value;
    ev.replaceChildren(new Option("all", ""), ...items.map((p) => new Option(p.name, p.name)));
    ev.value = keep;
  }
  const tb = $("planes").tBodies[0];
  tb.replaceChildren(...items.map((p) => {
    const tr = document.createElement("tr");
    tr.dataset.plane = p.name;
    tr.append(linkCell(p.name, "#/plane/" + encodeURIComponent(p.name)), cell(p.state, p.state), cell(`${p.links_up} / ${p.links_degraded} / ${p.links_down}`),
      cell(`${gbps(p.capacity_bps)} (${pct(p.capacity_ratio)})`), cell(pct(p.utilization)), cell(pct(p.loss_rate)), cell(pct(p.ecn_rate)));
    return tr;
  }));
}

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
  document.body.classList.toggle("can-operate", canOperate);
  const [planes, switches] = await Promise.all([api("/api/v1/planes"), api("/api/v1/switches?limit=1000")]);
  renderPlanes(planes.items);
  renderSwitches(switches.items);
  await loadDrains();
  const newest = await loadEvents();
  if (!lastEventId && newest) lastEventId = String(newest);
  fresh(Date.now());
}

// loadEvents shows the newest 200 events the filter selects, newest
// first; it returns the newest id.
async function loadEvents() {
  const q = new URLSearchParams({ order: "desc", limit: "200", since: new Date(Date.now() - 1000 * Number($("ev-since").value)).toISOString() });
  if ($("ev-plane").value) q.set("plane", $("ev-plane").value);
  if ($("ev-kind").value) q.set("subject_kind", $("ev-kind").value);
  const events = await api("/api/v1/events?" + q);
  $("events").replaceChildren();
  events.items.slice().reverse().forEach(addEvent);
  return events.items.length ? events.items[0].id : 0;
}
const filtered = () => $("ev-plane").value !== "" || $("ev-kind").value !== "";
let eventReload = null; // a filtered list reloads (debounced) on new transitions
$("event-filter").addEventListener("change", () => loadEvents().catch(show));

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
      else if (ev[1] === "summary") { renderPlanes(d.planes); renderSwitches(d.switches); fresh(Date.parse(d.at)); }
      else if (ev[1] === "state_change") {
        if (!filtered()) addEvent(d);
        else { clearTimeout(eventReload); eventReload = setTimeout(() => loadEvents().catch(show), 300); }
        if (d.subject_kind === "plane" && (d.to === "draining" || d.from === "draining")) loadDrains().catch(show); }
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

// Pages: #/plane/NAME and #/endpoint/NAME; anything else is the overview.
async function route() {
  clearInterval(pageTimer); pageTimer = null;
  if (chart) { chart.destroy(); chart = null; }
  const m = /^#\/(plane|endpoint)\/(.+)$/.exec(location.hash);
  $("overview").hidden = !!m; $("page").hidden = !m;
  $("crumb").textContent = m ? ` / ${m[1]} ${decodeURIComponent(m[2])}` : "";
  if (!m || !token) return;
  $("page").replaceChildren(para("Loading…"));
  try {
    const name = decodeURIComponent(m[2]);
    if (m[1] === "plane") await planePage(name);
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

if (token) start();
