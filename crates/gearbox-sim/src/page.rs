//! A page load on a multipath client in virtual time, one stream-to-path decision at a
//! time: the learning environment of SAILfish (SAILfish §4.2.1 and §5.1.4: an epoch is
//! one page load; each stream the browser-like order releases is assigned a path; the
//! reward comes from the paths' statistics and the streams' completion times).
//!
//! In gearbox the client, not the server, decides: it sends each request on the QUIC
//! connection of the chosen path and the response returns on it (one connection per
//! path, docs/architecture.md "Choices made"), so what a decision sees is what the
//! client's quinn knows about each path ([`PathObservation`]).

use std::collections::VecDeque;
use std::time::Duration;

use gearbox_workload::{request_bytes_for_get, ObjectKind, Page, Request};

use crate::engine::{Pending, Sim};
use crate::{SimConfig, SimError};

/// How many of a path's recent sRTT samples a decision sees (SAILfish §5.1.2 feeds
/// each path's recent latencies to a 1-D convolution).
pub const RTT_HISTORY: usize = 8;

/// The dependency graph of the page being loaded, inside the simulator.
pub(crate) struct Graph {
    /// Objects discovered and waiting for a path.
    pub(crate) ready: VecDeque<usize>,
    /// Dependencies not yet complete, per object.
    deps_left: Vec<usize>,
    /// Objects that depend on each object.
    children: Vec<Vec<usize>>,
    discovered_at: Vec<Option<Duration>>,
    done_at: Vec<Option<Duration>>,
    path: Vec<Option<usize>>,
    reason: Vec<String>,
    priority: Vec<u8>,
}

impl Graph {
    fn new(page: &Page) -> Graph {
        let n = page.objects.len();
        let mut children = vec![Vec::new(); n];
        for o in &page.objects {
            for &d in &o.depends_on {
                children[d].push(o.id);
            }
        }
        Graph {
            ready: VecDeque::new(),
            deps_left: page.objects.iter().map(|o| o.depends_on.len()).collect(),
            children,
            discovered_at: vec![None; n],
            done_at: vec![None; n],
            path: vec![None; n],
            reason: vec![String::new(); n],
            priority: page.objects.iter().map(|o| o.priority).collect(),
        }
    }

    /// Object `i` is known to the browser at `now`: it is requested from then on.
    fn discover(&mut self, i: usize, now: Duration, pending: &mut [Pending]) {
        self.discovered_at[i] = Some(now);
        pending[i].req.send_at_ms = now.as_secs_f64() * 1e3;
        // The browser-like order (SAILfish §5.1.4): most urgent first (RFC 9218
        // urgency: HTML, CSS and JS before images), then discovery order.
        let key = |j: usize| (self.priority[j], j);
        let at = self
            .ready
            .iter()
            .position(|&j| key(j) > key(i))
            .unwrap_or(self.ready.len());
        self.ready.insert(at, i);
    }

    /// Object `i` arrived whole: its dependants whose every dependency is in are
    /// discovered.
    pub(crate) fn completed(&mut self, i: usize, now: Duration, pending: &mut [Pending]) {
        self.done_at[i] = Some(now);
        for c in std::mem::take(&mut self.children[i]) {
            self.deps_left[c] -= 1;
            if self.deps_left[c] == 0 {
                self.discover(c, now, pending);
            }
        }
    }

    /// The decision reason recorded for object `i`, if it was assigned.
    pub(crate) fn reason(&self, i: usize) -> Option<String> {
        self.path[i].map(|p| format!("path={p};{}", self.reason[i]))
    }
}

/// What the client knows about one path when it decides (SAILfish §4.2.1.1: bandwidth
/// estimate, smoothed RTT, lost, retransmitted and total packets in the epoch; plus the
/// work already queued on the path, which MinRTT-style schedulers do not see and ECF
/// and BLEST do).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PathObservation {
    /// Path index.
    pub path: usize,
    /// Whether the path's connection finished its handshake.
    pub connected: bool,
    /// quinn's smoothed RTT, ms (its initial 333 ms before a sample).
    pub srtt_ms: f64,
    /// Smallest sRTT seen at a decision, ms.
    pub min_rtt_ms: f64,
    /// sRTT at the latest decisions, oldest first, [`RTT_HISTORY`] long (padded with the
    /// first value).
    pub rtt_history_ms: Vec<f64>,
    /// Delivery-rate estimate, bit/s: the largest rate at which the path delivered
    /// response bytes over an interval between decisions in which it had bytes
    /// outstanding (a max filter over the last 10 such intervals, as BBR's BtlBw); 0
    /// before the first.
    pub delivery_rate_bps: f64,
    /// The client's congestion window on the path, bytes.
    pub cwnd_bytes: u64,
    /// Packets the client's connection declared lost since the previous decision.
    pub lost_packets: u64,
    /// Packets it sent since the previous decision.
    pub sent_packets: u64,
    /// Congestion events since the previous decision.
    pub congestion_events: u64,
    /// Response bytes assigned to the path and not yet received.
    pub outstanding_bytes: u64,
    /// Streams assigned to the path and not yet complete.
    pub streams_in_flight: usize,
}

