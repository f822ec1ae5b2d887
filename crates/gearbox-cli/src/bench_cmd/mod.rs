//! `gearbox bench`: benchmarks that print figures. They are not tests: nothing here
//! passes or fails on a number; the figures and their conditions go to
//! `docs/benchmarks.md`.
//!
//! `gearbox bench edge` puts our edge beside caddy (an independent HTTP/2 + HTTP/3
//! server, quic-go inside) in one run on loopback: the same files, the same
//! certificate, the same client (gearbox-client) and the same measurements, servers
//! interleaved repeat by repeat so that background load hits both alike. Both servers
//! run as child processes, so the CPU each one uses, and the client's own, are read
//! apart from `/proc`: on loopback the CPU is the bottleneck, and the output says
//! which side spent it. An in-process edge was rejected: it would share the client's
//! runtime threads and its CPU could not be told apart.
//!
//! The parts: [`process`] runs the servers, [`proc_stats`] reads `/proc`, [`peers`] sets
//! up the two servers and the files they serve, [`measure`] takes the samples and
//! [`report`] prints them.

mod cc;
mod floo;
mod idle;
mod load;
mod measure;
mod peers;
mod proc_stats;
mod process;
mod report;
mod sailfish;
mod sim;
mod tcpwise;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};

use measure::{measure, Target};
use peers::{start_caddy, start_gearbox_edge, write_noise};
use proc_stats::{load_average, machine_busy_s, own_cpu_s};
use report::print_report;

/// Arguments of `gearbox bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub bench: Bench,
}

/// The benchmarks.
#[derive(clap::Subcommand, Debug)]
pub enum Bench {
    /// Our edge against caddy on loopback, same files and client: HTTP/2 and HTTP/3 bulk
    /// throughput and small-request rate, with the CPU each side used.
    Edge(EdgeBenchArgs),
    /// The congestion-control suite: cost per ACK of every controller alone and inside
    /// Switchable, cost per switch, and the edge's CPU for one emulated transfer with
    /// Switchable against quinn's built-in Cubic (docs/cc.md).
    Cc(cc::CcBenchArgs),
    /// The simulator: simulated seconds and packets per wall second (docs/sim.md).
    Sim(sim::SimBenchArgs),
    /// The Floo gear: cost per decision of its monitor, selector and switcher, and the
    /// edge's CPU with and without it for one emulated transfer (docs/floo.md).
    Floo(floo::FlooBenchArgs),
    /// The path schedulers: cost per stream-to-path decision of the SAILfish policy and
    /// of the heuristics (docs/sailfish.md).
    Sailfish(sailfish::SailfishBenchArgs),
    /// The TCP WISE gear at scale: Cwnd Table size, lookup and draw per connection (Rust),
    /// and one learning iteration of the learner (Python) over thousands of clusters x 24
    /// hours (docs/tcpwise.md).
    Tcpwise(tcpwise::TcpwiseBenchArgs),
    /// Many connections at once: 10,000 idle TLS/TCP and 10,000 idle QUIC connections held,
    /// then 1,000 active clients of the `app` workload over HTTP/2 and HTTP/3; request rate,
    /// p99 latency, the server's memory and file descriptors, beside caddy (docs/reliability.md).
    Load(load::LoadBenchArgs),
    /// The control plane: ingestion records/s (embedded store and PostgreSQL), policy polls/s
    /// with 1,000 simulated pollers, the service's memory (docs/control.md).
    Control(crate::control_cmd::ControlArgs),
}

/// Arguments of `gearbox bench edge`.
#[derive(clap::Args, Debug)]
pub struct EdgeBenchArgs {
    /// Size of the bulk file, in MB (10^6 bytes).
    #[arg(long, default_value_t = 200)]
    pub size_mb: u64,
    /// Length of each small-request measurement, seconds (after the warm-up).
    #[arg(long, default_value_t = 5.0)]
    pub duration_s: f64,
    /// Warm-up before each small-request measurement, seconds.
    #[arg(long, default_value_t = 1.0)]
    pub warmup_s: f64,
    /// Small requests in flight at once, on one connection.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Repeats of every measurement; the median is reported, the best beside it.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Size of the small responses, bytes.
    #[arg(long, default_value_t = 1024)]
    pub small_bytes: u64,
    /// The caddy binary.
    #[arg(long, default_value = "caddy")]
    pub caddy: PathBuf,
}

/// Runs the chosen benchmark.
pub fn run(a: BenchArgs) -> anyhow::Result<()> {
    match a.bench {
        Bench::Edge(e) => edge(e),
        Bench::Cc(c) => cc::run(c),
        Bench::Sim(s) => sim::run(s),
        Bench::Floo(f) => floo::run(f),
        Bench::Sailfish(f) => sailfish::run(f),
        Bench::Tcpwise(t) => tcpwise::run(t),
        Bench::Load(l) => load::run(l),
        Bench::Control(c) => crate::control_cmd::bench(c),
    }
}

/// `gearbox bench edge`: sets up both servers in a scratch directory, measures, reports.
fn edge(a: EdgeBenchArgs) -> anyhow::Result<()> {
    if a.repeats == 0 || a.concurrency == 0 || a.size_mb == 0 || a.duration_s <= 0.0 {
        bail!("--repeats, --concurrency, --size-mb and --duration-s must be positive");
    }
    let size = a.size_mb * 1_000_000;
    // A fresh directory with an unpredictable name: a fixed /tmp path could be another
    // user's directory or a link planted there.
    let dir = tempfile::Builder::new()
        .prefix("gearbox-bench-edge-")
        .tempdir()
        .context("cannot create a temporary directory")?;
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    gearbox_dataplane::tls::write_self_signed(&["localhost".into(), "127.0.0.1".into()], &cert, &key)?;
    let www = dir.path().join("www");
    std::fs::create_dir_all(&www)?;
    eprintln!("bench: writing the {} MB file", a.size_mb);
    write_noise(&www.join("bulk.bin"), size)?;
    write_noise(&www.join("small.bin"), a.small_bytes)?;

    let gearbox = start_gearbox_edge(dir.path(), &cert, &key, &www, size.max(a.small_bytes))?;
    let caddy = start_caddy(&a.caddy, dir.path(), &cert, &key, &www)?;

    let targets = [
        Target {
            label: "gearbox file",
            server: &gearbox,
            bulk_path: "/bulk.bin".into(),
            small_path: "/small.bin".into(),
        },
        Target {
            label: "caddy file",
            server: &caddy,
            bulk_path: "/bulk.bin".into(),
            small_path: "/small.bin".into(),
        },
        Target {
            label: "gearbox /bytes",
            server: &gearbox,
            bulk_path: format!("/bytes/{size}"),
            small_path: format!("/bytes/{}", a.small_bytes),
        },
    ];

    // Background load: the machine's busy time less what the bench's own three
    // processes used. Our own threads count in the load average, so it cannot tell.
    let ours = || own_cpu_s() + gearbox.cpu_s() + caddy.cpu_s();
    let (busy0, ours0, wall0) = (machine_busy_s(), ours(), Instant::now());
    let load_before = load_average();
    let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let rows = rt.block_on(measure(&a, size, &cert, &targets))?;
    // The machine's and the processes' counters tick apart, so an idle machine can come out
    // a percent or so below zero: that is zero.
    let others_pct = (((machine_busy_s() - busy0) - (ours() - ours0)) / wall0.elapsed().as_secs_f64() * 100.0).max(0.0);
    drop(targets);
    drop(gearbox);
    drop(caddy);

    print_report(&a, &rows, &load_before, others_pct);
    Ok(())
}
