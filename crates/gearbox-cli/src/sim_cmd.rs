//! `gearbox sim`: the virtual-time simulator (crates/gearbox-sim, docs/sim.md).

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use gearbox_sim::SimConfig;

/// `gearbox sim` arguments.
#[derive(clap::Args, Debug)]
pub struct SimArgs {
    #[command(subcommand)]
    pub what: SimCommand,
}

/// What to simulate.
#[derive(clap::Subcommand, Debug)]
pub enum SimCommand {
    /// Run one simulation from a config file (docs/sim.md) and write its client
    /// records (JSON lines, `source = "sim"`).
    Exec(ExecArgs),
    /// Run a lab scenario file (docs/lab.md) in the simulator: the lab's runs, results
    /// table, summary and report, no root (Python, `gearbox sim run --help`).
    #[command(disable_help_flag = true)]
    Run(PythonArgs),
    /// The same QUIC scenarios in the emulator (root) and the simulator, compared per
    /// condition (Python, `gearbox sim fidelity --help`; docs/sim.md "Fidelity").
    #[command(disable_help_flag = true)]
    Fidelity(PythonArgs),
}

/// Arguments passed on untouched to the Python side (`python/gearbox/sim/run.py`,
/// `fidelity.py`), which shares the lab's scenario reader and reports.
#[derive(clap::Args, Debug)]
pub struct PythonArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

/// `gearbox sim exec` arguments.
#[derive(clap::Args, Debug)]
pub struct ExecArgs {
    /// Simulation config (TOML): seed, duration_s, cc, initial_window, workload, [down], [up].
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Where the records go (default: standard output).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Write each connection's qlog here (conn<N>-client.sqlog and conn<N>-server.sqlog:
    /// quinn-proto's packet, loss and recovery events, times from virtual time zero).
    #[arg(long, value_name = "DIR")]
    pub qlog: Option<PathBuf>,
}

/// Runs `gearbox sim ...`.
pub fn run(a: SimArgs) -> anyhow::Result<()> {
    match a.what {
        SimCommand::Exec(e) => exec(e),
        SimCommand::Run(r) => python("gearbox.sim.run", "gearbox sim run", &r.args),
        SimCommand::Fidelity(r) => python("gearbox.sim.fidelity", "gearbox sim fidelity", &r.args),
    }
}

/// Execs a Python module of the simulator's (returns only on failure to start it).
fn python(module: &str, prog: &str, args: &[String]) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    let (mut cmd, python) = crate::lab_cmd::python_module(module, prog, args)?;
    let err = cmd.exec();
    Err(crate::lab_cmd::start_error(&python, &err))
}

fn exec(a: ExecArgs) -> anyhow::Result<()> {
    let mut config = SimConfig::load(&a.config)?;
    config.qlog_dir = a.qlog.clone();
    let wall = std::time::Instant::now();
    let out = gearbox_sim::run(&config)?;
    let wall = wall.elapsed();
    let mut text = out.records.join("\n");
    if !text.is_empty() {
        text.push('\n');
    }
    match &a.out {
        Some(p) => std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))?,
        None => std::io::stdout().write_all(text.as_bytes())?,
    }
    eprintln!(
        "gearbox sim: {} of {} requests done in {:.1} simulated s ({:.2} s wall, {:.0}x real time, {} packets){}",
        out.completed,
        out.requests,
        out.simulated.as_secs_f64(),
        wall.as_secs_f64(),
        out.simulated.as_secs_f64() / wall.as_secs_f64().max(1e-9),
        out.packets,
        if out.timed_out {
            format!(
                "; stopped at the virtual-time limit ({} s, `time_limit_s`) with requests unfinished",
                config.time_limit_s()
            )
        } else {
            String::new()
        }
    );
    let link = if config.population.is_some() { "prefix" } else { "path" };
    for (path, dir, s) in &out.links {
        eprintln!(
            "gearbox sim: {link} {path} {dir}: arrived {} ({} B each on average), delivered {}, policer drops {}, \
             loss drops {}, queue drops {}",
            s.arrived_packets,
            s.arrived_bytes.checked_div(s.arrived_packets).unwrap_or(0),
            s.delivered_packets,
            s.policer_drops,
            s.loss_drops,
            s.queue_drops
        );
    }
    if out.timed_out {
        anyhow::bail!("the run hit its virtual-time limit");
    }
    Ok(())
}