/// One stream waiting for a path.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StreamRequest {
    /// The page object (0 is the HTML root).
    pub object: usize,
    /// Its kind.
    pub kind: ObjectKind,
    /// Response size, bytes.
    pub size_bytes: u64,
    /// RFC 9218 urgency (0 most urgent).
    pub priority: u8,
    /// Simulated time, ms since the load started.
    pub now_ms: f64,
    /// Every path, in path order.
    pub paths: Vec<PathObservation>,
}

/// One stream of a finished (or timed-out) load.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StreamOutcome {
    /// The page object.
    pub object: usize,
    /// The path it was assigned (None: never discovered or never assigned).
    pub path: Option<usize>,
    /// Response size, bytes.
    pub size_bytes: u64,
    /// When it was discovered, ms.
    pub discovered_ms: Option<f64>,
    /// When its last byte arrived, ms.
    pub done_ms: Option<f64>,
    /// Stream completion time (SAILfish's ctime: from the request to the last byte), ms.
    pub completion_ms: Option<f64>,
}

/// What a page load produced.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PageOutcome {
    /// Page load time: the last object's arrival, ms (None when it timed out).
    pub page_load_ms: Option<f64>,
    /// Every object.
    pub streams: Vec<StreamOutcome>,
    /// Set when the virtual-time limit came first.
    pub timed_out: bool,
}

/// Per-path memory between decisions.
#[derive(Default, Clone)]
struct PathMemory {
    rtts: VecDeque<f64>,
    min_rtt_ms: Option<f64>,
    /// (time, received response bytes on the path, outstanding at that time).
    last: Option<(Duration, u64, u64)>,
    rates: VecDeque<f64>,
    /// quinn's counters at the previous decision: lost, sent, congestion events.
    counters: (u64, u64, u64),
}

/// A page load on a (multipath) client that a scheduler steps through.
pub struct PageLoad {
    sim: Sim,
    limit: Duration,
    memory: Vec<PathMemory>,
    sizes: Vec<u64>,
    kinds: Vec<ObjectKind>,
}

impl PageLoad {
    /// Sets a load of `page` up at time zero over `config`'s paths (its `workload` and
    /// `duration_s` are not used; `time_limit_s` bounds the load). Every path's
    /// connection starts its handshake at once, as a multipath client opens its paths.
    pub fn new(config: &SimConfig, page: &Page) -> Result<PageLoad, SimError> {
        page.validate().map_err(|e| SimError::Setup(format!("page: {e}")))?;
        let pending = page
            .objects
            .iter()
            .map(|o| {
                Pending::new(Request {
                    send_at_ms: 0.0,
                    click: 0,
                    request_bytes: request_bytes_for_get(&o.path),
                    response_bytes: o.size_bytes,
                    new_connection: false,
                    client_index: 0,
                    path: o.path.clone(),
                })
            })
            .collect();
        let mut sim = Sim::new(config, pending)?;
        for p in 0..sim.paths.len() {
            sim.connect(p)?;
        }
        let mut graph = Graph::new(page);
        graph.discover(0, Duration::ZERO, &mut sim.pending);
        sim.graph = Some(graph);
        Ok(PageLoad {
            memory: vec![PathMemory::default(); sim.paths.len()],
            limit: Duration::from_secs_f64(config.time_limit_s()),
            sizes: page.objects.iter().map(|o| o.size_bytes).collect(),
            kinds: page.objects.iter().map(|o| o.kind).collect(),
            sim,
        })
    }

    /// Number of paths.
    pub fn paths(&self) -> usize {
        self.sim.paths.len()
    }

    fn graph(&self) -> &Graph {
        self.sim.graph.as_ref().expect("a page load has a graph")
    }

    /// Runs to the next stream that needs a path and describes it; None when the page
    /// is loaded or the time limit is reached.
    pub fn next_stream(&mut self) -> Result<Option<StreamRequest>, SimError> {
        if self.graph().ready.is_empty() {
            let done = self.sim.run_until(self.limit)?;
            if done || self.graph().ready.is_empty() {
                return Ok(None);
            }
        }
        let object = self.graph().ready[0];
        Ok(Some(StreamRequest {
            object,
            kind: self.kinds[object],
            size_bytes: self.sizes[object],
            priority: self.graph().priority[object],
            now_ms: self.sim.now.as_secs_f64() * 1e3,
            paths: self.observe(),
        }))
    }

