// The dashboard left open against a running system (SOAK_SECONDS, default
// 600): every 30 s it samples the page's JS heap (after a garbage
// collection), fabricd's RSS with its anonymous and file-backed parts (from
// the control endpoint) and fabricd's Go heap in use (its /metrics), prints
// them, and fails if any grows by more than half (plus 5 MiB) from the
// first third of the run to the last. The RSS's file-backed part grows
// while the binary's and the embedded etcd's mapped pages are first
// touched, up to their sizes; the Go heap in use is what a leak would grow.
import { chromium } from "playwright-core";

const { DASHBOARD_URL, TOKEN, CONTROL_URL } = process.env;
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const seconds = Number(process.env.SOAK_SECONDS || 600);
const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--js-flags=--expose-gc"] });
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
const cdp = await page.context().newCDPSession(page);
await page.goto(DASHBOARD_URL + "/#/plane/p1"); // the busiest page: summaries, a chart redrawn every 2 s
await page.fill("#token", TOKEN);
await page.click("#login button");
await page.waitForFunction(() => document.querySelector("#live").textContent === "live", null, { timeout: 10000 });
const samples = [];
for (let t = 0; t <= seconds; t += 30) {
  if (t > 0) await page.waitForTimeout(30000); // the sampling interval
  await cdp.send("HeapProfiler.collectGarbage");
  const heap = (await cdp.send("Runtime.getHeapUsage")).usedSize;
  const rss = await (await fetch(CONTROL_URL + "/fabricd-rss")).json();
  const metrics = await (await fetch(DASHBOARD_URL + "/metrics")).text();
  const goHeap = Number(/^go_memstats_heap_inuse_bytes (\S+)$/m.exec(metrics)[1]);
  const live = await page.textContent("#live");
  samples.push({ t, heap_kib: Math.round(heap / 1024), fabricd_rss_kib: rss.rss_kib, fabricd_anon_kib: rss.anon_kib,
    fabricd_file_kib: rss.file_kib, fabricd_go_heap_inuse_kib: Math.round(goHeap / 1024), live });
  console.log(JSON.stringify(samples[samples.length - 1]));
}
await browser.close();
const third = Math.max(1, Math.floor(samples.length / 3));
const avg = (xs, k) => xs.reduce((s, x) => s + x[k], 0) / xs.length;
let failed = false;
for (const k of ["heap_kib", "fabricd_rss_kib", "fabricd_anon_kib", "fabricd_file_kib", "fabricd_go_heap_inuse_kib"]) {
  const first = avg(samples.slice(0, third), k), last = avg(samples.slice(-third), k);
  const mid = samples[Math.floor(samples.length / 2)], end = samples[samples.length - 1];
  const perMin = end.t > mid.t ? ((end[k] - mid[k]) / ((end.t - mid.t) / 60)) : 0; // KiB per minute over the second half
  console.log(JSON.stringify({ [k]: { first_third: Math.round(first), last_third: Math.round(last), second_half_kib_per_min: Math.round(perMin) } }));
  if (last > first * 1.5 + 5120) { console.error(`FAIL: ${k} grew from ${Math.round(first)} to ${Math.round(last)} KiB`); failed = true; }
}
if (samples.some((s) => s.live !== "live")) { console.error("FAIL: the stream was not live throughout"); failed = true; }
if (failed) process.exit(1);
console.log("PASS");
