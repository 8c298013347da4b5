// The dashboard as an operator sees it, in Debian's Chromium driven by
// playwright-core: integration/TestDashboardInABrowser runs this against a
// real fabricd (as bin/demo runs it, with its demo control) and a
// userspace fabric moving traffic; a test endpoint stops fabricd. It
// prints one JSON object per measured figure and exits 1 at the first
// check that fails.
import { chromium } from "playwright-core";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const { DASHBOARD_URL, TOKEN, CONTROL_URL, SCREENSHOTS } = process.env;
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const require = createRequire(import.meta.url);

let browser, page;
const errors = [];
async function fail(msg) {
  console.error("FAIL: " + msg);
  if (errors.length) console.error("page errors: " + errors.join("; "));
  if (page) console.error("page error line: " + (await page.textContent("#error").catch(() => "?")));
  if (browser) await browser.close();
  process.exit(1);
}
const report = (name, value) => console.log(JSON.stringify({ [name]: value }));
const api = async (path) => {
  const r = await fetch(DASHBOARD_URL + path, { headers: { Authorization: "Bearer " + TOKEN } });
  if (!r.ok) await fail(`GET ${path}: ${r.status}`);
  return r.json();
};
const control = async (what) => {
  const r = await fetch(CONTROL_URL + what, { method: "POST" });
  if (!r.ok) await fail(`control ${what}: ${r.status}`);
};
const axeSource = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");
// axeCheck fails on serious or critical accessibility violations; axe is
// evaluated through the debugging protocol (the page's CSP rightly
// refuses inline scripts).
async function axeCheck(where) {
  await page.evaluate(axeSource);
  const found = await page.evaluate(async () => (await window.axe.run()).violations.map((v) => ({ id: v.id, impact: v.impact,
    nodes: v.nodes.map((n) => n.target.join(" ") + ": " + n.failureSummary.split("\n").pop()) })));
  report("axe_" + where, found.length);
  const serious = found.filter((v) => v.impact === "serious" || v.impact === "critical");
  if (serious.length) await fail(`axe on the ${where}: ` + JSON.stringify(serious));
}
const within = (ms, what, fn, arg) =>
  page.waitForFunction(fn, arg, { timeout: ms, polling: 50 }).catch(() => fail(`${what} not within ${ms} ms`));

browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking"] });
page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
page.on("pageerror", (e) => errors.push(e.message));
page.on("console", (m) => { if (m.type() === "error") errors.push("console: " + m.text()); });
const started = new Date().toISOString();

// Log in.
let t = Date.now();
await page.goto(DASHBOARD_URL + "/");
report("first_contentful_paint_ms", await page.evaluate(() => Math.round(performance.getEntriesByName("first-contentful-paint")[0]?.startTime ?? -1)));
report("transferred_bytes", await page.evaluate(() => performance.getEntriesByType("resource").reduce((s, r) => s + r.encodedBodySize, 0) +
  performance.getEntriesByType("navigation")[0].encodedBodySize));
await page.fill("#token", TOKEN);
await page.click("#login button");
await within(10000, "the live stream", () => document.querySelector("#live").textContent === "live");
await within(5000, "the planes table", () => document.querySelectorAll("#planes tbody tr").length === 4);
report("login_to_live_ms", Date.now() - t);

// The figures move while traffic runs, and say when they were true.
const utilisation = () => [...document.querySelectorAll("#planes tbody tr")].map((tr) => tr.children[4].textContent).join("|");
const util0 = await page.evaluate(utilisation);
const asof0 = await page.textContent("#asof");
t = Date.now();
await within(3000, `a change of the utilisation figures (${util0})`,
  (u) => [...document.querySelectorAll("#planes tbody tr")].map((tr) => tr.children[4].textContent).join("|") !== u, util0);
report("utilisation_changed_ms", Date.now() - t);
if (!/as of .*\d{1,2}:\d{2}:\d{2}/.test(await page.textContent("#asof")) || (await page.textContent("#asof")) === asof0)
  await fail(`"as of" did not move: ${asof0}`);

// The tiles: a sparkline of each plane's utilisation, and the fabric line.
await within(5000, "the tiles' sparklines", () => [...document.querySelectorAll("#tiles li svg polyline")].filter((l) => l.getAttribute("points").split(" ").length > 2).length === 4);
await within(5000, "the fabric line", () => /generation \d+: \d+ of \d+ endpoints applied it/.test(document.querySelector("#fabric-line").textContent));
report("fabric_line", await page.textContent("#fabric-line"));

