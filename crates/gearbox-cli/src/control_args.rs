//! The flags that connect the edge and the client to the control plane
//! (docs/control.md, "Native upload and polling"), shared by `gearbox edge`, `get` and
//! `load`.

use std::path::PathBuf;

use gearbox_dataplane::control::ControlConfig;

/// Control plane flags.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct ControlArgs {
    /// Upload telemetry to (and, with --policies, poll policies from) the control plane
    /// at this URL (https://HOST:PORT; `gearbox control serve`).
    #[arg(long, value_name = "URL")]
    pub control: Option<String>,
    /// The control plane token (`gearbox control token create --role edge|client`).
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
    /// PEM file the control plane's certificate is checked against.
    #[arg(long, value_name = "FILE")]
    pub control_ca: Option<PathBuf>,
    /// Folder of the upload spool (records wait there until the control plane has them).
    #[arg(long, value_name = "DIR")]
    pub spool: Option<PathBuf>,
    /// Folder where polled policies are kept (GEAR/vN, GEAR/current); without it, no
    /// polling. The edge polls TCP WISE's Cwnd Table and (with --gear floo) Floo's model;
    /// `get` and `load` poll the transport gear's models (`wisetrans`, with --proto auto).
    #[arg(long, value_name = "DIR")]
    pub policies: Option<PathBuf>,
    /// Poll interval, seconds [default: the control plane's].
    #[arg(long, value_name = "S")]
    pub poll_s: Option<f64>,
    /// Records per uploaded batch [default: 1000].
    #[arg(long, value_name = "N")]
    pub batch_records: Option<usize>,
}

impl ControlArgs {
    /// `base` (a config file's `[control]`) with the flags over it; none without either.
    /// `spool` is the default spool folder of the command.
    pub fn apply(&self, base: Option<ControlConfig>, spool: &str) -> anyhow::Result<Option<ControlConfig>> {
        let Some(mut c) = base.or_else(|| {
            self.control.as_ref().map(|_| ControlConfig {
                spool: PathBuf::from(spool),
                ..ControlConfig::default()
            })
        }) else {
            for (flag, set) in [
                ("--token", self.token.is_some()),
                ("--control-ca", self.control_ca.is_some()),
                ("--spool", self.spool.is_some()),
                ("--policies", self.policies.is_some()),
                ("--poll-s", self.poll_s.is_some()),
                ("--batch-records", self.batch_records.is_some()),
            ] {
                anyhow::ensure!(!set, "{flag} needs --control URL");
            }
            return Ok(None);
        };
        if let Some(v) = &self.control {
            c.url.clone_from(v);
        }
        if let Some(v) = &self.token {
            c.token.clone_from(v);
        }
        if let Some(v) = &self.control_ca {
            c.ca.clone_from(v);
        }
        if let Some(v) = &self.spool {
            c.spool.clone_from(v);
        }
        if self.policies.is_some() {
            c.policies.clone_from(&self.policies);
        }
        if self.poll_s.is_some() {
            c.poll_interval_s = self.poll_s;
        }
        if let Some(n) = self.batch_records {
            c.batch_records = n;
        }
        c.validate().map_err(|e| {
            anyhow::anyhow!("{e} (flags: --control URL --token T --control-ca FILE [--spool DIR] [--policies DIR])")
        })?;
        Ok(Some(c))
    }
}
