//! The data plane's side of the control plane (docs/control.md, "Native upload and
//! polling"): the edge and the client upload their telemetry records themselves and keep
//! their policies current, with no sidecar.
//!
//! - [`Spool`]: every record is appended to an on-disk batch file before anything is sent;
//!   a full batch (or one older than the batch interval) is sealed under a fresh
//!   idempotency key. A sealed batch leaves the spool only when the control plane has
//!   answered for it, so a batch whose answer was lost (the service killed mid-request) is
//!   sent again with the same key and stored once. The spool is bounded: past
//!   `max_spool_bytes` the oldest sealed batches are dropped and counted.
//! - [`Uploader`]: sends the sealed batches in order, retrying with exponential backoff.
//! - [`PolicyPoller`]: polls the registry with `If-None-Match`, checks each artifact's
//!   sha256, unpacks it beside the running version, lets the gear's loader parse it (a
//!   refusal keeps the old one), then swaps `GEAR/current` atomically; the last good copy
//!   on disk is where a restarted process starts when the control plane is down.
//! - [`ControlClient`]: HTTP/1.1 over the workspace's rustls (TLS 1.3, the control plane's
//!   certificate as the trust root), a bearer token. One connection per exchange: a batch
//!   or a poll every second or more is far from needing a pool, and a fresh connection
//!   never sends into a socket the killed service left half-open. Rejected alternative: a
//!   general HTTP client crate (reqwest), a second HTTP and TLS stack beside hyper and
//!   rustls for two request kinds.
//!
//! The spool and the poller's folder layout are the same as the Python side's
//! (`gearbox.control.client`), so `gearbox control agent --policies DIR` and a native edge
//! can share a policies folder.

mod http;
mod poll;
mod spool;
mod tar;
mod upload;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use self::http::{ControlClient, Reply};
pub use self::poll::{current_version, Loader, PolicyPoller, PollOutcome};
pub use self::spool::{Batch, Spool};
pub use self::tar::unpack as unpack_tar;
pub use self::upload::{UploadStats, Uploader};

/// How the data plane reaches the control plane (the edge's `[control]` table, the
/// `--control`, `--token`, `--control-ca`, `--spool`, `--policies` flags).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ControlConfig {
    /// The service, `https://HOST:PORT` (a path prefix is kept).
    pub url: String,
    /// The bearer token (`gearbox control token create --role edge|client`).
    pub token: String,
    /// The PEM file the service's certificate is checked against (its self-signed
    /// certificate, or the CA that signed it). Required: the token never goes to an
    /// unverified peer.
    pub ca: PathBuf,
    /// The spool folder (created if missing). One process per folder.
    pub spool: PathBuf,
    /// Where polled policies are kept (`GEAR/vN`, `GEAR/current`); none: no polling.
    pub policies: Option<PathBuf>,
    /// Records per batch (1,000 by default: about 1 s of a busy edge).
    pub batch_records: usize,
    /// A batch with any record in it is sealed and sent at least this often, ms.
    pub batch_interval_ms: u64,
    /// Bound on the spool's size, bytes (256 MiB by default); past it the oldest sealed
    /// batches are dropped and counted.
    pub max_spool_bytes: u64,
    /// Poll interval, seconds; none: the one the service states in each answer (30 s by
    /// default on its side).
    pub poll_interval_s: Option<f64>,
    /// At shutdown, how long the process keeps trying to send what is spooled, ms (what
    /// is left stays in the spool for the next start).
    pub final_upload_ms: u64,
    /// Bound on one exchange with the service (connect, TLS, request, answer), ms.
    pub timeout_ms: u64,
}

impl Default for ControlConfig {
    fn default() -> Self {
        ControlConfig {
            url: String::new(),
            token: String::new(),
            ca: PathBuf::new(),
            spool: PathBuf::from("gearbox-spool"),
            policies: None,
            batch_records: 1000,
            batch_interval_ms: 1000,
            max_spool_bytes: 256 << 20,
            poll_interval_s: None,
            final_upload_ms: 5000,
            timeout_ms: 10_000,
        }
    }
}

