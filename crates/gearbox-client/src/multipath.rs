//! Multipath page loads: one QUIC connection per local path to the same edge, HTTP/3
//! on each, and a path scheduler that puts every request of the page on one of them
//! (SAILfish §4.2.1: the action is the path of each stream).
//!
//! gearbox's multipath is one connection per local address (docs/architecture.md),
//! so a path is a key of the pools like the origin is (`crate::conn::Key`), and
//! scheduling a stream is choosing which path's connection carries the request; the
//! response comes back on that path. Rejected alternative: Multipath QUIC (one
//! connection over several paths, as the MPQUIC that SAILfish builds on), which
//! quinn does not implement; stream-based schedulers put whole streams on one path
//! anyway (SAILfish §5.2.3), so separate connections lose them nothing but the shared
//! handshake.
//!
//! A load goes like this:
//! 1. Every local address is checked (a path that is not an address of this host is
//!    an error naming it) and a connection is opened on every path at once, as MPQUIC
//!    opens its paths when the connection starts; a path whose handshake fails is down
//!    from the start.
//! 2. Objects are requested as in [`Client::load_page_with`]: each once its
//!    dependencies are complete, with its RFC 9218 urgency; objects that become ready
//!    together go in the browser's order SAILfish uses (SAILfish §5.1.4): by urgency,
//!    then HTML, CSS, JS before everything else.
//! 3. Before each request the scheduler ([`PathGear`]) is given every path that is
//!    up as a [`PathState`], read at that moment from the path's quinn statistics
//!    ([`PathMonitor`]) and from what is in flight on it, and returns the path.
//! 4. A request that fails because of its path (QUIC error, the connection went
//!    silent, a timeout) takes the path out for the rest of the load and is sent again
//!    on a path the scheduler picks among those left (its record says
//!    `;reissued-from=N`); the connection's silence watch (`crate::silence`) ends every
//!    other exchange on a path that stalled, so those are re-issued too. Nothing is
//!    lost while one path is up.
//!
//! The per-path state is the client's view: the sRTT, min RTT, window and packet
//! counters are those of the client's side of each connection (quinn's statistics),
//! and the delivery rate is measured on what the client receives. SAILfish schedules
//! on the server (§4.2.1), where the window and losses are those of the responses;
//! on the client, the responses' bytes in flight are counted from the requests'
//! expected sizes instead.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use gearbox_dataplane::telemetry::Protocol;
use gearbox_gear_api::{Decision, PathGear, PathRequest, PathState, SRTT_HISTORY};
use gearbox_workload::{ObjectKind, Page};
use http::HeaderValue;

use crate::client::{parse_url, resolve, Client, ParsedUrl, Request};
use crate::conn::{Dial, Key};
use crate::error::ClientError;
use crate::gear::TransportPref;
use crate::page::{ObjectTiming, PageLoad};

/// How many delivery-rate samples the windowed maximum keeps (BBR's bandwidth filter
/// spans 10 round trips).
pub const RATE_SAMPLES: usize = 10;
/// Shortest interval a delivery-rate sample is taken over: shorter ones measure the
/// arrival of single datagrams, not the path's rate.
pub const MIN_RATE_INTERVAL: Duration = Duration::from_millis(10);

/// How to run a multipath page load.
#[derive(Debug, Clone)]
pub struct MultipathOptions {
    /// Workload click index, written into every object's record.
    pub click: Option<u32>,
    /// Open new connections on every path (a first visit: the handshakes count in the
    /// page load time); otherwise pooled ones are reused.
    pub fresh_connections: bool,
}

impl Default for MultipathOptions {
    fn default() -> Self {
        MultipathOptions {
            click: None,
            fresh_connections: true,
        }
    }
}

/// A path that was taken out during a load.
#[derive(Debug, Clone)]
pub struct PathDown {
    /// Path index.
    pub index: usize,
    /// Milliseconds from the load's start.
    pub at_ms: f64,
    /// Why (the error of the request or handshake that showed it).
    pub reason: String,
}

/// The result of a multipath page load.
#[derive(Debug, Clone)]
pub struct MultipathLoad {
    /// The page load: every object's successful attempt (its record names its path).
    pub page: PageLoad,
    /// Records of attempts that failed on a path and were sent again.
    pub failed_attempts: Vec<gearbox_dataplane::telemetry::ClientRecord>,
    /// Paths taken out, in order.
    pub paths_down: Vec<PathDown>,
}

