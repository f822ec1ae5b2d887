//! Replaying a workload against an edge, and the request-completion-time statistics of
//! the replay.
//!
//! A workload (`gearbox-workload`) is a seeded list of requests with send times; a replay
//! sends each at its send time (scaled by [`ReplayOptions::time_scale`]) whether or not
//! the earlier ones have finished, as users' clicks arrive regardless of the server. Page
//! workloads replay one page load per click instead (objects in dependency order,
//! [`Client::load_page_with`]). The outcome is the client's records — the same ones that
//! go to telemetry, collected by a [`RecordingGear`] — summarised per protocol by
//! [`Summary`].
//!
//! This lives in the library, not in the command line, so that `gearbox load`, the
//! loopback demo and callers of the library measure a replay in exactly one way.
//! Rejected alternative: returning each request's `Response` from the replay. A failed
//! request has no response, and a page's objects are requested inside
//! [`Client::load_page_with`]; the records cover both, and are what learners read.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use gearbox_dataplane::stats::{mean, percentile};
use gearbox_dataplane::telemetry::ClientRecord;
use gearbox_workload::{Page, Pattern, WorkloadError, WorkloadSpec};

use crate::client::{Client, Request};
use crate::multipath::MultipathOptions;
use crate::page::PageLoadOptions;
use crate::{Decision, StaticTransport, TransportChoice, TransportGear, TransportPref};
use gearbox_gear_api::{PathGear, PathRequest};

/// Why a replay could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The time scale is not a positive, finite factor.
    #[error("time scale must be a positive number, got {0}")]
    TimeScale(f64),
    /// No local path to send on.
    #[error("a replay needs at least one local path, got 0")]
    NoPaths,
    /// A request's scaled send time is past what a clock can hold.
    #[error("send time {send_at_ms} ms x time scale {time_scale} is out of range")]
    SendTime {
        /// The request's send time in the workload, milliseconds.
        send_at_ms: f64,
        /// The scale it was multiplied by.
        time_scale: f64,
    },
    /// A page of a page workload could not be generated. (Not a `source`: the message
    /// already holds it, and a chain printer would say it twice.)
    #[error("page workload: {0}")]
    Page(WorkloadError),
    /// The paths of a scheduled replay could not be set up (a local address that is not
    /// this host's, a bad target URL).
    #[error("multipath: {0}")]
    Paths(crate::ClientError),
}

impl From<WorkloadError> for ReplayError {
    fn from(e: WorkloadError) -> Self {
        ReplayError::Page(e)
    }
}

/// How to replay: where to, over what, how fast.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// The edge, `https://host:port` without a trailing slash; request paths are appended.
    pub target: String,
    /// The transport of every request (`Auto`: the client's gear chooses).
    pub transport: TransportPref,
    /// Send times are multiplied by this factor (0.5: twice as fast).
    pub time_scale: f64,
    /// Local paths of the client: a request goes on path `client_index % paths`.
    pub paths: usize,
    /// A path scheduler: every page load of a page workload runs over HTTP/3 on all the
    /// client's paths, each request on the path a fresh scheduler of this kind picks
    /// ([`Client::load_page_multipath`]; one scheduler per page load, SAILfish's epoch);
    /// the requests of another workload go each on the path one scheduler picks for the
    /// whole replay ([`replay_requests`]). `None`: a request's path is `paths` above.
    pub path_scheduler: Option<PathScheduling>,
    /// Page workloads: a page-level gear that picks each page load's transport and says why
    /// (the HTTP-version gear, FlexHTTP §3.4: h2 = `Tcp`, h3 = `Quic`), given the page's URL
    /// and graph. `None`: `transport` for every page.
    pub page_version: Option<PageVersionChooser>,
}

/// `(page URL, page) -> (transport, reason)`: a page-level gear's decision.
pub type ChoosePageTransport = dyn Fn(&str, &Page) -> (TransportPref, String) + Send + Sync;

/// `(page URL, page, transport used, page load time in ms)`: what a page-level gear is told
/// after each successful load (FlexHTTP's local trace pool, §3.5.2).
pub type ObservePageLoad = dyn Fn(&str, &Page, TransportPref, f64) + Send + Sync;

