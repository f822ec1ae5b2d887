//! `gearbox`: the one front door. Each subcommand lives in its own module; the
//! Python-side subcommands (the lab, the learners and the control plane) are run by the Python
//! package, which this binary execs with the same arguments.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod agent_cmd;
mod bench_cmd;
mod cert_cmd;
mod client_cmd;
mod control_args;
mod control_cmd;
mod demo_cmd;
mod edge_cmd;
mod emu_cmd;
mod flexhttp_client;
mod lab_cmd;
mod learn_cmd;
mod pages_cmd;
mod sim_cmd;
mod trace_cmd;

/// gearbox: adaptive web transport — edge server, client, lab and learners.
#[derive(Parser)]
#[command(name = "gearbox", version, about, long_about = None, propagate_version = true)]
struct Cli {
    /// Log filter (tracing syntax), e.g. `info` or `gearbox_dataplane=debug`.
    #[arg(long, global = true, env = "GEARBOX_LOG", default_value = "warn")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the edge server: HTTPS over TCP (h2, http/1.1) and HTTP/3 over QUIC.
    Edge(edge_cmd::EdgeArgs),
    /// Make a self-signed certificate and key for the given names and addresses.
    Cert(cert_cmd::CertArgs),
    /// Fetch one URL over the chosen transport and print its timing record.
    Get(client_cmd::GetArgs),
    /// Replay a workload against an edge and write client telemetry.
    Load(client_cmd::LoadArgs),
    /// Run the main job: an edge and a client on loopback, RCT statistics per protocol.
    Demo(demo_cmd::DemoArgs),
    /// Run commands across an emulated network path (needs root).
    Emu(emu_cmd::EmuArgs),
    /// Benchmarks (print figures; not tests).
    Bench(bench_cmd::BenchArgs),
    /// Lab: scenarios, experiment runs across emulated paths, reports (`gearbox lab --help`).
    Lab(lab_cmd::LabArgs),
    /// Learners: a gear's next table from telemetry (`gearbox learn tcpwise --help`).
    Learn(learn_cmd::LearnArgs),
    /// The control plane: telemetry ingestion, policy registry, scheduled learners, dashboard
    /// (`gearbox control --help`, docs/control.md).
    Control(control_cmd::ControlArgs),
    /// The page kit: seeded static sites with FlexHTTP's measured page statistics, and their
    /// page features (`gearbox pages --help`, docs/flexhttp.md).
    Pages(pages_cmd::PagesArgs),
    /// FlexHTTP's agent server: network measurement, global trace pool, global classifier
    /// (`gearbox agent --help`, docs/flexhttp.md).
    Agent(agent_cmd::AgentArgs),
    /// The virtual-time simulator: real QUIC over the lab's link model, no root (docs/sim.md).
    Sim(sim_cmd::SimArgs),
    /// Synthetic link traces for scenarios (used by the lab).
    #[command(hide = true)]
    Trace(trace_cmd::TraceArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log).unwrap_or_else(|e| {
        eprintln!("gearbox: --log {:?} is not a valid filter ({e}); using `warn`", cli.log);
        tracing_subscriber::EnvFilter::new("warn")
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Edge(a) => edge_cmd::run(a),
        Command::Cert(a) => cert_cmd::run(a),
        Command::Get(a) => client_cmd::run_get(a),
        Command::Load(a) => client_cmd::run_load(a),
        Command::Demo(a) => demo_cmd::run(a),
        Command::Emu(a) => emu_cmd::run(a),
        Command::Bench(a) => bench_cmd::run(a),
        Command::Lab(a) => lab_cmd::run(a),
        Command::Pages(a) => pages_cmd::run(a),
        Command::Learn(a) => learn_cmd::run(a),
        Command::Control(a) => control_cmd::run(a),
        Command::Agent(a) => agent_cmd::run(a),
        Command::Sim(a) => sim_cmd::run(a),
        Command::Trace(a) => trace_cmd::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gearbox: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