/// One reading of a path's QUIC connection statistics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PathSample {
    /// Smoothed RTT, ms.
    pub srtt_ms: f64,
    /// Minimum RTT, ms.
    pub min_rtt_ms: f64,
    /// Congestion window, bytes.
    pub cwnd_bytes: u64,
    /// Packets sent so far on the connection.
    pub sent_packets: u64,
    /// Packets declared lost so far.
    pub lost_packets: u64,
    /// UDP bytes received so far.
    pub rx_bytes: u64,
}

impl PathSample {
    /// The reading of a quinn connection now.
    pub fn of(conn: &quinn::Connection) -> Self {
        let s = conn.stats();
        PathSample {
            srtt_ms: s.path.rtt.as_secs_f64() * 1e3,
            min_rtt_ms: s.path.min_rtt.as_secs_f64() * 1e3,
            cwnd_bytes: s.path.cwnd,
            sent_packets: s.path.sent_packets,
            lost_packets: s.path.lost_packets,
            rx_bytes: s.udp_rx.bytes,
        }
    }
}

/// One path's state through a load, built from its [`PathSample`]s and the streams
/// scheduled on it; sans-IO (every reading comes with its `now`), so its rules are
/// tested with invented readings.
#[derive(Debug, Clone)]
pub struct PathMonitor {
    index: usize,
    local_addr: String,
    /// Counters at the start of the epoch (the load).
    baseline: Option<PathSample>,
    /// The last reading and when it was taken, with whether streams were in flight then.
    last: Option<(Instant, PathSample, bool)>,
    latest: Option<PathSample>,
    history: VecDeque<f64>,
    rates: VecDeque<f64>,
    bytes_in_flight: u64,
    streams_in_flight: usize,
}

impl PathMonitor {
    /// A monitor of path `index` bound to `local_addr`, with nothing read yet.
    pub fn new(index: usize, local_addr: impl Into<String>) -> Self {
        PathMonitor {
            index,
            local_addr: local_addr.into(),
            baseline: None,
            last: None,
            latest: None,
            history: VecDeque::new(),
            rates: VecDeque::new(),
            bytes_in_flight: 0,
            streams_in_flight: 0,
        }
    }

    /// A reading of the path's connection. The first one starts the epoch. A
    /// delivery-rate sample is taken over the interval since the previous reading when
    /// it is at least [`MIN_RATE_INTERVAL`] long and streams were in flight at both
    /// ends of it (an idle path's rate says nothing about the path: BBR's app-limited
    /// rule).
    pub fn observe(&mut self, now: Instant, sample: PathSample) {
        if self.baseline.is_none() {
            self.baseline = Some(sample);
        }
        if self.history.back() != Some(&sample.srtt_ms) {
            self.history.push_back(sample.srtt_ms);
            while self.history.len() > SRTT_HISTORY {
                self.history.pop_front();
            }
        }
        let busy = self.streams_in_flight > 0;
        match self.last {
            Some((at, prev, was_busy)) => {
                let dt = now.saturating_duration_since(at);
                if dt >= MIN_RATE_INTERVAL {
                    if busy && was_busy {
                        let bits = sample.rx_bytes.saturating_sub(prev.rx_bytes) as f64 * 8.0;
                        self.rates.push_back(bits / dt.as_secs_f64());
                        while self.rates.len() > RATE_SAMPLES {
                            self.rates.pop_front();
                        }
                    }
                    self.last = Some((now, sample, busy));
                }
            }
            None => self.last = Some((now, sample, busy)),
        }
        self.latest = Some(sample);
    }

    /// A stream of `expected_bytes` was scheduled on the path.
    pub fn stream_started(&mut self, expected_bytes: u64) {
        self.streams_in_flight += 1;
        self.bytes_in_flight += expected_bytes;
    }

    /// A stream of `expected_bytes` scheduled on the path ended (done or failed).
    pub fn stream_ended(&mut self, expected_bytes: u64) {
        self.streams_in_flight = self.streams_in_flight.saturating_sub(1);
        self.bytes_in_flight = self.bytes_in_flight.saturating_sub(expected_bytes);
    }

    /// The path's state for the scheduler.
    pub fn state(&self) -> PathState {
        let latest = self.latest;
        let base = self.baseline;
        let since = |f: fn(&PathSample) -> u64| match (latest, base) {
            (Some(l), Some(b)) => f(&l).saturating_sub(f(&b)),
            _ => 0,
        };
        let lost = since(|s| s.lost_packets);
        PathState {
            index: self.index,
            local_addr: self.local_addr.clone(),
            delivery_rate_bps: self.rates.iter().copied().reduce(f64::max).map(|r| r as u64),
            srtt_ms: latest.map(|s| s.srtt_ms),
            srtt_history_ms: self.history.iter().copied().collect(),
            min_rtt_ms: latest.map(|s| s.min_rtt_ms),
            cwnd_bytes: latest.map(|s| s.cwnd_bytes),
            bytes_in_flight: self.bytes_in_flight,
            streams_in_flight: self.streams_in_flight,
            lost_packets: lost,
            retransmitted_packets: lost,
            sent_packets: since(|s| s.sent_packets),
        }
    }
}

