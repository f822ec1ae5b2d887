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

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use futures::stream::{FuturesUnordered, StreamExt};
use gearbox_dataplane::telemetry::Protocol;
use gearbox_gear_api::{Decision, PathGear, PathMonitor, PathRequest, PathSample, PathState};
use gearbox_workload::Page;
use http::HeaderValue;

use crate::client::{parse_url, resolve, Client, ParsedUrl, Request};
use crate::conn::{Dial, Key};
use crate::error::ClientError;
use crate::gear::TransportPref;
use crate::page::{ObjectTiming, PageLoad};
use crate::silence::Fallback;

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

/// A reading of `conn`'s statistics for its path's [`PathMonitor`].
fn path_sample(conn: &quinn::Connection) -> PathSample {
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

/// Checks that every local path address is an address of this host by binding a UDP
/// socket to it; the error names the first that is not.
pub fn check_local_addrs(addrs: &[IpAddr]) -> Result<(), ClientError> {
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
            mptcp: self.inner.cfg.mptcp,
            connect_timeout: self.inner.cfg.connect_timeout,
        };
        // The other paths are this path's fallback: a path whose handshake fails is down
        // and the load goes on without it, so the handshake is bounded as one with a
        // fallback (`crate::silence::handshake_bound`).
        self.h3_connection(&key, &dial, fresh, Fallback::Available)
            .await
            .map(|_| ())
    }

    /// The statistics of path `index`'s pooled connection to `authority` now (`None`
    /// while it is being opened or when it has none).
    fn path_sample(&self, authority: &str, index: usize) -> Option<(PathSample, String)> {
        let slot = self.inner.pools.h3.slot(&(authority.to_string(), index));
        let guard = slot.try_lock().ok()?;
        let conn = guard.conn.as_ref()?;
        Some((path_sample(&conn.quic), conn.info.local_addr.clone()))
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
                ready.sort_by_key(|&(id, _)| page.objects[id].browser_order());
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
                load_event_ms: crate::page::load_event_ms(page, &objects),
                protocol: Protocol::H3,
                decision: "multipath:h3".into(),
                objects,
            },
            failed_attempts,
            paths_down,
        })
    }
}

/// Path choice for the requests of a request workload (`feed`, `app`, `search`, `bulk`)
/// on every local path: each request on the path a [`PathGear`] picks from the paths'
/// states, as each request of a multipath page load (SAILfish §4.2.1; no page, so no
/// dependencies and no browser order: requests go at their send times). Every path's
/// connection is opened first, as a page load opens them; a path whose connection does
/// not open stays a choice, and its requests fail and are recorded as such (a workload
/// replay records failures and goes on). One scheduler and one [`PathMonitor`] per path
/// serve the whole replay (its counters cover the replay, not a page).
pub(crate) struct RequestScheduler {
    gear: Box<dyn PathGear>,
    monitors: Vec<PathMonitor>,
    authority: String,
}

impl Client {
    /// Opens every local path's HTTP/3 connection to `origin` (`https://host:port`) for a
    /// workload replay whose requests `gear` places.
    pub(crate) async fn open_paths(
        &self,
        origin: &str,
        gear: Box<dyn PathGear>,
    ) -> Result<RequestScheduler, ClientError> {
        check_local_addrs(&self.inner.cfg.local_addrs)?;
        let url = parse_url(&format!("{}/", origin.trim_end_matches('/')))?;
        let paths = self.inner.cfg.local_addrs.len().max(1);
        let opened = futures::future::join_all((0..paths).map(|i| self.connect_path(&url, i, false))).await;
        for (i, result) in opened.into_iter().enumerate() {
            if let Err(e) = result {
                tracing::warn!(path = i, error = %e, "path's connection did not open; its requests will fail");
            }
        }
        let local = |i: usize| {
            self.inner
                .cfg
                .local_addrs
                .get(i)
                .map(|a| a.to_string())
                .unwrap_or_default()
        };
        Ok(RequestScheduler {
            gear,
            monitors: (0..paths).map(|i| PathMonitor::new(i, local(i))).collect(),
            authority: url.authority,
        })
    }
}

impl RequestScheduler {
    /// The path of `request` (whose response is `request.expected_bytes`) and the
    /// scheduler's reason, read from every path's connection now; the path's monitor counts
    /// the response in flight until [`RequestScheduler::ended`].
    pub(crate) fn choose(&mut self, client: &Client, request: &PathRequest) -> (usize, String) {
        let now = Instant::now();
        for m in &mut self.monitors {
            if let Some((sample, _)) = client.path_sample(&self.authority, m.index) {
                m.observe(now, sample);
            }
        }
        let states: Vec<PathState> = self.monitors.iter().map(PathMonitor::state).collect();
        let decision = self.gear.choose(request, &states, now);
        let path = states[decision.choice.min(states.len() - 1)].index;
        self.monitors[path].stream_started(request.expected_bytes.unwrap_or(0));
        (path, decision.reason)
    }

    /// The request of `expected_bytes` on `path` ended (done or failed): the path's
    /// statistics are read as the response completes, as a page load reads them.
    pub(crate) fn ended(&mut self, client: &Client, path: usize, expected_bytes: u64) {
        self.monitors[path].stream_ended(expected_bytes);
        if let Some((sample, _)) = client.path_sample(&self.authority, path) {
            self.monitors[path].observe(Instant::now(), sample);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_address_that_is_not_of_this_host_is_named() {
        // 192.0.2.0/24 is TEST-NET-1 (RFC 5737): never an address of this host.
        let bad: IpAddr = "192.0.2.77".parse().unwrap();
        let err = check_local_addrs(&["127.0.0.1".parse().unwrap(), bad]).unwrap_err();
        assert!(err.to_string().contains("192.0.2.77"), "{err}");
        assert_eq!(err.kind(), "local_addr");
    }
}
