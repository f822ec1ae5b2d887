//! The edge's hooks into the control plane (docs/control.md, "Native upload and
//! polling"); the machinery is the data plane's (`gearbox_dataplane::control`).
//!
//! - Records: the telemetry sink appends each to the upload spool (crate `Edge::bind`).
//! - Policies: with `[control].policies`, the edge runs TCP WISE's Cwnd Table from
//!   `POLICIES/tcpwise/current/cwnd.toml` (unless `--cwnd-table` names a file of its own
//!   or `--initial-window` a fixed window):
//!   at start the last good copy on disk, or an empty table (every connection keeps the
//!   default window) until the registry has one. A polled version is parsed beside the
//!   running table and swapped into the gear's shared table (one pointer swap: a
//!   connection accepted meanwhile sees the old table or the new, never a mix); a table
//!   that does not parse is refused and the old one stays.
//! - Floo (`--gear floo`): the period gear is a [`SwappablePeriodGear`]; a polled model is
//!   loaded beside the running one and put in its [`PeriodGearSlot`], and the next
//!   selection period (Floo §3.3) asks the new model. The swap happens between two
//!   decisions, never inside one. `gearbox edge` registers the loader
//!   ([`Edge::policies`](crate::Edge::policies)).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gearbox_dataplane::control::{ControlClient, ControlError, PolicyPoller};
use gearbox_gear_api::{Cca, CcaPeriodGear, ConnectionStats, Decision};
use gearbox_gears::tcpwise::CwndTable;

use crate::tcpwise::TcpWise;
use crate::{EdgeConfig, EdgeError};

/// The registry's name of TCP WISE's gear.
pub const TCPWISE_GEAR: &str = "tcpwise";
/// The Cwnd Table's file in a TCP WISE policy.
pub const CWND_FILE: &str = "cwnd.toml";
/// The registry's name of Floo's gear (its folder: `policy.json` and its sidecar).
pub const FLOO_GEAR: &str = "floo";

/// The folder of a gear's last good copy in the polled policies, if there is one.
pub fn polled_copy(config: &EdgeConfig, gear: &str) -> Option<PathBuf> {
    gearbox_dataplane::control::current_version(policies(config)?, gear).map(|(_, p)| p)
}

type Pending = Arc<Mutex<Option<Box<dyn CcaPeriodGear>>>>;

/// Where a new period gear waits until the next decision takes it.
#[derive(Clone, Default)]
pub struct PeriodGearSlot(Pending);

impl PeriodGearSlot {
    /// Puts `gear` in; the next decision of the [`SwappablePeriodGear`] runs it.
    pub fn put(&self, gear: Box<dyn CcaPeriodGear>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(gear);
    }
}

/// A period gear whose model is replaced while the edge runs (a policy polled from the
/// control plane).
pub struct SwappablePeriodGear {
    current: Box<dyn CcaPeriodGear>,
    next: Pending,
}

impl SwappablePeriodGear {
    /// Runs `gear` until a new one is put in the returned slot.
    pub fn new(gear: Box<dyn CcaPeriodGear>) -> (SwappablePeriodGear, PeriodGearSlot) {
        let slot = PeriodGearSlot::default();
        (
            SwappablePeriodGear {
                current: gear,
                next: slot.0.clone(),
            },
            slot,
        )
    }
}

impl CcaPeriodGear for SwappablePeriodGear {
    fn choose(&mut self, stats: &ConnectionStats, now: Instant) -> Decision<Cca> {
        if let Some(g) = self.next.lock().unwrap_or_else(|p| p.into_inner()).take() {
            self.current = g;
        }
        self.current.choose(stats, now)
    }
}

/// The loader of Floo's polled models: a model that does not load is refused (the
/// running one stays); one that does goes into `slot`.
pub fn floo_loader(slot: PeriodGearSlot) -> gearbox_dataplane::control::Loader {
    Box::new(move |dir: &Path| {
        let gear = gearbox_gears::floo::FlooGear::load(dir).map_err(|e| e.to_string())?;
        slot.put(Box::new(gear));
        Ok(())
    })
}

/// The policies folder, when the edge polls one.
fn policies(config: &EdgeConfig) -> Option<&Path> {
    config.control.as_ref()?.policies.as_deref()
}

/// The Cwnd Table file the edge runs: `--cwnd-table`, else the polled one (unless a
/// fixed `--initial-window` asks for no table).
pub(crate) fn cwnd_table(config: &EdgeConfig) -> Option<PathBuf> {
    config.cwnd_table.clone().or_else(|| {
        let root = policies(config).filter(|_| config.initial_window.is_none())?;
        Some(root.join(TCPWISE_GEAR).join("current").join(CWND_FILE))
    })
}

