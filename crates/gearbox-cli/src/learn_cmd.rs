//! `gearbox learn`: the learners that turn telemetry into a gear's tables are Python; this
//! subcommand execs them with the same arguments, the way `gearbox lab` does (lab_cmd.rs
//! says which Python and how it is found).
//!
//! `gearbox learn tcpwise ...` is `python -m gearbox.tcpwise learn ...`: TCP WISE's
//! Performance Oriented Learning (seed §IV-C, Algorithm 1), which reads the edge's telemetry
//! and writes the next Cwnd Table (docs/tcpwise.md, "Learning").
//!
//! `gearbox learn floo ...` is `python -m gearbox.floo.train ...`: Floo's PPO training in
//! the simulator (docs/floo.md, "Training").
//!
//! `gearbox learn sailfish ...` is `python -m gearbox.sailfish.train ...`: SAILfish's A2C
//! training of the stream-to-path policy in the simulator (docs/sailfish.md, "Training").

use std::os::unix::process::CommandExt;

use clap::{Args, Subcommand};

/// Arguments of `gearbox learn`: which learner, then its own arguments.
#[derive(Args, Debug)]
pub struct LearnArgs {
    #[command(subcommand)]
    learner: Learner,
}

/// The learners.
#[derive(Subcommand, Debug)]
enum Learner {
    /// TCP WISE: the next Cwnd Table from edge telemetry (`gearbox learn tcpwise --help`).
    Tcpwise(PassedArgs),
    /// Floo: the controller-selection policy, trained by PPO in the simulator
    /// (`gearbox learn floo --help`; docs/floo.md).
    Floo(PassedArgs),
    /// SAILfish: the stream-to-path policy, trained by A2C in the simulator
    /// (`gearbox learn sailfish --help`; docs/sailfish.md).
    Sailfish(PassedArgs),
}

/// Everything after the learner's name, passed on untouched (`--help` is the Python side's).
#[derive(Args, Debug)]
#[command(disable_help_flag = true, disable_version_flag = true)]
struct PassedArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

/// Execs the learner; returns only on failure to start it.
pub fn run(a: LearnArgs) -> anyhow::Result<()> {
    let (module, prog, args) = match a.learner {
        Learner::Tcpwise(p) => ("gearbox.tcpwise", "gearbox learn tcpwise", p.args),
        Learner::Floo(p) => ("gearbox.floo.train", "gearbox learn floo", p.args),
        Learner::Sailfish(p) => ("gearbox.sailfish.train", "gearbox learn sailfish", p.args),
    };
    let (mut cmd, python) = crate::lab_cmd::python_module(module, prog, &args)?;
    // runpy replaces argv[0] with the module's path: the usage's name goes by the environment.
    cmd.env("GEARBOX_LEARN_PROG", prog);
    let err = cmd.exec();
    Err(crate::lab_cmd::start_error(&python, &err))
}
