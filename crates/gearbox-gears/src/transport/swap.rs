//! WiseTrans with models replaced while the client runs: the client's side of the policy
//! registry (docs/control.md, "The client's policies").
//!
//! WiseTrans' models are trained offline and deployed to clients (WiseTrans §III-A, "offline
//! training, online inference"); with the control plane they arrive as versions of the
//! registry's `wisetrans` gear, a folder with `tcp.json`, `quic.json` (and the `mlp` mode's
//! `mlp-tcp.json`, `mlp-quic.json`), each with its sidecar. The poller
//! (`gearbox_dataplane::control::PolicyPoller`) hands each new folder to the loader
//! [`MonitorSlot::load`]: it loads the models the gear's mode runs beside the running ones
//! and refuses a folder whose models do not load (the running models stay, and so does the
//! registry's `current` copy on disk). A loaded monitor waits in the slot until the gear's
//! next call (`choose` or `observe`) takes it, so a decision never mixes two models; what
//! the gear has learned of each origin stays ([`WiseTrans::set_monitor`]).
//!
//! Every decision of a gear that runs a registry version says so: `;policy=N` is appended
//! to its reason (the record's `decision`, [`super::decision_field`] reads it back), so
//! each request's record names the policy version that chose its transport. Rejected
//! alternative: rebuilding the whole gear on a new version, which would forget every
//! origin's window and exploration and lose the decisions awaiting their records.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use gearbox_gear_api::{ClientRecord, Decision, TransportChoice, TransportGear};

use super::monitor::{NetworkMonitor, MLP_PREFIX};
use super::wisetrans::{Version, WiseTrans};
use super::{Mode, TransportConfig};

/// The registry's name of the client's transport gear (its folder: the models of
/// `models/wisetrans`).
pub const WISETRANS_GEAR: &str = "wisetrans";

type Pending = Arc<Mutex<Option<(NetworkMonitor, Option<u64>)>>>;

/// Where a newly loaded monitor waits for the gear's next call.
#[derive(Clone)]
pub struct MonitorSlot {
    next: Pending,
    /// File-name prefix of the mode's models ("" or [`MLP_PREFIX`]).
    prefix: &'static str,
}

impl std::fmt::Debug for MonitorSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MonitorSlot")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl MonitorSlot {
    /// Loads the models in `dir` beside the running ones and hands them to the gear,
    /// which runs them from its next call on; `version` is the registry's (none: a folder
    /// from elsewhere). A model that does not load, or is not one the monitor can use,
    /// is refused with why, and the gear keeps what it runs.
    pub fn load(&self, dir: &Path, version: Option<u64>) -> Result<(), String> {
        let monitor = NetworkMonitor::load_prefixed(Some(dir), self.prefix);
        if let Some(why) = monitor.unavailable() {
            return Err(why.to_string());
        }
        *self.next.lock().unwrap_or_else(|p| p.into_inner()) = Some((monitor, version));
        Ok(())
    }
}

/// The registry version in a polled folder's name (`vN`), if it has one.
pub fn version_of(dir: &Path) -> Option<u64> {
    dir.file_name()?.to_str()?.strip_prefix('v')?.parse().ok()
}

/// A WiseTrans gear (v1, v2 or `mlp`) whose models can be replaced while it runs.
#[derive(Debug)]
pub struct SwappableWiseTrans {
    gear: WiseTrans,
    /// The registry version of the models running (none: not from the registry).
    policy: Option<u64>,
    next: Pending,
}

impl SwappableWiseTrans {
    /// The gear of `mode` (wisetrans-v1, wisetrans-v2 or mlp; none for the other modes,
    /// which run no models to poll) with the models of `model_dir`, and the slot its new
    /// models go in. `policy` is the registry version of `model_dir`, if it is one.
    pub fn new(
        mode: Mode,
        model_dir: Option<&Path>,
        policy: Option<u64>,
        cfg: TransportConfig,
    ) -> Option<(SwappableWiseTrans, MonitorSlot)> {
        let (gear, prefix) = match mode {
            Mode::WiseTransV1 => (WiseTrans::load(Version::V1, model_dir, cfg), ""),
            Mode::WiseTransV2 => (WiseTrans::load(Version::V2, model_dir, cfg), ""),
            Mode::Mlp => (WiseTrans::mlp(model_dir, cfg), MLP_PREFIX),
            _ => return None,
        };
        let next: Pending = Arc::default();
        let slot = MonitorSlot {
            next: next.clone(),
            prefix,
        };
        Some((SwappableWiseTrans { gear, policy, next }, slot))
    }

