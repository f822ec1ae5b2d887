// Speed Index of page loads from one long-lived Chromium: speedline-core (the library Lighthouse
// computes SI with) over a DevTools trace with screenshots, one fresh browser context per load (its
// own socket pools, cache and QUIC state), so a load costs the load and not a browser start.
// Used by python/gearbox/pages/chromium.py (docs/flexhttp.md, "Speed Index in Chromium").
//
//   node speed-index.mjs SPEC.json   ->  one JSON line per load on stdout
//
// SPEC: {"chrome": PATH, "flags": [...], "settle_ms": 1000, "timeout_ms": 120000,
//        "viewport": {"width": 800, "height": 600}, "loads": [{"url": ...}, ...], "visits": 0}
//
// With "visits": N > 0 (Chromium's own choice of HTTP version), each load is instead N visits of its
// URL by a browser that keeps a profile of its own across restarts: the first visit meets the origin
// for the first time (HTTP/2, and the Alt-Svc header is remembered), each later visit starts a new
// browser on the same profile (no open connection left, the alternative service known), as a user
// coming back does. The HTTP cache is off so that every visit fetches every object. One JSON line per
// visit, with "visit": 0..N-1.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
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

async function launch(userDataDir) {
  const browser = await puppeteer.launch({
    executablePath: spec.chrome,
    headless: true,
    args: spec.flags,
    // Lighthouse's runs here (screen emulation off) see headless Chromium's default 800x600 window.
    defaultViewport: spec.viewport ?? {width: 800, height: 600},
    protocolTimeout: spec.timeout_ms ?? 120000,
    ...(userDataDir ? {userDataDir} : {}),
  });
  // Warm-up: the first page of a new browser pays for starting its renderer and network service.
  const context = userDataDir ? browser.defaultBrowserContext() : await browser.createBrowserContext();
  const page = await context.newPage();
  await page.goto('about:blank');
  await page.close();
  if (!userDataDir) await context.close();
  return browser;
}

// One load of `url` in `context`: a fresh browser context (own sockets, cache and QUIC state), or
// with `keepProfile` the browser's default context (its profile's remembered Alt-Svc), cache off.
async function measure(browser, url, keepProfile) {
  const context = keepProfile ? browser.defaultBrowserContext() : await browser.createBrowserContext();
  try {
    const page = await context.newPage();
    if (keepProfile) await page.setCacheEnabled(false);
    const cdp = await page.createCDPSession();
    const protocols = {};
    const paths = [];
    let transfer = 0;
    let documentProtocol = null;
    await cdp.send('Network.enable');
    cdp.on('Network.responseReceived', (e) => {
      if (e.response.url.startsWith('data:')) return;
      const p = e.response.protocol || 'unknown';
      protocols[p] = (protocols[p] || 0) + 1;
      if (e.type === 'Document' && documentProtocol === null) documentProtocol = p;
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
    return {
      url, speed_index_ms: si.speedIndex, ...timing, protocols, paths, transfer_bytes: transfer,
      document_protocol: documentProtocol,
    };
  } finally {
    if (!keepProfile) await context.close();
  }
}

function failed(url, e) {
  return {url, error: String(e && e.message ? e.message : e)};
}

if (spec.visits > 0) {
  for (const load of spec.loads) {
    const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'gearbox-profile-'));
    try {
      for (let visit = 0; visit < spec.visits; visit++) {
        let row;
        let browser;
        try {
          browser = await launch(profile);
          row = await measure(browser, load.url, true);
        } catch (e) {
          row = failed(load.url, e);
        } finally {
          // A clean shutdown writes the profile's network state (the Alt-Svc entries) to disk.
          if (browser) await browser.close();
        }
        process.stdout.write(JSON.stringify({...row, visit}) + '\n');
      }
    } finally {
      fs.rmSync(profile, {recursive: true, force: true});
    }
  }
} else {
  const browser = await launch(null);
  for (const load of spec.loads) {
    let row;
    try {
      row = await measure(browser, load.url, false);
    } catch (e) {
      row = failed(load.url, e);
    }
    process.stdout.write(JSON.stringify(row) + '\n');
  }
  await browser.close();
}