/// Whether a failed request says its path is broken (rather than the request or
/// the server): handshake or connection failure, silence, a timeout.
fn path_failure(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::Quic { .. }
            | ClientError::QuicSilent { .. }
            | ClientError::Timeout { .. }
            | ClientError::Connect { .. }
    )
}

/// Browser order of objects that become ready together (SAILfish §5.1.4): urgency,
/// then HTML, CSS, JS before everything else, then page order.
fn browser_rank(kind: ObjectKind) -> u8 {
    match kind {
        ObjectKind::Html => 0,
        ObjectKind::Css => 1,
        ObjectKind::Js => 2,
        _ => 3,
    }
}

/// Checks that every local path address is an address of this host by binding a UDP
/// socket to it.
fn check_local_addrs(addrs: &[IpAddr]) -> Result<(), ClientError> {
    for &addr in addrs {
        std::net::UdpSocket::bind(SocketAddr::new(addr, 0)).map_err(|e| ClientError::LocalAddr {
            addr,
            reason: e.to_string(),
        })?;
    }
    Ok(())
}

/// What one attempt at an object gives back.
type Attempt = (
    usize,
    usize,
    f64,
    f64,
    Result<crate::client::Response, ClientError>,
    gearbox_dataplane::telemetry::ClientRecord,
);

impl Client {
    /// Opens (or, without `fresh`, reuses) the HTTP/3 connection of path `index` to
    /// the URL's origin.
    async fn connect_path(&self, url: &ParsedUrl, index: usize, fresh: bool) -> Result<(), ClientError> {
        let local = self.local_for(index)?;
        let target = resolve(url, local).await?;
        let key: Key = (url.authority.clone(), index);
        let dial = Dial {
            target: &target,
            local,
            tcp_cc: self.inner.cfg.tcp_cc,
            connect_timeout: self.inner.cfg.connect_timeout,
        };
        self.h3_connection(&key, &dial, fresh).await.map(|_| ())
    }

    /// The statistics of path `index`'s pooled connection to `authority` now (`None`
    /// while it is being opened or when it has none).
    fn path_sample(&self, authority: &str, index: usize) -> Option<(PathSample, String)> {
        let slot = self.inner.pools.h3.slot(&(authority.to_string(), index));
        let guard = slot.try_lock().ok()?;
        let conn = guard.conn.as_ref()?;
        Some((PathSample::of(&conn.quic), conn.info.local_addr.clone()))
    }

