// Speed Index of page loads from one long-lived Chromium: speedline-core (the library Lighthouse
// computes SI with) over a DevTools trace with screenshots, one fresh browser context per load (its
// own socket pools, cache and QUIC state), so a load costs the load and not a browser start.
// Used by python/gearbox/pages/chromium.py (docs/flexhttp.md, "Speed Index in Chromium").
//
//   node speed-index.mjs SPEC.json   ->  one JSON line per load on stdout
//
// SPEC: {"chrome": PATH, "flags": [...], "settle_ms": 1000, "timeout_ms": 120000,
//        "viewport": {"width": 800, "height": 600}, "loads": [{"url": ...}, ...]}
import fs from 'node:fs';
import puppeteer from 'puppeteer-core';
import speedline from 'speedline-core';

const spec = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const CATEGORIES = [
  '-*',
  'devtools.timeline',
  'disabled-by-default-devtools.timeline',
  'disabled-by-default-devtools.screenshot',
  'blink.user_timing',
  'loading',
];

const browser = await puppeteer.launch({
  executablePath: spec.chrome,
  headless: true,
  args: spec.flags,
  // Lighthouse's runs here (screen emulation off) see headless Chromium's default 800x600 window.
  defaultViewport: spec.viewport ?? {width: 800, height: 600},
  protocolTimeout: spec.timeout_ms ?? 120000,
});

async function measure(url) {
  const context = await browser.createBrowserContext();
  try {
    const page = await context.newPage();
    const cdp = await page.createCDPSession();
    const protocols = {};
    const paths = [];
    let transfer = 0;
    await cdp.send('Network.enable');
    cdp.on('Network.responseReceived', (e) => {
      if (e.response.url.startsWith('data:')) return;
      const p = e.response.protocol || 'unknown';
      protocols[p] = (protocols[p] || 0) + 1;
      paths.push(new URL(e.response.url).pathname);
    });
    cdp.on('Network.loadingFinished', (e) => { transfer += e.encodedDataLength || 0; });
    await page.tracing.start({screenshots: true, categories: CATEGORIES});
    await page.goto(url, {waitUntil: 'load', timeout: spec.timeout_ms ?? 120000});
    // Visual progress after the load event (late images, timers) counts if it comes within settle_ms.
    await new Promise((r) => setTimeout(r, spec.settle_ms ?? 1000));
    const timing = await page.evaluate(() => {
      const nav = performance.getEntriesByType('navigation')[0];
      const fcp = performance.getEntriesByName('first-contentful-paint')[0];
      return {load_ms: nav ? nav.loadEventStart : null, fcp_ms: fcp ? fcp.startTime : null};
    });
    const trace = JSON.parse(new TextDecoder().decode(await page.tracing.stop()));
    const events = trace.traceEvents;
    // The navigation's start, as Lighthouse takes it: the main frame's navigationStart for this URL.
    const nav = events.filter((e) => e.name === 'navigationStart' && e.args?.data?.isLoadingMainFrame
      && (e.args.data.documentLoaderURL || '').startsWith(url.split('#')[0]));
    if (nav.length === 0) throw new Error(`no navigationStart for ${url} in the trace`);
    const timeOrigin = nav[nav.length - 1].ts;
    const si = await speedline(events, {timeOrigin, fastMode: true, include: 'speedIndex'});
    return {url, speed_index_ms: si.speedIndex, ...timing, protocols, paths, transfer_bytes: transfer};
  } finally {
    await context.close();
  }
}

// Warm-up: the first page of a new browser pays for starting its renderer and network service.
{
  const context = await browser.createBrowserContext();
  const page = await context.newPage();
  await page.goto('about:blank');
  await context.close();
}

for (const load of spec.loads) {
  let row;
  try {
    row = await measure(load.url);
  } catch (e) {
    row = {url: load.url, error: String(e && e.message ? e.message : e)};
  }
  process.stdout.write(JSON.stringify(row) + '\n');
}
await browser.close();
