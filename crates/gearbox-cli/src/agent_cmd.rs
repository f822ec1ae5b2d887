//! `gearbox agent`: FlexHTTP's agent server (§3.3: probe exchange, global trace pool, k-means labels,
//! the global forest) and a client's side of it are Python (`python/gearbox/flexhttp/`,
//! docs/flexhttp.md "Agent server"), built on the control plane; this subcommand execs
//! `python -m gearbox.flexhttp` with the same arguments, as `gearbox control` does.

use std::os::unix::process::CommandExt;

use clap::Args;

/// Everything after `agent`, passed on untouched (`--help` is the Python side's).
#[derive(Args, Debug)]
#[command(disable_help_flag = true, disable_version_flag = true)]
pub struct AgentArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

/// Execs the agent's command line; returns only on failure to start it.
pub fn run(a: AgentArgs) -> anyhow::Result<()> {
    let (mut cmd, python) = crate::lab_cmd::python_module("gearbox.flexhttp", "gearbox agent", &a.args)?;
    cmd.env("GEARBOX_AGENT_PROG", "gearbox agent");
    let err = cmd.exec();
    Err(crate::lab_cmd::start_error(&python, &err))
}