    /// Loads `page` from `origin` (`https://host:port`) over HTTP/3 on every local path
    /// of the client, each request on the path `scheduler` chooses; see the module
    /// documentation for the rules. Fails when a local address is not one of this
    /// host, when no path's connection opens, when an object fails for a reason that
    /// is not its path, or when every path is down.
    pub async fn load_page_multipath(
        &self,
        origin: &str,
        page: &Page,
        scheduler: &mut dyn PathGear,
        options: &MultipathOptions,
    ) -> Result<MultipathLoad, ClientError> {
        page.validate().map_err(|e| ClientError::Page(e.to_string()))?;
        check_local_addrs(&self.inner.cfg.local_addrs)?;
        let origin = origin.trim_end_matches('/');
        let url = parse_url(&format!("{origin}/"))?;
        let authority = url.authority.clone();
        let path_count = self.inner.cfg.local_addrs.len().max(1);
        let start = Instant::now();
        let since_start = || start.elapsed().as_secs_f64() * 1e3;

        let opened =
            futures::future::join_all((0..path_count).map(|i| self.connect_path(&url, i, options.fresh_connections)))
                .await;
        let mut monitors: Vec<PathMonitor> = Vec::with_capacity(path_count);
        let mut up = vec![true; path_count];
        let mut paths_down = Vec::new();
        let mut first_open_error = None;
        for (i, result) in opened.into_iter().enumerate() {
            let local = self
                .inner
                .cfg
                .local_addrs
                .get(i)
                .map(|a| a.to_string())
                .unwrap_or_default();
            monitors.push(PathMonitor::new(i, local));
            if let Err(e) = result {
                tracing::warn!(path = i, error = %e, "path down: its connection did not open");
                up[i] = false;
                paths_down.push(PathDown {
                    index: i,
                    at_ms: since_start(),
                    reason: e.to_string(),
                });
                first_open_error.get_or_insert(e);
            }
        }
        if !up.iter().any(|&u| u) {
            return Err(first_open_error.unwrap_or(ClientError::Path { index: 0, available: 0 }));
        }

        let count = page.objects.len();
        let mut waiting_on: Vec<usize> = page.objects.iter().map(|o| o.depends_on.len()).collect();
        let mut dependents: HashMap<usize, Vec<usize>> = HashMap::new();
        for object in &page.objects {
            for &d in &object.depends_on {
                dependents.entry(d).or_default().push(object.id);
            }
        }
        // (object id, path it failed on) of objects ready to be requested.
        let mut ready: Vec<(usize, Option<usize>)> = page
            .objects
            .iter()
            .filter(|o| o.depends_on.is_empty())
            .map(|o| (o.id, None))
            .collect();
        let transport = Decision::new(TransportPref::Quic, "multipath:h3");
        let mut running = FuturesUnordered::new();
        let mut done: Vec<Option<ObjectTiming>> = vec![None; count];
        let mut failed_attempts = Vec::new();
        let mut first_error: Option<ClientError> = None;
        loop {
            if first_error.is_none() && !ready.is_empty() {
                ready.sort_by_key(|&(id, _)| {
                    let o = &page.objects[id];
                    (o.priority, browser_rank(o.kind), id)
                });
                for (id, failed_on) in ready.drain(..) {
                    let now = Instant::now();
                    for m in monitors.iter_mut().filter(|m| up[m.index]) {
                        if let Some((sample, local)) = self.path_sample(&authority, m.index) {
                            if m.local_addr.is_empty() {
                                m.local_addr = local;
                            }
                            m.observe(now, sample);
                        }
                    }
                    let states: Vec<PathState> = monitors
                        .iter()
                        .filter(|m| up[m.index])
                        .map(PathMonitor::state)
                        .collect();
                    let object = &page.objects[id];
                    let request = PathRequest {
                        url: format!("{origin}{}", object.path),
                        urgency: object.priority.min(7),
                        expected_bytes: Some(object.size_bytes),
                        workload_client: None,
                    };
                    let decision = scheduler.choose(&request, &states, now);
                    let path = states[decision.choice.min(states.len() - 1)].index;
                    monitors[path].stream_started(object.size_bytes);
                    let mut req = Request::get(request.url, TransportPref::Quic);
                    req.path_index = path;
                    req.click = options.click;
                    req.discard_body = true;
                    // RFC 9218 §4.1: urgency 0..=7, incremental left at its default (false).
                    if let Ok(v) = HeaderValue::from_str(&format!("u={}", object.priority.min(7))) {
                        req.headers.insert("priority", v);
                    }
                    let mut reason = decision.reason;
                    if let Some(from) = failed_on {
                        reason.push_str(&format!(";reissued-from={from}"));
                    }
                    req.path_decision = Some(reason);
                    let decided = Some(transport.clone());
                    running.push(async move {
                        let started_ms = start.elapsed().as_secs_f64() * 1e3;
                        let (result, record) = self.execute(req, decided).await;
                        let attempt: Attempt = (
                            id,
                            path,
                            started_ms,
                            start.elapsed().as_secs_f64() * 1e3,
                            result,
                            record,
                        );
                        attempt
                    });
                }
            }
            let Some((id, path, started_ms, completed_ms, result, record)) = running.next().await else {
                break;
            };
            let object = &page.objects[id];
            monitors[path].stream_ended(object.size_bytes);
            if let Some((sample, _)) = self.path_sample(&authority, path) {
                monitors[path].observe(Instant::now(), sample);
            }
            scheduler.observe(&record, Instant::now());
            match result {
                Ok(response) => {
                    done[id] = Some(ObjectTiming {
                        id,
                        path: object.path.clone(),
                        started_ms,
                        completed_ms,
                        status: response.status,
                        record,
                    });
                    for &next in dependents.get(&id).map(Vec::as_slice).unwrap_or(&[]) {
                        waiting_on[next] -= 1;
                        if waiting_on[next] == 0 {
                            ready.push((next, None));
                        }
                    }
                }
                Err(e) if path_failure(&e) => {
                    if up[path] {
                        tracing::warn!(path, error = %e, "path down: a request failed on it");
                        up[path] = false;
                        paths_down.push(PathDown {
                            index: path,
                            at_ms: completed_ms,
                            reason: e.to_string(),
                        });
                    }
                    failed_attempts.push(record);
                    if up.iter().any(|&u| u) {
                        ready.push((id, Some(path)));
                    } else {
                        first_error.get_or_insert(e);
                    }
                }
                Err(e) => {
                    failed_attempts.push(record);
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        let objects: Vec<ObjectTiming> = done.into_iter().flatten().collect();
        let page_load_ms = objects.iter().map(|o| o.completed_ms).fold(0.0, f64::max);
        Ok(MultipathLoad {
            page: PageLoad {
                page_load_ms,
                protocol: Protocol::H3,
                decision: "multipath:h3".into(),
                objects,
            },
            failed_attempts,
            paths_down,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(srtt_ms: f64, sent: u64, lost: u64, rx_bytes: u64) -> PathSample {
        PathSample {
            srtt_ms,
            min_rtt_ms: 5.0,
            cwnd_bytes: 12_000,
            sent_packets: sent,
            lost_packets: lost,
            rx_bytes,
        }
    }

    #[test]
    fn packet_counters_cover_the_epoch_only() {
        let mut m = PathMonitor::new(1, "10.0.1.1");
        let t = Instant::now();
        m.observe(t, sample(20.0, 100, 3, 0));
        m.observe(t + Duration::from_millis(50), sample(20.0, 160, 5, 0));
        let s = m.state();
        assert_eq!((s.sent_packets, s.lost_packets, s.retransmitted_packets), (60, 2, 2));
        assert_eq!(
            (s.index, s.local_addr.as_str(), s.cwnd_bytes),
            (1, "10.0.1.1", Some(12_000))
        );
    }

    #[test]
    fn delivery_rate_is_the_largest_busy_sample_and_idle_intervals_do_not_count() {
        let mut m = PathMonitor::new(0, "a");
        let t = Instant::now();
        m.observe(t, sample(20.0, 0, 0, 0));
        // Idle: 1 MB in 100 ms would be 80 Mbit/s, but nothing was in flight.
        m.observe(t + Duration::from_millis(100), sample(20.0, 0, 0, 1_000_000));
        assert_eq!(m.state().delivery_rate_bps, None);
        m.stream_started(500_000);
        m.observe(t + Duration::from_millis(110), sample(20.0, 0, 0, 1_000_000));
        // Busy at both ends: 125 000 bytes in 100 ms = 10 Mbit/s, then 5 Mbit/s.
        m.observe(t + Duration::from_millis(210), sample(20.0, 0, 0, 1_125_000));
        m.observe(t + Duration::from_millis(310), sample(20.0, 0, 0, 1_187_500));
        assert_eq!(m.state().delivery_rate_bps, Some(10_000_000));
        assert_eq!((m.state().streams_in_flight, m.state().bytes_in_flight), (1, 500_000));
        m.stream_ended(500_000);
        assert_eq!((m.state().streams_in_flight, m.state().bytes_in_flight), (0, 0));
    }

    #[test]
    fn readings_closer_than_the_minimum_interval_give_no_rate() {
        let mut m = PathMonitor::new(0, "a");
        m.stream_started(1);
        let t = Instant::now();
        m.observe(t, sample(20.0, 0, 0, 0));
        m.observe(t + Duration::from_millis(2), sample(20.0, 0, 0, 100_000));
        assert_eq!(m.state().delivery_rate_bps, None);
    }

    #[test]
    fn srtt_history_keeps_the_last_changes_oldest_first() {
        let mut m = PathMonitor::new(0, "a");
        let t = Instant::now();
        for (i, rtt) in [10.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0, 19.0]
            .into_iter()
            .enumerate()
        {
            m.observe(t + Duration::from_millis(i as u64), sample(rtt, 0, 0, 0));
        }
        let s = m.state();
        assert_eq!(s.srtt_history_ms, vec![12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0, 19.0]);
        assert_eq!(s.srtt_ms, Some(19.0));
    }

    #[test]
    fn a_local_address_that_is_not_of_this_host_is_named() {
        // 192.0.2.0/24 is TEST-NET-1 (RFC 5737): never an address of this host.
        let bad: IpAddr = "192.0.2.77".parse().unwrap();
        let err = check_local_addrs(&["127.0.0.1".parse().unwrap(), bad]).unwrap_err();
        assert!(err.to_string().contains("192.0.2.77"), "{err}");
        assert_eq!(err.kind(), "local_addr");
    }

    #[test]
    fn html_css_js_go_before_images_of_the_same_urgency() {
        assert!(browser_rank(ObjectKind::Html) < browser_rank(ObjectKind::Css));
        assert!(browser_rank(ObjectKind::Css) < browser_rank(ObjectKind::Js));
        assert!(browser_rank(ObjectKind::Js) < browser_rank(ObjectKind::Image));
    }
}