/// TCP WISE from `path`; a polled table not there yet starts empty.
pub(crate) fn start_tcpwise(
    config: &EdgeConfig,
    path: PathBuf,
    listener: &tokio::net::TcpListener,
) -> Result<Arc<TcpWise>, EdgeError> {
    if config.cwnd_table.is_some() || path.exists() {
        return Ok(TcpWise::start(path, listener, config.cwnd_routes)?);
    }
    let empty = CwndTable::parse("version = 0\ncap = 10\n").expect("the empty table is valid");
    tracing::info!(table = %path.display(), "TCP WISE: no Cwnd Table polled yet; every connection keeps the default window until one is");
    Ok(TcpWise::start_with(path, empty, listener, config.cwnd_routes))
}

/// The poller of the edge's policies, with the last good copy on disk already loaded.
pub(crate) fn poller(config: &EdgeConfig, tcp_iw: Option<Arc<TcpWise>>) -> Result<Option<PolicyPoller>, ControlError> {
    let (Some(cfg), Some(root)) = (config.control.as_ref(), policies(config)) else {
        return Ok(None);
    };
    let mut poller = PolicyPoller::new(
        ControlClient::new(cfg)?,
        root,
        cfg.poll_interval_s.map(Duration::from_secs_f64),
    )?;
    // With its own --cwnd-table the edge does not take the registry's.
    if let (Some(t), None) = (tcp_iw, &config.cwnd_table) {
        poller.on(
            TCPWISE_GEAR,
            Box::new(move |dir: &Path| {
                let table = CwndTable::load(&dir.join(CWND_FILE)).map_err(|e| e.to_string())?;
                t.swap(table);
                Ok(())
            }),
        );
    }
    let (loaded, failed) = poller.load_from_disk();
    for (gear, version) in loaded {
        tracing::info!(gear, version, "policy: the last good copy on disk loaded");
    }
    for f in failed {
        tracing::error!(policy = f, "policy: the copy on disk cannot be loaded");
    }
    Ok(Some(poller))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gearbox_gear_api::Transport;
    use gearbox_gears::floo::FixedCca;

    fn stats() -> ConnectionStats {
        ConnectionStats {
            conn_id: 1,
            transport: Transport::Quic,
            cca: Cca::Cubic,
            period_ms: 12_000.0,
            max_delivery_rate_bps: Some(9_000_000),
            min_rtt_ms: Some(40.0),
            srtt_ms: Some(60.0),
            rtt_var_ms2: Some(25.0),
            loss_rate: Some(0.01),
            cwnd_bytes: 90_000,
            pacing_rate_bps: Some(9_000_000),
            goodput_bps: Some(4_500_000.0),
            unsent_bytes: 1_125_000,
            response_wait_ms: Some(250.0),
            response_wait_gradient_ms_per_s: Some(-20.0),
            bytes_sent: 6_750_000,
        }
    }

    #[test]
    fn the_config_files_control_table_sets_the_control_plane_and_refuses_unknown_keys() {
        let text = "[control]\nurl = \"https://127.0.0.1:8443\"\ntoken = \"gbx_t\"\nca = \"cert.pem\"\npolicies = \"pol\"\nbatch_records = 50\n";
        let c = EdgeConfig::from_toml(text, Path::new("edge.toml")).unwrap();
        let control = c.control.as_ref().unwrap();
        assert_eq!(
            (control.url.as_str(), control.batch_records),
            ("https://127.0.0.1:8443", 50)
        );
        assert!(control.validate().is_ok());
        assert_eq!(
            cwnd_table(&c).unwrap(),
            Path::new("pol").join(TCPWISE_GEAR).join("current").join(CWND_FILE)
        );
        // A fixed --initial-window keeps its window: no polled table.
        let fixed = EdgeConfig {
            initial_window: Some(32),
            ..c.clone()
        };
        assert_eq!(cwnd_table(&fixed), None);
        let err = EdgeConfig::from_toml("[control]\nurll = \"x\"\n", Path::new("edge.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("edge.toml") && err.contains("urll"), "{err}");
    }

    #[test]
    fn a_swapped_period_gear_decides_from_the_next_period_on() {
        let (mut gear, slot) = SwappablePeriodGear::new(Box::new(FixedCca(Cca::Cubic)));
        assert_eq!(gear.choose(&stats(), Instant::now()).choice, Cca::Cubic);
        slot.put(Box::new(FixedCca(Cca::Bbr)));
        assert_eq!(gear.choose(&stats(), Instant::now()).choice, Cca::Bbr);
        assert_eq!(gear.choose(&stats(), Instant::now()).choice, Cca::Bbr);
    }

    #[test]
    fn a_floo_model_that_does_not_load_is_refused_and_the_running_one_stays() {
        let (mut gear, slot) = SwappablePeriodGear::new(Box::new(FixedCca(Cca::Cubic)));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("policy.json"), "{ not a model").unwrap();
        let mut load = floo_loader(slot);
        assert!(load(dir.path()).is_err());
        assert_eq!(gear.choose(&stats(), Instant::now()).choice, Cca::Cubic);
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/floo");
        assert!(load(&shipped).is_ok(), "the shipped model loads");
    }
}