// A plane fails at its switch through the dashboard's demo control: its
// tile and row say down within 2 s, and its traffic (from the switch's
// counters) falls to nothing.
const row = (p, col) => `#planes tbody tr[data-plane="${p}"] td:nth-child(${col})`;
const tile = (p) => `#tiles li[data-plane="${p}"] .state`;
await within(5000, "the demo control", () => !document.querySelector("#demo-section").hidden && document.querySelectorAll("#demo-planes tbody button").length === 4);
await page.click('#demo-planes tbody tr[data-plane="p1"] button');
t = Date.now();
await within(2000, "p1's tile shown down", (sel) => document.querySelector(sel).textContent === "down", tile("p1"));
report("plane_down_shown_ms", Date.now() - t);
await within(2000, "p1's row shown down", (sel) => document.querySelector(sel).textContent === "down", row("p1", 2));
if ((await api("/api/v1/demo")).planes[1].up) await fail("the demo control did not fail p1");
await within(10000, "p1's utilisation at 0.0%", (sel) => document.querySelector(sel).textContent === "0.0%", row("p1", 5));
report("plane_traffic_gone_ms", Date.now() - t);
if (SCREENSHOTS) await page.screenshot({ path: `${SCREENSHOTS}/overview-plane-down.png`, fullPage: true });

// The events list holds every transition the API has since the start:
// asked again until the page has them all (the history's writer and the
// stream's poll come in between), 5 s at most.
let apiIds = [], missing = [];
for (const deadline = Date.now() + 5000; ; ) {
  apiIds = (await api(`/api/v1/events?limit=1000&since=${encodeURIComponent(started)}`)).items.map((e) => String(e.id));
  const shown = await page.$$eval("#events li[data-id]", (lis) => lis.map((li) => li.dataset.id));
  missing = apiIds.filter((id) => !shown.includes(id));
  if ((apiIds.length && !missing.length) || Date.now() > deadline) break;
  await new Promise((r) => setTimeout(r, 100)); // between asks
}
if (apiIds.length === 0 || missing.length) await fail(`events: API has ${apiIds.length} since the start, the page lacks ${missing}`);
report("events_matched", apiIds.length);

