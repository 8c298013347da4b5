// Multiplane dashboard: REST for the lists, /api/v1/stream for live changes.
"use strict";
const $ = (id) => document.getElementById(id);
let token = localStorage.getItem("multiplane.token") || "";
let streamAbort = null;
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
  }
  const tb = $("planes").tBodies[0];
  tb.replaceChildren(...items.map((p) => {
    const tr = document.createElement("tr");
    tr.dataset.plane = p.name;
    tr.append(cell(p.name), cell(p.state, p.state), cell(`${p.links_up} / ${p.links_degraded} / ${p.links_down}`),
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
  const [planes, switches, events] = await Promise.all([
    api("/api/v1/planes"), api("/api/v1/switches?limit=1000"), api("/api/v1/events?limit=50&since=" + new Date(Date.now() - 3600e3).toISOString())]);
  renderPlanes(planes.items);
  renderSwitches(switches.items);
  await loadDrains();
  $("events").replaceChildren();
  events.items.forEach(addEvent);
  if (!lastEventId && events.items.length) lastEventId = String(events.items[events.items.length - 1].id);
  fresh(Date.now());
}

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
      else if (ev[1] === "state_change") { addEvent(d); if (d.subject_kind === "plane" && (d.to === "draining" || d.from === "draining")) loadDrains().catch(show); }
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
  try { await refresh(); await follow(); } catch (e) { if (e.name !== "AbortError") { show(e); setTimeout(start, 3000); } }
}

$("login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  token = $("token").value.trim();
  localStorage.setItem("multiplane.token", token);
  start();
});
if (token) start();