    /// The registry version the gear runs now (after taking a waiting one).
    pub fn policy(&mut self) -> Option<u64> {
        self.take();
        self.policy
    }

    fn take(&mut self) {
        let next = self.next.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some((monitor, version)) = next {
            tracing::info!(gear = WISETRANS_GEAR, version, "transport gear: new models in use");
            self.gear.set_monitor(monitor);
            self.policy = version;
        }
    }
}

impl TransportGear for SwappableWiseTrans {
    fn choose(&mut self, origin: &str, now: Instant) -> Decision<TransportChoice> {
        self.take();
        let mut d = self.gear.choose(origin, now);
        if let Some(v) = self.policy {
            d.reason.push_str(&format!(";policy={v}"));
        }
        d
    }

    fn observe(&mut self, record: &ClientRecord, now: Instant) {
        self.take();
        self.gear.observe(record, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::decision_field;
    use std::path::PathBuf;

    fn shipped() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/wisetrans")
    }

    #[test]
    fn a_gear_without_models_takes_polled_ones_at_its_next_decision_and_names_their_version() {
        let (mut gear, slot) =
            SwappableWiseTrans::new(Mode::WiseTransV2, None, None, TransportConfig::default()).unwrap();
        let now = Instant::now();
        let before = gear.choose("a:443", now).reason;
        assert!(before.contains("why=no-model"), "{before}");
        assert_eq!(decision_field(&before, "policy"), None);
        slot.load(&shipped(), Some(3)).unwrap();
        let after = gear.choose("a:443", now).reason;
        assert!(!after.contains("no-model"), "{after}");
        assert_eq!(decision_field(&after, "policy"), Some("3"));
        assert_eq!(gear.policy(), Some(3));
    }

    #[test]
    fn models_that_do_not_load_are_refused_and_the_running_ones_stay() {
        let (mut gear, slot) =
            SwappableWiseTrans::new(Mode::WiseTransV1, Some(&shipped()), Some(1), TransportConfig::default()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        for f in ["tcp.json", "tcp.meta.json", "quic.meta.json"] {
            std::fs::copy(shipped().join(f), dir.path().join(f)).unwrap();
        }
        std::fs::write(dir.path().join("quic.json"), "{ damaged").unwrap();
        let err = slot.load(dir.path(), Some(2)).unwrap_err();
        assert!(err.contains("quic.json"), "{err}");
        let d = gear.choose("a:443", Instant::now()).reason;
        assert_eq!(decision_field(&d, "policy"), Some("1"));
        assert!(!d.contains("no-model"), "{d}");
        // The mlp mode loads its own files from the same folder.
        let (_, mlp) = SwappableWiseTrans::new(Mode::Mlp, None, None, TransportConfig::default()).unwrap();
        assert!(mlp.load(&shipped(), Some(4)).is_ok());
        assert!(mlp.load(dir.path(), Some(5)).unwrap_err().contains("mlp-tcp.json"));
    }

    #[test]
    fn only_modes_with_models_are_swappable_and_versions_come_from_folder_names() {
        for m in [Mode::Tcp, Mode::Quic, Mode::Race, Mode::Strawman, Mode::Oracle] {
            assert!(
                SwappableWiseTrans::new(m, None, None, TransportConfig::default()).is_none(),
                "{m}"
            );
        }
        assert_eq!(version_of(Path::new("/p/wisetrans/v12")), Some(12));
        assert_eq!(version_of(Path::new("/p/models/wisetrans")), None);
    }
}
