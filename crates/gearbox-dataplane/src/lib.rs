//! The core shared by gearbox's edge and client: per-request telemetry records,
//! TLS 1.3 configuration and certificates, and transport-state snapshots of QUIC
//! (quinn) and TCP (`TCP_INFO`) connections (docs/architecture.md "Data plane"), the reading
//! of TOML configuration files, and the one definition of the statistics gearbox reports
//! (`stats`: percentiles by linear interpolation), and the data plane's side of the
//! control plane (`control`: the upload spool and the policy poller, docs/control.md).

pub mod control;
pub mod stats;
pub mod telemetry;
pub mod tls;
pub mod toml_file;
pub mod transport;