// Drain p2 with a preview, confirm it, end it.
await page.selectOption("#drain-plane", "p2");
await page.fill("#drain-reason", "browser test");
await page.click("#drain-preview");
await within(3000, "the drain preview", () => !document.querySelector("#drain-impact").hidden &&
  /^Draining plane p2 changes \d+ endpoints' path sets/.test(document.querySelector("#drain-summary").textContent));
report("drain_preview", await page.textContent("#drain-summary"));
if ((await api("/api/v1/drains")).items.length) await fail("the preview drained");
if (SCREENSHOTS) await page.screenshot({ path: `${SCREENSHOTS}/drain-preview.png`, fullPage: true });
await page.click("#drain-confirm");
t = Date.now();
await within(3000, "the drain listed", () => [...document.querySelectorAll("#drains tbody tr")].some((tr) => tr.children[1].textContent === "plane p2"));
await within(3000, "p2 shown draining", (sel) => document.querySelector(sel).textContent === "draining", row("p2", 2));
report("drain_to_draining_shown_ms", Date.now() - t);
await page.click('#drains tbody tr button:has-text("End")');
await within(3000, "the drain ended", () => document.querySelectorAll("#drains tbody tr").length === 0);
await within(5000, "p2 back to healthy", (sel) => document.querySelector(sel).textContent === "healthy", row("p2", 2));

// The events list filtered by plane: p2's events (its drain), as the API has them.
await page.selectOption("#ev-plane", "p2");
const p2 = (await api(`/api/v1/events?plane=p2&order=desc&limit=200&since=${encodeURIComponent(new Date(Date.now() - 3600e3).toISOString())}`)).items.map((e) => String(e.id));
await within(3000, "the events filtered by plane p2", (want) => {
  const ids = [...document.querySelectorAll("#events li")].map((li) => li.dataset.id);
  return ids.length === want.length && ids.every((id, i) => id === want[i]);
}, p2);
if (!p2.length || (await page.$$eval("#events li", (lis) => lis.some((li) => !li.textContent.includes("p2"))))) await fail(`filtered events: ${p2}`);
report("events_filtered_by_plane", p2.length);
await page.selectOption("#ev-plane", "");
// And by subject: one link's events, as the API has them.
await page.fill("#ev-subject", "p1-sw1:eth1");
await page.press("#ev-subject", "Enter");
const link = (await api(`/api/v1/events?subject=p1-sw1:eth1&order=desc&limit=200&since=${encodeURIComponent(new Date(Date.now() - 3600e3).toISOString())}`)).items.map((e) => String(e.id));
await within(3000, "the events filtered by subject p1-sw1:eth1", (want) => {
  const ids = [...document.querySelectorAll("#events li")].map((li) => li.dataset.id);
  return ids.length === want.length && ids.every((id, i) => id === want[i]);
}, link);
if (!link.length) await fail("no events of link p1-sw1:eth1 after p1 failed");
report("events_filtered_by_subject", link.length);
await page.fill("#ev-subject", "");
await page.press("#ev-subject", "Enter");

// A viewer sees no drain actions.
const viewer = await fetch(DASHBOARD_URL + "/api/v1/tokens", { method: "POST", headers: { Authorization: "Bearer " + TOKEN, "Content-Type": "application/json" },
  body: JSON.stringify({ name: "dashboard-viewer", role: "viewer" }) }).then((r) => r.json());
const vpage = await browser.newPage({ viewport: { width: 1280, height: 900 } });
await vpage.goto(DASHBOARD_URL + "/");
await vpage.fill("#token", viewer.token);
await vpage.click("#login button");
await vpage.waitForFunction(() => document.querySelector("#live").textContent === "live", null, { timeout: 10000 }).catch(() => fail("viewer: no live stream"));
if (await vpage.isVisible("#drain-form") || (await vpage.$$('button:has-text("End")')).length) await fail("a viewer sees drain actions");
await vpage.waitForFunction(() => document.querySelectorAll("#demo-planes tbody tr").length === 4, null, { timeout: 5000 }).catch(() => fail("viewer: no demo state"));
if ((await vpage.$$("#demo-planes button")).length || await vpage.isVisible("#demo-port-form") || await vpage.isVisible('a[href="#/audit"]'))
  await fail("a viewer sees demo or admin actions");
report("viewer_sees_no_drain_actions", true);
await vpage.close();

// The plane page: its figures, a chart of the last minutes, its links with
// their evidence, the hosts × planes port matrix; keyboard: Enter on the
// plane's link opens it.
// Live updates re-render the table every second or so: the focus stays on
// p1's link across a re-render.
await page.focus('#planes tbody tr[data-plane="p1"] a');
await page.evaluate(() => { window.focusedRow = document.querySelector('#planes tbody tr[data-plane="p1"]'); });
await within(10000, "the planes table re-rendered", () => document.querySelector('#planes tbody tr[data-plane="p1"]') !== window.focusedRow);
if (!(await page.evaluate(() => document.activeElement?.closest('#planes tbody tr[data-plane="p1"]') !== null)))
  await fail("a re-render of the planes table took the keyboard focus away from p1's link");
await page.keyboard.press("Enter");
await within(5000, "the plane page", () => /^Plane p1/.test(document.querySelector("#page h1")?.textContent || "") &&
  document.querySelectorAll("#plane-links tbody tr").length > 0 && document.querySelectorAll("#port-matrix tbody tr").length > 0 &&
  document.querySelector("#plane-chart canvas") !== null);
const matrixDown = await page.$$eval("#port-matrix tbody td span.down", (s) => s.length);
report("plane_page", { links: await page.$$eval("#plane-links tbody tr", (r) => r.length), matrix_down_ports: matrixDown });
if (matrixDown < 2) await fail(`the port matrix shows ${matrixDown} ports down on p1, want every host's`);
await axeCheck("plane page");
if (SCREENSHOTS) await page.screenshot({ path: `${SCREENSHOTS}/plane.png`, fullPage: true });
// From the matrix to an endpoint's page: agent, traffic per plane, path set.
await page.click('#port-matrix tbody tr:first-child a');
await within(5000, "the endpoint page", () => /^Endpoint host-a/.test(document.querySelector("#page h1")?.textContent || "") &&
  /generation \d+ applied/.test(document.querySelector("#agent-status")?.textContent || ""));
report("endpoint_page", await page.textContent("#agent-status"));
await axeCheck("endpoint page");
if (SCREENSHOTS) await page.screenshot({ path: `${SCREENSHOTS}/endpoint.png`, fullPage: true });
await page.goto(DASHBOARD_URL + "/#/");
await within(10000, "the overview again", () => !document.querySelector("#overview").hidden && document.querySelector("#live").textContent === "live");

// Admins: the audit log has the demo control's change; a token created
// on the tokens page shows its secret once, and is revoked there.
await page.goto(DASHBOARD_URL + "/#/audit");
await within(5000, "the audit page", () => [...document.querySelectorAll("#audit tbody tr")].some((tr) => tr.children[3].textContent === "demo.fail" && tr.children[4].textContent === "plane=p1"));
await axeCheck("audit page");
await page.goto(DASHBOARD_URL + "/#/tokens");
await within(5000, "the tokens page", () => document.querySelectorAll("#tokens tbody tr").length > 0);
await page.fill("#token-name", "made-in-browser");
await page.selectOption("#token-role", "viewer");
await page.click('#token-form button[type="submit"]');
await within(5000, "the new token's secret", () => /^mpt_/.test(document.querySelector("#token-secret")?.textContent || ""));
const made = (await api("/api/v1/tokens?limit=1000")).items.find((k) => k.name === "made-in-browser");
if (!made || made.role !== "viewer") await fail("the tokens page did not create the viewer token");
page.once("dialog", (d) => d.accept());
await page.click(`#tokens tbody button[aria-label^="Revoke token ${made.id} "]`);
await within(5000, "the token revoked", (id) => [...document.querySelectorAll("#tokens tbody tr")].some((tr) => tr.children[0].textContent === String(id) && tr.children[6].textContent !== "–"), made.id);
if (!(await api("/api/v1/tokens?limit=1000")).items.find((k) => k.id === made.id).revoked_at) await fail("the token is not revoked in the API");
await axeCheck("tokens page");
report("admin_pages", true);
await page.goto(DASHBOARD_URL + "/#/");
await within(10000, "the overview once more", () => !document.querySelector("#overview").hidden && document.querySelectorAll("#demo-planes tbody button").length === 4);

// Restored through the demo control's button, then reloaded: nothing
// stale, the state the API says.
await page.click('#demo-planes tbody tr[data-plane="p1"] button:has-text("Restore plane")');
await within(3000, "p1 restored in the demo fabric", () => document.querySelector('#demo-planes tbody tr[data-plane="p1"] td:nth-child(2)').textContent === "up");
await page.reload();
await within(10000, "the live stream after a reload", () => document.querySelector("#live").textContent === "live");
const apiP1 = (await api("/api/v1/planes/p1")).state;
const shownP1 = await page.textContent(row("p1", 2));
if (await page.evaluate(() => document.body.classList.contains("stale"))) await fail("stale right after a reload");
report("after_reload", { api: apiP1, shown: shownP1 });

// Accessibility: axe-core finds nothing serious or critical.
await axeCheck("overview");

// At 390 px nothing overflows sideways.
await page.setViewportSize({ width: 390, height: 844 });
const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
report("overflow_at_390px", overflow);
if (overflow > 0) await fail(`the page is ${overflow} px wider than a 390 px screen`);
if (SCREENSHOTS) await page.screenshot({ path: `${SCREENSHOTS}/overview-390px.png`, fullPage: true });
// A wall screen: nothing overflows, the overview takes two columns.
await within(10000, "p1 healthy again", (sel) => document.querySelector(sel).textContent === "healthy", row("p1", 2));
await page.setViewportSize({ width: 2560, height: 1440 });
const wall = await page.evaluate(() => ({ overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
  columns: getComputedStyle(document.querySelector("#overview")).gridTemplateColumns.split(" ").length }));
report("wall_screen", wall);
if (wall.overflow > 0 || wall.columns !== 2) await fail(`wall screen: ${JSON.stringify(wall)}`);
if (SCREENSHOTS) await page.screenshot({ path: `${SCREENSHOTS}/overview-wall.png` });
await page.setViewportSize({ width: 1280, height: 900 });

if (errors.length) await fail("page errors: " + errors.join("; "));

// fabricd gone: the page says its figures are stale within 5 s (they are
// fresh first; the errors of the lost connection are expected then).
await within(3000, "fresh figures", () => !document.body.classList.contains("stale"));
t = Date.now();
const stopped = control("/stop-fabricd"); // returns once fabricd has exited
await within(5000, "the stale marking", () => document.body.classList.contains("stale"));
report("stale_marked_ms", Date.now() - t); // from the stop request
await stopped;
report("fabricd_stop_ms", Date.now() - t);
if (SCREENSHOTS) await page.screenshot({ path: `${SCREENSHOTS}/overview-stale.png`, fullPage: true });
await browser.close();
console.log("PASS");