/// Chooses the transport of one page load from its URL and graph, with the reason for telemetry.
#[derive(Clone)]
pub struct PageVersionChooser {
    /// The gear's name (for people).
    pub name: String,
    /// `(page URL, page) -> (transport, reason)`.
    pub choose: Arc<ChoosePageTransport>,
    /// Told of each completed load, when the gear learns from them.
    pub observe: Option<Arc<ObservePageLoad>>,
}

impl std::fmt::Debug for PageVersionChooser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageVersionChooser")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Makes a path scheduler for each multipath page load of a replay.
#[derive(Clone)]
pub struct PathScheduling {
    /// The scheduler's name (for people).
    pub name: String,
    /// Makes a new scheduler.
    pub make: Arc<dyn Fn() -> Box<dyn PathGear> + Send + Sync>,
}

impl std::fmt::Debug for PathScheduling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PathScheduling")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl ReplayOptions {
    /// Checks what would otherwise make the replay fail half-way.
    fn check(&self) -> Result<(), ReplayError> {
        if !(self.time_scale.is_finite() && self.time_scale > 0.0) {
            return Err(ReplayError::TimeScale(self.time_scale));
        }
        if self.paths == 0 {
            return Err(ReplayError::NoPaths);
        }
        Ok(())
    }

    /// When a request sent `send_at_ms` into the workload goes out, counting from `start`.
    fn send_time(&self, start: tokio::time::Instant, send_at_ms: f64) -> Result<tokio::time::Instant, ReplayError> {
        let out_of_range = || ReplayError::SendTime {
            send_at_ms,
            time_scale: self.time_scale,
        };
        let offset =
            Duration::try_from_secs_f64((send_at_ms * self.time_scale).max(0.0) / 1e3).map_err(|_| out_of_range())?;
        start.checked_add(offset).ok_or_else(out_of_range)
    }

    /// The local path of a request of `client_index`.
    fn path_index(&self, client_index: u32) -> usize {
        client_index as usize % self.paths
    }
}

/// Replays `requests` of `spec` (generated for `seed`): page workloads as one page load per
/// click ([`replay_pages`]), others request by request ([`replay_requests`]). Returns the
/// page load times in milliseconds of the pages that completed (none for other workloads).
pub async fn replay(
    client: &Client,
    spec: &WorkloadSpec,
    seed: u64,
    requests: &[gearbox_workload::Request],
    options: &ReplayOptions,
) -> Result<Vec<f64>, ReplayError> {
    if matches!(spec.pattern(), Some(Pattern::Page(_))) {
        replay_pages(client, spec, seed, requests, options).await
    } else {
        replay_requests(client, requests, options).await?;
        Ok(Vec::new())
    }
}

/// Sends each request at its (scaled) send time, concurrently with those still running,
/// and returns when all have finished. Requests with `request_bytes > 0` are POSTs of that
/// many bytes; failures are not returned but recorded (the record's `error`). Each goes on
/// path `client_index mod paths`, or with a path scheduler on the path it picks (its
/// record then has `path_index` and `path_decision`).
pub async fn replay_requests(
    client: &Client,
    requests: &[gearbox_workload::Request],
    options: &ReplayOptions,
) -> Result<(), ReplayError> {
    options.check()?;
    let scheduler = match &options.path_scheduler {
        Some(s) => Some(Arc::new(Mutex::new(
            client
                .open_paths(&options.target, (s.make)())
                .await
                .map_err(ReplayError::Paths)?,
        ))),
        None => None,
    };
    let start = tokio::time::Instant::now();
    let mut running = tokio::task::JoinSet::new();
    for r in requests {
        tokio::time::sleep_until(options.send_time(start, r.send_at_ms)?).await;
        let url = format!("{}{}", options.target, r.path);
        let mut req = if r.request_bytes > 0 {
            let body = Bytes::from(vec![b'x'; usize::try_from(r.request_bytes).unwrap_or(usize::MAX)]);
            let mut post = Request::post(url, body, options.transport);
            // The edge's `/bytes/{n}` only answers n bytes and keeps nothing: sending
            // such a POST twice does no harm, so the fallback to TCP may retry it.
            post.idempotent = Some(true);
            post
        } else {
            Request::get(url, options.transport)
        };
        req.click = Some(r.click);
        req.force_new_connection = r.new_connection;
        req.path_index = options.path_index(r.client_index);
        if let Some(s) = &scheduler {
            let request = PathRequest {
                url: req.url.clone(),
                // RFC 9218's default urgency: a workload request carries no priority.
                urgency: 3,
                expected_bytes: Some(r.response_bytes),
                workload_client: Some(r.client_index),
            };
            let (path, reason) = s.lock().unwrap_or_else(|p| p.into_inner()).choose(client, &request);
            req.path_index = path;
            req.path_decision = Some(reason);
        }
        req.discard_body = true;
        let client = client.clone();
        let scheduled = scheduler.clone().map(|s| (s, req.path_index, r.response_bytes));
        running.spawn(async move {
            // The record is in telemetry and with the gear; errors are counted there.
            let _ = client.request(req).await;
            if let Some((s, path, bytes)) = scheduled {
                s.lock().unwrap_or_else(|p| p.into_inner()).ended(&client, path, bytes);
            }
        });
    }
    while running.join_next().await.is_some() {}
    Ok(())
}

