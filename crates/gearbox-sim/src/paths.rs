//! The path of each request on a multipath client (SAILfish §4.2.1: the action is the
//! path of each stream; its state, §4.2.1.1, is what the client knows about every path),
//! for page loads ([`crate::PageLoad`]) and workload runs alike.
//!
//! One QUIC connection per path, as gearbox's multipath client has
//! (docs/architecture.md): choosing a path is choosing the connection that carries the
//! request, and the response returns on it. What a choice sees is a [`PathState`] per
//! path, built by the client's own [`PathMonitor`] from readings of each connected path's
//! quinn-proto statistics and from the response bytes scheduled on it; a reading is also
//! taken as each response completes, as `gearbox-client`'s multipath load does, and
//! replayed into the monitors in order before the next choice.
//!
//! A workload run (`feed`, `app`, `search`, `bulk` over `[[path]]`) chooses by one of
//! [`WorkloadPaths`]: by default the rule `gearbox load` applies to a workload with one
//! `--local-addr` per path (request of workload client `c` on path `c mod paths`: what
//! the lab's multipath topology runs), or a path scheduler (`path_scheduler`: the stream
//! schedulers of `gearbox_gears::path`, or SAILfish's learned policy) for every request.
//! Rejected alternative: a second, workload-only monitor; the page load's is the client's.

use std::path::Path;
use std::time::Instant;

use gearbox_gear_api::{PathGear, PathMonitor, PathSample, PathState};
use gearbox_gears::path::{scheduler, SailfishGear, SCHEDULERS};

use crate::{SimConfig, SimError};

/// The name `path_scheduler` takes for SAILfish's learned policy (as `gearbox load
/// --scheduler` does).
pub const SAILFISH: &str = "sailfish";

/// The client's view of its paths: one monitor per path, and the readings taken as
/// responses completed that the monitors have not seen yet.
pub(crate) struct PathView {
    monitors: Vec<PathMonitor>,
    /// (when, path, response bytes, the path's statistics then) per completed response.
    completions: Vec<(Instant, usize, u64, PathSample)>,
}

impl PathView {
    /// Monitors of `paths` paths bound to `local(p)`, nothing read yet.
    pub(crate) fn new(paths: usize, local: impl Fn(usize) -> String) -> PathView {
        PathView {
            monitors: (0..paths).map(|p| PathMonitor::new(p, local(p))).collect(),
            completions: Vec::new(),
        }
    }

    /// A response of `bytes` was scheduled on `path`.
    pub(crate) fn started(&mut self, path: usize, bytes: u64) {
        self.monitors[path].stream_started(bytes);
    }

    /// A response of `bytes` on `path` completed at `at`, when its statistics read `sample`.
    pub(crate) fn completed(&mut self, at: Instant, path: usize, bytes: u64, sample: PathSample) {
        self.completions.push((at, path, bytes, sample));
    }

    /// Every path's state at `now`: the completions since the previous call are replayed
    /// (each stream taken off its path, then the reading), then `current(p)` (a connected
    /// path's statistics now; `None` before its handshake) is read, as the client does
    /// before a request.
    pub(crate) fn states(&mut self, now: Instant, current: impl Fn(usize) -> Option<PathSample>) -> Vec<PathState> {
        for (at, p, bytes, sample) in std::mem::take(&mut self.completions) {
            self.monitors[p].stream_ended(bytes);
            self.monitors[p].observe(at, sample);
        }
        for m in &mut self.monitors {
            if let Some(sample) = current(m.index) {
                m.observe(now, sample);
            }
        }
        self.monitors.iter().map(PathMonitor::state).collect()
    }
}

/// How a workload run on several paths chooses each request's path.
pub(crate) enum WorkloadPaths {
    /// `gearbox load`'s rule with one local address per path: the request of workload
    /// client `c` goes on path `c mod paths` (`gearbox_client::ReplayOptions::paths`).
    /// Connections open on a path's first request, as the client's pools open them.
    ClientIndex,
    /// A path scheduler chooses every request from the paths' states; every path's
    /// connection opens at time zero, as the multipath client opens its paths.
    Gear(Box<dyn PathGear>),
}

impl WorkloadPaths {
    /// The rule `config` names (`path_scheduler`, `sailfish_model`); an error names the
    /// field.
    pub(crate) fn from_config(config: &SimConfig, file: &Path) -> Result<WorkloadPaths, SimError> {
        let bad = |field: &str, message: String| SimError::Config {
            file: file.to_path_buf(),
            message: format!("{field}: {message}"),
        };
        let Some(name) = config.path_scheduler.as_deref() else {
            if config.sailfish_model.is_some() {
                return Err(bad("sailfish_model", "needs path_scheduler = \"sailfish\"".into()));
            }
            return Ok(WorkloadPaths::ClientIndex);
        };
        if config.path.is_empty() {
            return Err(bad(
                "path_scheduler",
                "chooses among the paths of a multipath client: give [[path]] entries".into(),
            ));
        }
        if name != SAILFISH {
            if config.sailfish_model.is_some() {
                return Err(bad("sailfish_model", "needs path_scheduler = \"sailfish\"".into()));
            }
            return scheduler(name)
                .map(WorkloadPaths::Gear)
                .map_err(|_| bad("path_scheduler", unknown(name)));
        }
        let Some(dir) = &config.sailfish_model else {
            return Err(bad(
                "sailfish_model",
                "missing: path_scheduler = \"sailfish\" needs the policy's folder (`gearbox learn sailfish`)".into(),
            ));
        };
        // Refused rather than replaced by MinRTT (as `gearbox load` does with a warning):
        // a run's records must never name a policy that did not run.
        SailfishGear::load(dir, config.path.len())
            .map(|g| WorkloadPaths::Gear(Box::new(g)))
            .map_err(|e| bad("sailfish_model", format!("{}: {e}", dir.display())))
    }
}

fn unknown(name: &str) -> String {
    format!(
        "unknown path scheduler {name:?}; the schedulers are: {}, {SAILFISH}",
        SCHEDULERS.join(", ")
    )
}