    /// Sends the waiting stream `object` (the one [`PageLoad::next_stream`] described) on
    /// `path`; `reason` goes to its record. An error names a path that does not exist
    /// or an object that is not waiting.
    pub fn assign(&mut self, object: usize, path: usize, reason: &str) -> Result<(), SimError> {
        if path >= self.sim.paths.len() {
            return Err(SimError::Setup(format!(
                "path {path} does not exist: the client has {} (0..={})",
                self.sim.paths.len(),
                self.sim.paths.len() - 1
            )));
        }
        let g = self.sim.graph.as_mut().expect("a page load has a graph");
        let Some(at) = g.ready.iter().position(|&o| o == object) else {
            return Err(SimError::Setup(format!("object {object} is not waiting for a path")));
        };
        g.ready.remove(at);
        g.path[object] = Some(path);
        g.reason[object] = reason.to_string();
        self.sim.start_on_path(object, path)
    }

    /// Loads the page with `choose` deciding every stream: (path, reason).
    pub fn run(&mut self, mut choose: impl FnMut(&StreamRequest) -> (usize, String)) -> Result<PageOutcome, SimError> {
        while let Some(request) = self.next_stream()? {
            let (path, reason) = choose(&request);
            self.assign(request.object, path, &reason)?;
        }
        Ok(self.outcome())
    }

    /// Every object's path and times so far.
    pub fn outcome(&self) -> PageOutcome {
        let g = self.graph();
        let ms = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1e3);
        let streams: Vec<StreamOutcome> = (0..self.sizes.len())
            .map(|i| StreamOutcome {
                object: i,
                path: g.path[i],
                size_bytes: self.sizes[i],
                discovered_ms: ms(g.discovered_at[i]),
                done_ms: ms(g.done_at[i]),
                completion_ms: match (g.discovered_at[i], g.done_at[i]) {
                    (Some(a), Some(b)) => ms(Some(b.saturating_sub(a))),
                    _ => None,
                },
            })
            .collect();
        let all = streams.iter().all(|s| s.done_ms.is_some());
        PageOutcome {
            page_load_ms: all.then(|| streams.iter().filter_map(|s| s.done_ms).fold(0.0, f64::max)),
            timed_out: !all,
            streams,
        }
    }

    /// Client records (JSON lines, docs/telemetry.md) of the streams completed so far;
    /// `decision` carries the path and the scheduler's reason.
    pub fn records(&self) -> Vec<String> {
        self.sim.records().to_vec()
    }

    /// Every path's observation now, updating the per-decision memory.
    fn observe(&mut self) -> Vec<PathObservation> {
        let now = self.sim.now;
        let mut out = Vec::with_capacity(self.memory.len());
        for p in 0..self.memory.len() {
            let conn = self.sim.path_conn[p].map(|c| &self.sim.clients[c]);
            let (srtt_ms, cwnd, counters, connected) = match conn {
                Some(c) => {
                    let s = c.stats();
                    (
                        s.path.rtt.as_secs_f64() * 1e3,
                        s.path.cwnd,
                        (s.path.lost_packets, s.path.sent_packets, s.path.congestion_events),
                        c.is_connected(),
                    )
                }
                None => (f64::NAN, 0, (0, 0, 0), false),
            };
            let (mut outstanding, mut in_flight, mut received) = (0u64, 0usize, 0u64);
            for (i, pending) in self.sim.pending.iter().enumerate() {
                if self.graph().path[i] == Some(p) {
                    received += pending.received;
                    if self.graph().done_at[i].is_none() {
                        outstanding += pending.req.response_bytes.saturating_sub(pending.received);
                        in_flight += 1;
                    }
                }
            }
            let m = &mut self.memory[p];
            if srtt_ms.is_finite() {
                m.rtts.push_back(srtt_ms);
                if m.rtts.len() > RTT_HISTORY {
                    m.rtts.pop_front();
                }
                m.min_rtt_ms = Some(m.min_rtt_ms.map_or(srtt_ms, |v| v.min(srtt_ms)));
            }
            if let Some((t0, r0, busy)) = m.last {
                let dt = now.saturating_sub(t0).as_secs_f64();
                if busy > 0 && dt > 0.0 && received > r0 {
                    m.rates.push_back((received - r0) as f64 * 8.0 / dt);
                    if m.rates.len() > 10 {
                        m.rates.pop_front();
                    }
                }
            }
            m.last = Some((now, received, outstanding));
            let (l0, s0, c0) = m.counters;
            m.counters = counters;
            let mut history: Vec<f64> = m.rtts.iter().copied().collect();
            let first = history.first().copied().unwrap_or(srtt_ms);
            while history.len() < RTT_HISTORY {
                history.insert(0, first);
            }
            out.push(PathObservation {
                path: p,
                connected,
                srtt_ms,
                min_rtt_ms: m.min_rtt_ms.unwrap_or(srtt_ms),
                rtt_history_ms: history,
                delivery_rate_bps: m.rates.iter().copied().fold(0.0, f64::max),
                cwnd_bytes: cwnd,
                lost_packets: counters.0.saturating_sub(l0),
                sent_packets: counters.1.saturating_sub(s0),
                congestion_events: counters.2.saturating_sub(c0),
                outstanding_bytes: outstanding,
                streams_in_flight: in_flight,
            });
        }
        out
    }
}
