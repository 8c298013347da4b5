// The dashboard left open against a running system (SOAK_SECONDS, default
// 600): every 30 s it samples the page's JS heap (after a garbage
// collection) and fabricd's RSS (from the control endpoint), prints them,
// and fails if either grows by more than half (plus 5 MiB) from the first
// third of the run to the last.
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
  const rss = Number(await (await fetch(CONTROL_URL + "/fabricd-rss")).text());
  const live = await page.textContent("#live");
  samples.push({ t, heap_kib: Math.round(heap / 1024), fabricd_rss_kib: rss, live });
  console.log(JSON.stringify(samples[samples.length - 1]));
}
await browser.close();
const third = Math.max(1, Math.floor(samples.length / 3));
const avg = (xs, k) => xs.reduce((s, x) => s + x[k], 0) / xs.length;
let failed = false;
for (const k of ["heap_kib", "fabricd_rss_kib"]) {
  const first = avg(samples.slice(0, third), k), last = avg(samples.slice(-third), k);
  console.log(JSON.stringify({ [k]: { first_third: Math.round(first), last_third: Math.round(last) } }));
  if (last > first * 1.5 + 5120) { console.error(`FAIL: ${k} grew from ${Math.round(first)} to ${Math.round(last)} KiB`); failed = true; }
}
if (samples.some((s) => s.live !== "live")) { console.error("FAIL: the stream was not live throughout"); failed = true; }
if (failed) process.exit(1);
console.log("PASS");
