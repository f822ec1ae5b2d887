//! `gearbox control`: the control plane (telemetry ingestion, policy registry, scheduled
//! learners, dashboard) is Python (`python/gearbox/control/`, docs/control.md); this
//! subcommand execs `python -m gearbox.control` with the same arguments, the way
//! `gearbox learn` does (lab_cmd.rs says which Python and how it is found).
//! `gearbox bench control` is `python -m gearbox.control bench`.

use std::os::unix::process::CommandExt;

use clap::Args;

/// Everything after `control`, passed on untouched (`--help` is the Python side's).
#[derive(Args, Debug)]
#[command(disable_help_flag = true, disable_version_flag = true)]
pub struct ControlArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

/// Execs the control plane's command line; returns only on failure to start it.
pub fn run(a: ControlArgs) -> anyhow::Result<()> {
    exec(a.args)
}

/// `gearbox bench control ARGS`: the benchmark subcommand of the same module.
pub fn bench(a: ControlArgs) -> anyhow::Result<()> {
    let mut args = vec!["bench".to_string()];
    args.extend(a.args);
    exec(args)
}

fn exec(args: Vec<String>) -> anyhow::Result<()> {
    let (mut cmd, python) = crate::lab_cmd::python_module("gearbox.control", "gearbox control", &args)?;
    let err = cmd.exec();
    Err(crate::lab_cmd::start_error(&python, &err))
}