/// Page workloads: one page load per click, started at the click's send time; returns the
/// load times (ms) of the pages that completed.
///
/// The workload's request stream lists a page's objects but not their dependencies, so
/// each click's page graph comes from [`WorkloadSpec::generate_page`] with a seed derived
/// from the run's seed and the click (same seed, same pages).
pub async fn replay_pages(
    client: &Client,
    spec: &WorkloadSpec,
    seed: u64,
    requests: &[gearbox_workload::Request],
    options: &ReplayOptions,
) -> Result<Vec<f64>, ReplayError> {
    options.check()?;
    let mut clicks: Vec<&gearbox_workload::Request> = Vec::new();
    for r in requests {
        if clicks.last().is_none_or(|last| last.click != r.click) {
            clicks.push(r);
        }
    }
    let start = tokio::time::Instant::now();
    let mut running = tokio::task::JoinSet::new();
    for first in clicks {
        let page = spec.generate_page(page_seed(seed, first.click))?;
        tokio::time::sleep_until(options.send_time(start, first.send_at_ms)?).await;
        let load = OnePage {
            client: client.clone(),
            page,
            options: options.clone(),
            click: first.click,
            path_index: options.path_index(first.client_index),
            fresh: first.new_connection,
        };
        running.spawn(load.run());
    }
    let mut loads = Vec::new();
    while let Some(done) = running.join_next().await {
        if let Ok(Some(ms)) = done {
            loads.push(ms);
        }
    }
    Ok(loads)
}

/// The seed of the page of `click` in a run seeded `seed`.
fn page_seed(seed: u64, click: u32) -> u64 {
    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(u64::from(click))
}

/// Loads one page of a page workload, the page of seed `page_seed`
/// ([`WorkloadSpec::generate_page`]), at once, as click 0 on fresh connections (on every
/// path with a path scheduler, else on path 0); returns its load time in milliseconds,
/// none when it failed. `gearbox load --page-seed` uses it, so that an evaluation loads
/// the very pages the simulator loads (`gearbox lab sailfish evaluate --emulator`).
pub async fn replay_page(
    client: &Client,
    spec: &WorkloadSpec,
    page_seed: u64,
    options: &ReplayOptions,
) -> Result<Vec<f64>, ReplayError> {
    options.check()?;
    let load = OnePage {
        client: client.clone(),
        page: spec.generate_page(page_seed)?,
        options: options.clone(),
        click: 0,
        path_index: 0,
        fresh: true,
    };
    Ok(load.run().await.into_iter().collect())
}

/// One page load of a replay.
struct OnePage {
    client: Client,
    page: Page,
    options: ReplayOptions,
    click: u32,
    /// The path of every object when there is no path scheduler.
    path_index: usize,
    fresh: bool,
}