impl ControlConfig {
    /// Checks every field; the error names it.
    pub fn validate(&self) -> Result<(), ControlError> {
        let bad = |field: &'static str, message: String| Err(ControlError::Config { field, message });
        if self.url.is_empty() {
            return bad("url", "the control plane's URL is required (https://HOST:PORT)".into());
        }
        http::Target::parse(&self.url)?;
        if self.token.is_empty() {
            return bad(
                "token",
                "a bearer token is required (gearbox control token create)".into(),
            );
        }
        if self.ca.as_os_str().is_empty() {
            return bad(
                "ca",
                "the PEM file the control plane's certificate is checked against is required".into(),
            );
        }
        if !(1..=100_000).contains(&self.batch_records) {
            return bad(
                "batch_records",
                format!(
                    "must be in 1..=100000 (the service's batch limit), got {}",
                    self.batch_records
                ),
            );
        }
        if self.batch_interval_ms == 0 {
            return bad("batch_interval_ms", "must be at least 1".into());
        }
        if self.max_spool_bytes < 1 << 20 {
            return bad(
                "max_spool_bytes",
                format!("must be at least 1048576 (1 MiB), got {}", self.max_spool_bytes),
            );
        }
        if let Some(s) = self.poll_interval_s {
            if !(s.is_finite() && s >= 0.05) {
                return bad(
                    "poll_interval_s",
                    format!("must be a number of seconds >= 0.05, got {s}"),
                );
            }
        }
        if self.timeout_ms == 0 {
            return bad("timeout_ms", "must be at least 1".into());
        }
        Ok(())
    }
}

/// What went wrong talking to the control plane or keeping the spool.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// A configuration field that cannot be used.
    #[error("control: {field}: {message}")]
    Config {
        /// The field (and flag).
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The CA file cannot be used.
    #[error("control: ca: {0}")]
    Tls(#[from] crate::tls::TlsError),
    /// A spool or policy file could not be read or written.
    #[error("control: {path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// No answer: connection refused or cut, TLS failure, timeout. Retried.
    #[error("control plane unreachable: {0}")]
    Unreachable(String),
    /// The token was refused (401, 403): resending will not help until it is fixed.
    #[error("control plane refused the token: {status} {body}")]
    Refused {
        /// 401 or 403.
        status: u16,
        /// The service's words.
        body: String,
    },
    /// An answer the protocol does not expect (5xx among them). Retried.
    #[error("control plane answered {status}: {body}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The service's words.
        body: String,
    },
    /// A policy artifact refused: sha256 mismatch, not a tar, or its gear's loader said no.
    #[error("policy refused: {0}")]
    Policy(String),
}

impl ControlError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        ControlError::Io {
            path: path.into(),
            source,
        }
    }
}

/// 128 random bits as 32 hex digits: a batch's idempotency key. The service keeps keys
/// per peer for good, so they must never repeat across restarts: they come from the
/// kernel's random source, not from a counter.
pub(crate) fn random_hex() -> String {
    use std::io::Read;
    let mut b = [0u8; 16];
    let filled = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    if filled.is_err() {
        // No /dev/urandom (a sandbox): time, pid and address still give a unique key per
        // process and batch.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let x = t ^ (u128::from(std::process::id()) << 64) ^ (&b as *const _ as u128);
        b = x.to_le_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> ControlConfig {
        ControlConfig {
            url: "https://127.0.0.1:8443".into(),
            token: "gbx_x".into(),
            ca: "cert.pem".into(),
            ..ControlConfig::default()
        }
    }

    #[test]
    fn a_config_without_url_token_or_ca_is_refused_naming_the_field() {
        assert!(good().validate().is_ok());
        for (cfg, field) in [
            (
                ControlConfig {
                    url: String::new(),
                    ..good()
                },
                "url",
            ),
            (
                ControlConfig {
                    url: "http://x:1".into(),
                    ..good()
                },
                "url",
            ),
            (
                ControlConfig {
                    token: String::new(),
                    ..good()
                },
                "token",
            ),
            (
                ControlConfig {
                    ca: PathBuf::new(),
                    ..good()
                },
                "ca",
            ),
            (
                ControlConfig {
                    batch_records: 0,
                    ..good()
                },
                "batch_records",
            ),
            (
                ControlConfig {
                    max_spool_bytes: 10,
                    ..good()
                },
                "max_spool_bytes",
            ),
            (
                ControlConfig {
                    poll_interval_s: Some(f64::NAN),
                    ..good()
                },
                "poll_interval_s",
            ),
        ] {
            match cfg.validate() {
                Err(ControlError::Config { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }

    #[test]
    fn keys_do_not_repeat() {
        let a = random_hex();
        assert_eq!(a.len(), 32);
        assert_ne!(a, random_hex());
    }
}
