//! A page load on a multipath client in virtual time, one stream-to-path decision at a
//! time: the learning environment of SAILfish (SAILfish §4.2.1 and §5.1.4: an epoch is
//! one page load; each stream the browser-like order releases is assigned a path; the
//! reward comes from the paths' statistics and the streams' completion times).
//!
//! In gearbox the client, not the server, decides: it sends each request on the QUIC
//! connection of the chosen path and the response returns on it (one connection per
//! path, docs/architecture.md "Choices made"), so what a decision sees is what the
//! client knows about each path: the [`PathState`] that `gearbox-client`'s multipath
//! page load hands its scheduler, built by the same `PathMonitor` from readings of the
//! client connection's quinn-proto statistics ([`crate::paths`], shared with workload
//! runs on several paths).

use std::collections::VecDeque;
use std::time::Duration;

use gearbox_gear_api::{PathGear, PathRequest, PathState};
use gearbox_workload::{request_bytes_for_get, ObjectKind, Page, Request};

use crate::engine::{Pending, Sim};
use crate::{SimConfig, SimError};

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
    /// Each object's place among objects ready together ([`PageObject::browser_order`]).
    ///
    /// [`PageObject::browser_order`]: gearbox_workload::PageObject::browser_order
    order: Vec<(u8, u8, usize)>,
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
            order: page.objects.iter().map(|o| o.browser_order()).collect(),
        }
    }

    /// Object `i` is known to the browser at `now`: it is requested from then on.
    fn discover(&mut self, i: usize, now: Duration, pending: &mut [Pending]) {
        self.discovered_at[i] = Some(now);
        pending[i].req.send_at_ms = now.as_secs_f64() * 1e3;
        // The browser's order (SAILfish §5.1.4), the same rule as the client's page load.
        let at = self
            .ready
            .iter()
            .position(|&j| self.order[j] > self.order[i])
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
    /// The request as a path scheduler sees it.
    pub request: PathRequest,
    /// Every path, in path order, as the scheduler sees it.
    pub paths: Vec<PathState>,
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

/// A page load on a (multipath) client that a scheduler steps through.
pub struct PageLoad {
    sim: Sim,
    limit: Duration,
    sizes: Vec<u64>,
    kinds: Vec<ObjectKind>,
    urls: Vec<String>,
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
        if config.population.is_some() {
            return Err(SimError::Config {
                file: "<config>".into(),
                message: "population: a page load runs on one client's paths ([down] or [[path]])".into(),
            });
        }
        let mut sim = Sim::new(config, pending)?;
        for p in 0..sim.paths.len() {
            sim.connect(p)?;
        }
        let mut graph = Graph::new(page);
        graph.discover(0, Duration::ZERO, &mut sim.pending);
        sim.graph = Some(graph);
        Ok(PageLoad {
            limit: Duration::from_secs_f64(config.time_limit_s()),
            sizes: page.objects.iter().map(|o| o.size_bytes).collect(),
            kinds: page.objects.iter().map(|o| o.kind).collect(),
            urls: page.objects.iter().map(|o| o.path.clone()).collect(),
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
        let priority = self.graph().order[object].0;
        Ok(Some(StreamRequest {
            object,
            kind: self.kinds[object],
            size_bytes: self.sizes[object],
            priority,
            now_ms: self.sim.now.as_secs_f64() * 1e3,
            request: PathRequest {
                url: self.urls[object].clone(),
                urgency: priority,
                expected_bytes: Some(self.sizes[object]),
                workload_client: None,
            },
            paths: self.sim.path_states(),
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
        self.sim.assign(object, path, reason.to_string(), false)
    }

    /// Loads the page with a path gear deciding every stream (the gear sees every path:
    /// none fails in the simulator).
    pub fn run_gear(&mut self, gear: &mut dyn PathGear) -> Result<PageOutcome, SimError> {
        while let Some(r) = self.next_stream()? {
            let d = gear.choose(&r.request, &r.paths, self.sim.instant());
            self.assign(r.object, d.choice, &d.reason)?;
        }
        Ok(self.outcome())
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
                path: self.sim.pending[i].path_choice.as_ref().map(|(p, _)| *p),
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
}