impl OnePage {
    /// The page load time (ms), or none when the load failed.
    async fn run(self) -> Option<f64> {
        let OnePage {
            client,
            page,
            options,
            click,
            path_index,
            fresh,
        } = self;
        match options.path_scheduler {
            Some(scheduling) => {
                let mut scheduler = (scheduling.make)();
                let multipath = MultipathOptions {
                    click: Some(click),
                    fresh_connections: fresh,
                };
                match client
                    .load_page_multipath(&options.target, &page, scheduler.as_mut(), &multipath)
                    .await
                {
                    Ok(load) => Some(load.page.page_load_ms),
                    Err(e) => {
                        tracing::warn!(click, error = %e, "multipath page load failed");
                        None
                    }
                }
            }
            None => {
                let url = format!(
                    "{}{}",
                    options.target,
                    page.objects.first().map_or("/", |o| o.path.as_str())
                );
                let (transport, reason) = match &options.page_version {
                    Some(chooser) => {
                        let (t, r) = (chooser.choose)(&url, &page);
                        (t, Some(r))
                    }
                    None => (options.transport, None),
                };
                let page_options = PageLoadOptions {
                    transport,
                    path_index,
                    click: Some(click),
                    fresh_connection: fresh,
                    reason,
                };
                let ms = client
                    .load_page_with(&options.target, &page, &page_options)
                    .await
                    .ok()
                    .map(|p| p.page_load_ms);
                if let (Some(ms), Some(observe)) = (ms, options.page_version.as_ref().and_then(|c| c.observe.as_ref()))
                {
                    observe(&url, &page, transport, ms);
                }
                ms
            }
        }
    }
}

/// The records a [`RecordingGear`] saw, shared with whoever reads them after the replay
/// (the gear itself is moved into the client). Clones share one list.
#[derive(Debug, Clone, Default)]
pub struct RecordLog(Arc<Mutex<Vec<ClientRecord>>>);

impl RecordLog {
    /// An empty log.
    pub fn new() -> Self {
        RecordLog::default()
    }

    /// The records so far, leaving the log empty.
    pub fn take(&self) -> Vec<ClientRecord> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn push(&self, record: &ClientRecord) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(record.clone());
    }
}

/// A transport gear that passes choices to `inner` and keeps every observed record in a
/// [`RecordLog`]. The client calls `observe` for every request, page objects included, so
/// the log holds exactly what went to telemetry (and the inner gear learns from the same
/// records).
pub struct RecordingGear<G = StaticTransport> {
    inner: G,
    log: RecordLog,
}

impl<G: TransportGear> RecordingGear<G> {
    /// `inner` decides; its records go to `log`.
    pub fn new(inner: G, log: RecordLog) -> Self {
        RecordingGear { inner, log }
    }
}

impl<G: TransportGear> TransportGear for RecordingGear<G> {
    fn choose(&mut self, origin: &str, now: Instant) -> Decision<TransportChoice> {
        self.inner.choose(origin, now)
    }

    fn observe(&mut self, record: &ClientRecord, now: Instant) {
        self.inner.observe(record, now);
        self.log.push(record);
    }
}

/// Request completion times of one protocol in a replay.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProtocolStats {
    /// Requests that went over the protocol, failed ones included.
    pub requests: usize,
    /// Those that failed.
    pub errors: usize,
    /// RCT of each request that completed, milliseconds, ascending.
    pub rct_ms: Vec<f64>,
}

/// What a replay measured: requests and errors, RCT per protocol, page load times.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// The workload's name.
    pub workload: String,
    /// Its seed.
    pub seed: u64,
    /// Wall-clock length of the replay.
    pub elapsed: Duration,
    /// Records summarised (requests, page objects included).
    pub requests: usize,
    /// Failed requests by error kind (the record's `error`).
    pub errors: BTreeMap<String, usize>,
    /// Statistics per protocol (`h1`, `h2`, `h3`).
    pub by_protocol: BTreeMap<String, ProtocolStats>,
    /// Load time of each completed page, milliseconds, ascending.
    pub page_load_ms: Vec<f64>,
}

impl Summary {
    /// Summarises the `records` and `page_loads` (ms) of a replay of `workload` seeded `seed`
    /// that took `elapsed`. A record without `error` and without an RCT counts as a request
    /// but adds no time.
    pub fn new(workload: &str, seed: u64, elapsed: Duration, records: &[ClientRecord], page_loads: &[f64]) -> Self {
        let mut errors = BTreeMap::new();
        let mut by_protocol: BTreeMap<String, ProtocolStats> = BTreeMap::new();
        for r in records {
            let s = by_protocol.entry(r.protocol.to_string()).or_default();
            s.requests += 1;
            match (&r.error, r.rct_ms) {
                (Some(kind), _) => {
                    s.errors += 1;
                    *errors.entry(kind.clone()).or_insert(0) += 1;
                }
                (None, Some(rct)) => s.rct_ms.push(rct),
                (None, None) => {}
            }
        }
        for s in by_protocol.values_mut() {
            s.rct_ms.sort_by(f64::total_cmp);
        }
        let mut page_load_ms = page_loads.to_vec();
        page_load_ms.sort_by(f64::total_cmp);
        Summary {
            workload: workload.to_string(),
            seed,
            elapsed,
            requests: records.len(),
            errors,
            by_protocol,
            page_load_ms,
        }
    }

