//! The edge's hooks into the control plane (docs/control.md, "Native upload and
//! polling"); the machinery is the data plane's (`gearbox_dataplane::control`).
//!
//! - Records: the telemetry sink appends each to the upload spool (crate `Edge::bind`).
//! - Policies: with `[control].policies`, the edge runs TCP WISE's Cwnd Table from
//!   `POLICIES/tcpwise/current/cwnd.toml` (unless `--cwnd-table` names a file of its own):
//!   at start the last good copy on disk, or an empty table (every connection keeps the
//!   default window) until the registry has one. A polled version is parsed beside the
//!   running table and swapped into the gear's shared table (one pointer swap: a
//!   connection accepted meanwhile sees the old table or the new, never a mix); a table
//!   that does not parse is refused and the old one stays.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use gearbox_dataplane::control::{ControlClient, ControlError, PolicyPoller};
use gearbox_gears::tcpwise::CwndTable;

use crate::tcpwise::TcpWise;
use crate::{EdgeConfig, EdgeError};

/// The registry's name of TCP WISE's gear.
pub const TCPWISE_GEAR: &str = "tcpwise";
/// The Cwnd Table's file in a TCP WISE policy.
pub const CWND_FILE: &str = "cwnd.toml";

/// The policies folder, when the edge polls one.
fn policies(config: &EdgeConfig) -> Option<&Path> {
    config.control.as_ref()?.policies.as_deref()
}

/// The Cwnd Table file the edge runs: `--cwnd-table`, else the polled one.
pub(crate) fn cwnd_table(config: &EdgeConfig) -> Option<PathBuf> {
    config
        .cwnd_table
        .clone()
        .or_else(|| policies(config).map(|root| root.join(TCPWISE_GEAR).join("current").join(CWND_FILE)))
}

/// TCP WISE from `path`; a polled table not there yet starts empty.
pub(crate) fn start_tcpwise(
    config: &EdgeConfig,
    path: PathBuf,
    listener: &tokio::net::TcpListener,
) -> Result<Arc<TcpWise>, EdgeError> {
    if config.cwnd_table.is_some() || path.exists() {
        return Ok(TcpWise::start(path, listener)?);
    }
    let empty = CwndTable::parse("version = 0\ncap = 10\n").expect("the empty table is valid");
    tracing::info!(table = %path.display(), "TCP WISE: no Cwnd Table polled yet; every connection keeps the default window until one is");
    Ok(TcpWise::start_with(path, empty, listener))
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
