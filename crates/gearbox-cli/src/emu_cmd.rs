//! `gearbox emu`: run a server and a client command across an emulated
//! network path (namespaces + TUN + gearbox-link in real time). The contract
//! — options, environment, exit codes, config schema, event log — is
//! docs/emu.md; this module only parses arguments and reports.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use gearbox_emu::{EmuConfig, EmulatorOptions, ReadyPort, RunOptions};

/// Arguments of `gearbox emu`.
#[derive(Args, Debug)]
pub struct EmuArgs {
    /// Topology and links (EMU.toml; schema in docs/emu.md).
    #[arg(long, value_name = "EMU.toml")]
    config: PathBuf,
    /// Command (sh -c) for the server namespace, started first.
    #[arg(long, value_name = "CMD")]
    server: Option<String>,
    /// Command (sh -c) for the client namespace, started once the server is ready;
    /// its exit code is gearbox emu's.
    #[arg(long, value_name = "CMD")]
    client: Option<String>,
    /// Write every link's packet events (enqueue, drop, deliver) here as JSON lines.
    #[arg(long, value_name = "FILE.jsonl")]
    events: Option<PathBuf>,
    /// Without --client: run this long. With --client: its time limit (exit 124 when hit).
    #[arg(long, value_name = "S")]
    duration_s: Option<f64>,
    /// Seed of the links' random choices.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Ports the server must bind before the client starts, e.g. 5201/tcp,4433/udp
    /// (default: any listening TCP or bound UDP socket).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    ready_ports: Vec<ReadyPort>,
    /// Give up if the server is not ready after this long.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    ready_timeout_s: f64,
    /// Run the server and client commands under SCHED_FIFO (below the relay), so that
    /// a loaded machine's scheduling does not add delay the path does not have (root).
    #[arg(long)]
    realtime_endpoints: bool,
    /// Start the client no earlier than this many seconds after the links' clock started
    /// (the relay's start), so that a trace or schedule is at the same point at every
    /// run's first request (default: as soon as the server is ready).
    #[arg(long, value_name = "S")]
    client_at_s: Option<f64>,
}

fn seconds(name: &str, s: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(s)
        .ok()
        .filter(|d| !d.is_zero())
        .with_context(|| format!("--{name} must be a positive number of seconds, got {s}"))
}

/// Runs `gearbox emu`; exits with the client's code when it is not 0.
pub fn run(args: EmuArgs) -> anyhow::Result<()> {
    let config = EmuConfig::from_file(&args.config)?;
    let options = RunOptions {
        emulator: EmulatorOptions {
            seed: args.seed,
            events: args.events.clone(),
            name: None,
        },
        server: args.server,
        client: args.client,
        duration: args.duration_s.map(|s| seconds("duration-s", s)).transpose()?,
        ready_ports: args.ready_ports,
        ready_timeout: seconds("ready-timeout-s", args.ready_timeout_s)?,
        realtime_endpoints: args.realtime_endpoints,
        client_at: args.client_at_s.map(|s| seconds("client-at-s", s)).transpose()?,
    };
    let outcome = gearbox_emu::run(&config, &options)?;
    let r = &outcome.report;
    for l in &r.links {
        let s = &l.stats;
        tracing::info!(
            link = %l.label,
            dir = l.dir.as_str(),
            arrived = s.arrived_packets,
            delivered = s.delivered_packets,
            policer_drops = s.policer_drops,
            loss_drops = s.loss_drops,
            queue_drops = s.queue_drops,
            "link summary"
        );
    }
    tracing::info!(
        name = %outcome.name,
        unroutable = r.unroutable_packets,
        tun_write_errors = r.tun_write_errors,
        relay_cpu_s = r.cpu_time.as_secs_f64(),
        wall_s = r.wall_time.as_secs_f64(),
        "relay summary"
    );
    if let Some(e) = &r.events_error {
        anyhow::bail!(
            "writing the event log {}: {e}",
            args.events.as_deref().unwrap_or(std::path::Path::new("?")).display()
        );
    }
    if outcome.exit_code != 0 {
        // Everything is cleaned up by now; hand the client's code to the caller.
        std::process::exit(outcome.exit_code);
    }
    Ok(())
}