    /// The summary as JSON (`gearbox load --json`): per protocol and for page loads the
    /// count, mean, median, p90 and p99 in milliseconds (`null` where there are no times).
    /// Percentiles interpolate between ranks (`gearbox_dataplane::stats::percentile`).
    pub fn to_json(&self) -> serde_json::Value {
        let stats = |v: &[f64]| {
            serde_json::json!({
                "mean_ms": mean(v), "median_ms": percentile(v, 50.0),
                "p90_ms": percentile(v, 90.0), "p99_ms": percentile(v, 99.0),
            })
        };
        let protocols: serde_json::Map<String, serde_json::Value> = self
            .by_protocol
            .iter()
            .map(|(p, s)| {
                let mut v = stats(&s.rct_ms);
                v["requests"] = s.requests.into();
                v["errors"] = s.errors.into();
                (p.clone(), v)
            })
            .collect();
        let mut pages = stats(&self.page_load_ms);
        pages["loads"] = self.page_load_ms.len().into();
        serde_json::json!({
            "workload": self.workload, "seed": self.seed, "elapsed_s": self.elapsed.as_secs_f64(),
            "requests": self.requests, "errors": self.errors, "rct": protocols, "page_load": pages,
        })
    }

    /// Writes the summary as a table (`gearbox load`, `gearbox demo`): a headline, one row
    /// per protocol, the page loads if any, and where the records are (`telemetry`).
    pub fn write_table(&self, out: &mut impl Write, telemetry: Option<&Path>) -> std::io::Result<()> {
        let f = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |x| format!("{x:.1}"));
        let error_count: usize = self.errors.values().sum();
        writeln!(
            out,
            "workload {} (seed {}): {} requests in {:.1} s, {} errors{}",
            self.workload,
            self.seed,
            self.requests,
            self.elapsed.as_secs_f64(),
            error_count,
            if self.errors.is_empty() {
                String::new()
            } else {
                format!(
                    " ({})",
                    self.errors
                        .iter()
                        .map(|(k, n)| format!("{k}: {n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        )?;
        writeln!(
            out,
            "{:<9}{:>9}{:>8}{:>11}{:>11}{:>11}{:>11}",
            "protocol", "requests", "errors", "mean_ms", "median_ms", "p90_ms", "p99_ms"
        )?;
        for (p, s) in &self.by_protocol {
            writeln!(
                out,
                "{:<9}{:>9}{:>8}{:>11}{:>11}{:>11}{:>11}",
                p,
                s.requests,
                s.errors,
                f(mean(&s.rct_ms)),
                f(percentile(&s.rct_ms, 50.0)),
                f(percentile(&s.rct_ms, 90.0)),
                f(percentile(&s.rct_ms, 99.0)),
            )?;
        }
        if !self.page_load_ms.is_empty() {
            let v = &self.page_load_ms;
            writeln!(
                out,
                "page loads: {} complete, mean {} ms, median {} ms, p90 {} ms",
                v.len(),
                f(mean(v)),
                f(percentile(v, 50.0)),
                f(percentile(v, 90.0))
            )?;
        }
        if let Some(t) = telemetry {
            writeln!(out, "records: {}", t.display())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gearbox_dataplane::telemetry::{Protocol, Side, SCHEMA_VERSION};

    fn record(protocol: Protocol, rct_ms: Option<f64>, error: Option<&str>) -> ClientRecord {
        ClientRecord {
            side: Side::Client,
            schema: SCHEMA_VERSION,
            time_unix_ms: 0.0,
            conn_id: 1,
            server_addr: "127.0.0.1:4433".into(),
            local_addr: String::new(),
            protocol,
            method: "GET".into(),
            url: "https://127.0.0.1:4433/bytes/1".into(),
            status: error.is_none().then_some(200),
            bytes: 1,
            rct_ms,
            ttfb_ms: None,
            new_connection: false,
            handshake_ms: None,
            transport: None,
            decision: None,
            decision_id: None,
            click: None,
            error: error.map(str::to_owned),
            retried_from: None,
            retry_lost_ms: None,
            hedged: None,
            hedge_at_ms: None,
            path_index: None,
            path_decision: None,
        }
    }

    fn example() -> Summary {
        let records = [
            record(Protocol::H3, Some(30.0), None),
            record(Protocol::H2, Some(20.0), None),
            record(Protocol::H2, None, Some("timeout")),
            record(Protocol::H2, Some(10.0), None),
            record(Protocol::H3, None, Some("connect")),
            record(Protocol::H3, None, Some("timeout")),
        ];
        Summary::new("feed", 7, Duration::from_millis(2500), &records, &[])
    }

    #[test]
    fn summary_counts_requests_and_errors_per_protocol_and_sorts_the_times() {
        let s = example();
        assert_eq!(s.requests, 6);
        assert_eq!(
            s.errors,
            BTreeMap::from([("connect".to_string(), 1), ("timeout".to_string(), 2)])
        );
        let h2 = &s.by_protocol["h2"];
        assert_eq!((h2.requests, h2.errors, h2.rct_ms.clone()), (3, 1, vec![10.0, 20.0]));
        let h3 = &s.by_protocol["h3"];
        assert_eq!((h3.requests, h3.errors, h3.rct_ms.clone()), (3, 2, vec![30.0]));
    }

    #[test]
    fn summary_table_has_a_row_per_protocol_and_the_errors_by_kind() {
        let mut out = Vec::new();
        example()
            .write_table(&mut out, Some(Path::new("client.jsonl")))
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "workload feed (seed 7): 6 requests in 2.5 s, 3 errors (connect: 1, timeout: 2)"
        );
        assert_eq!(
            lines[1],
            "protocol  requests  errors    mean_ms  median_ms     p90_ms     p99_ms"
        );
        assert_eq!(
            lines[2],
            "h2               3       1       15.0       15.0       19.0       19.9"
        );
        assert_eq!(
            lines[3],
            "h3               3       2       30.0       30.0       30.0       30.0"
        );
        assert_eq!(lines[4], "records: client.jsonl");
        assert_eq!(lines.len(), 5, "no page line without page loads");
    }

    #[test]
    fn summary_json_has_null_times_where_nothing_completed() {
        let v = Summary::new(
            "page",
            1,
            Duration::from_secs(1),
            &[record(Protocol::H2, None, Some("tls"))],
            &[],
        )
        .to_json();
        assert_eq!(v["rct"]["h2"]["requests"], 1);
        assert_eq!(v["rct"]["h2"]["errors"], 1);
        assert!(v["rct"]["h2"]["median_ms"].is_null());
        assert_eq!(v["page_load"]["loads"], 0);
        assert!(v["page_load"]["mean_ms"].is_null());
    }

    #[test]
    fn page_loads_are_summarised_in_the_table() {
        let s = Summary::new("page", 1, Duration::from_secs(1), &[], &[300.0, 100.0, 200.0]);
        assert_eq!(s.page_load_ms, vec![100.0, 200.0, 300.0]);
        let mut out = Vec::new();
        s.write_table(&mut out, None).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.lines()
                .any(|l| l.starts_with("page loads: 3 complete, mean 200.0 ms, median 200.0 ms")),
            "{text}"
        );
    }

    #[test]
    fn replay_options_refuse_what_would_fail_half_way() {
        let options = |time_scale, paths| ReplayOptions {
            target: "https://127.0.0.1:4433".into(),
            transport: TransportPref::Tcp,
            time_scale,
            paths,
            path_scheduler: None,
            page_version: None,
        };
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(
                matches!(options(bad, 1).check(), Err(ReplayError::TimeScale(_))),
                "{bad}"
            );
        }
        assert!(matches!(options(1.0, 0).check(), Err(ReplayError::NoPaths)));
        assert!(options(0.5, 2).check().is_ok());
        let start = tokio::time::Instant::now();
        assert!(matches!(
            options(1e300, 1).send_time(start, 1e300),
            Err(ReplayError::SendTime { .. })
        ));
        assert_eq!(
            options(0.5, 1).send_time(start, 1000.0).unwrap(),
            start + Duration::from_millis(500)
        );
        assert_eq!(options(0.5, 3).path_index(7), 1);
    }
}
