//! `gearbox bench tcpwise`: what the TCP WISE gear costs at the scale of the seed's online
//! experiment (TCP WISE §V-B3: thousands of /24 clusters, learnt per hour).
//!
//! In process, on a Cwnd Table of `--clusters` /24s × `--hours` hours (generated here):
//! the table's size and parse time, and per connection the cost of the table lookup
//! (`CwndTable::lookup`, longest prefix then hour, §IV-A's "looks up the IWs from the Cwnd
//! Table") and of the whole QUIC gear at accept (`TcpWiseGear::choose`: lookup and the α/β
//! draw), beside a baseline in the same run: a hash map keyed by (/24, hour), the least a
//! lookup can cost. Then the learner's half, in Python (`gearbox.tcpwise.bench`): one
//! learning iteration's time over synthetic telemetry of the same shape and the size of the
//! table it writes. With root, the kernel TCP half (TCP WISE §IV-A on Linux: the edge's BPF
//! `sock_ops` program, `gearbox_bpf::iw`): the program's own run time per connection, as
//! the kernel's BPF statistics count it, over loopback connections to a listener it is
//! attached to, with its LPM tries empty, holding one /24, and holding the table's /24s.
//! Figures only; nothing passes or fails on them.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Instant;

use anyhow::bail;
use gearbox_gear_api::{AcceptedConnection, InitialWindowGear, Transport};
use gearbox_gears::tcpwise::{CwndTable, SharedTable, TcpWiseGear};

use super::cc::median;

/// Arguments of `gearbox bench tcpwise`.
#[derive(clap::Args, Debug)]
pub struct TcpwiseBenchArgs {
    /// Client /24 clusters in the table.
    #[arg(long, default_value_t = 4096)]
    pub clusters: u32,
    /// Hours per cluster (1-24).
    #[arg(long, default_value_t = 24)]
    pub hours: u8,
    /// Lookups per timing; the median of the repeats is reported.
    #[arg(long, default_value_t = 20_000)]
    pub lookups: u32,
    /// Timings per part.
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
    /// Responses per IW per entry in the learner's synthetic telemetry (its S_min).
    #[arg(long, default_value_t = 10)]
    pub samples: u32,
    /// Skip the learner's half (Python).
    #[arg(long)]
    pub no_learner: bool,
    /// Loopback connections per table size in the kernel TCP half (root only).
    #[arg(long, default_value_t = 2_000)]
    pub bpf_connections: u32,
    /// Skip the kernel TCP half (the BPF program).
    #[arg(long)]
    pub no_bpf: bool,
}

fn cluster_ip(c: u32, host: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, (c >> 8) as u8, c as u8, host)
}

/// The table's TOML: every cluster for every hour, plus `others`.
fn table_text(clusters: u32, hours: u8) -> String {
    let mut s = String::from("version = 1\ncap = 100\n");
    for c in 0..clusters {
        let ip = cluster_ip(c, 0);
        for h in 0..hours {
            let alpha = 5 + 5 * ((c + u32::from(h)) % 12);
            let _ = write!(
                s,
                "[[cluster]]\nprefix = \"{ip}/24\"\nhour = {h}\niw = [{alpha}, {}]\nchance_alpha = 0.5\nbest = {alpha}\n",
                alpha + 5
            );
        }
    }
    s.push_str("[[cluster]]\nprefix = \"others\"\niw = [10, 15]\n");
    s
}

/// Runs the benchmark and prints its figures.
pub fn run(a: TcpwiseBenchArgs) -> anyhow::Result<()> {
    if a.clusters == 0 || a.clusters > 65_536 || !(1..=24).contains(&a.hours) || a.lookups == 0 || a.repeats == 0 {
        bail!("--clusters in [1, 65536], --hours in [1, 24], --lookups and --repeats >= 1");
    }
    let text = table_text(a.clusters, a.hours);
    let t0 = Instant::now();
    let table = CwndTable::parse(&text).map_err(|e| anyhow::anyhow!("the generated table: {e}"))?;
    let parse_s = t0.elapsed().as_secs_f64();
    let entries = table.entries().len();
    println!(
        "gearbox bench tcpwise: Cwnd Table of {} clusters x {} hours = {entries} entries, {} bytes of TOML (without `reason`), parsed in {:.1} ms",
        a.clusters,
        a.hours,
        text.len(),
        parse_s * 1e3
    );
    // Clients: 90% inside a cluster of the table, 10% outside (they get `others`).
    let clients: Vec<(IpAddr, u8)> = (0..1024u32)
        .map(|i| {
            let k = i.wrapping_mul(2_654_435_761);
            let c = if i % 10 == 9 {
                a.clusters + k % 1000
            } else {
                k % a.clusters
            };
            (
                IpAddr::V4(cluster_ip(c, (k >> 24) as u8)),
                (k % u32::from(a.hours)) as u8,
            )
        })
        .collect();
    let baseline: HashMap<(u32, u8), [u32; 2]> = (0..a.clusters)
        .flat_map(|c| (0..a.hours).map(move |h| ((u32::from(cluster_ip(c, 0)), h), [10, 15])))
        .collect();
    let time = |f: &mut dyn FnMut(IpAddr, u8)| {
        median(
            (0..a.repeats)
                .map(|_| {
                    let start = Instant::now();
                    for i in 0..a.lookups {
                        let (ip, h) = clients[(i % 1024) as usize];
                        f(ip, h);
                    }
                    start.elapsed().as_nanos() as f64 / f64::from(a.lookups)
                })
                .collect(),
        )
    };
    let base_ns = time(&mut |ip, h| {
        let IpAddr::V4(v4) = ip else { return };
        let key = (u32::from(v4) & 0xffff_ff00, h);
        black_box(baseline.get(&key).copied().unwrap_or([10, 15]));
    });
    let lookup_ns = time(&mut |ip, h| {
        black_box(table.lookup(ip, h));
    });
    let mut gear = TcpWiseGear::new(SharedTable::new(table.clone()), 1);
    let now = Instant::now();
    let gear_ns = time(&mut |ip, h| {
        let t = f64::from(h) * 3_600_000.0;
        let conn = AcceptedConnection::new(1, SocketAddr::new(ip, 40000), Transport::Quic, t);
        black_box(gear.choose(&conn, now));
    });
    println!(
        "  per connection (median of {} timings of {} lookups):",
        a.repeats, a.lookups
    );
    println!("    baseline: hash map keyed by (/24, hour)     {base_ns:>12.0} ns");
    println!(
        "    CwndTable::lookup (longest prefix, hour)    {lookup_ns:>12.0} ns  ({:.0} x baseline)",
        lookup_ns / base_ns
    );
    println!(
        "    TcpWiseGear::choose (lookup + alpha/beta draw) {gear_ns:>9.0} ns  ({:.0} x baseline)",
        gear_ns / base_ns
    );
    if !a.no_bpf {
        bpf_half(&a)?;
    }
    if a.no_learner {
        return Ok(());
    }
    let args = vec![
        "--clusters".to_string(),
        a.clusters.to_string(),
        "--hours".into(),
        a.hours.to_string(),
        "--samples".into(),
        a.samples.to_string(),
    ];
    let (mut cmd, python) = crate::lab_cmd::python_module("gearbox.tcpwise.bench", "gearbox bench tcpwise", &args)?;
    let status = cmd.status().map_err(|e| crate::lab_cmd::start_error(&python, &e))?;
    if !status.success() {
        bail!("the learner's half (python -m gearbox.tcpwise.bench) failed: {status}");
    }
    Ok(())
}

/// The kernel TCP half (module doc): the BPF program's run time per connection for three
/// table sizes. Without root it says why it is left out.
fn bpf_half(a: &TcpwiseBenchArgs) -> anyhow::Result<()> {
    use gearbox_bpf::iw::{BpfStats, IwEntry, IwProgram};
    use std::net::{TcpListener, TcpStream};

    if a.bpf_connections == 0 {
        bail!("--bpf-connections must be at least 1");
    }
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let program = match IwProgram::attach(&listener, port) {
        Ok(p) => p,
        Err(e @ gearbox_bpf::BpfError::NotRoot { .. }) => {
            println!("  kernel TCP (the BPF sock_ops program): left out: {e}");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let _stats = BpfStats::enable()?;
    let entry = |prefix: Option<(IpAddr, u8)>| IwEntry {
        prefix,
        iw: vec![10, 15],
        chance_alpha: 0.5,
    };
    let loopback = entry(Some((IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0)), 24)));
    // The maps hold at most 65,536 prefixes: the table's /24s and the loopback's.
    let many: Vec<IwEntry> = (0..a.clusters.min(65_535))
        .map(|c| entry(Some((IpAddr::V4(cluster_ip(c, 0)), 24))))
        .chain([loopback.clone(), entry(None)])
        .collect();
    let sizes: [(&str, Vec<IwEntry>); 3] = [
        ("empty tries (no entry: the default IW, no draw)", Vec::new()),
        ("one /24 (the client's) + others", vec![loopback, entry(None)]),
        ("the table's /24s + the client's + others", many),
    ];
    println!(
        "  kernel TCP, the edge's BPF sock_ops program (run time as the kernel counts it; {} loopback connections each):",
        a.bpf_connections
    );
    for (what, entries) in sizes {
        program.fill(&entries)?;
        let before = program.run_stats()?;
        let start = Instant::now();
        for _ in 0..a.bpf_connections {
            let client = TcpStream::connect(("127.0.0.1", port))?;
            let (server, _) = listener.accept()?;
            black_box((client, server));
        }
        let wall_ns = start.elapsed().as_nanos() as f64 / f64::from(a.bpf_connections);
        let after = program.run_stats()?;
        let runs = after.runs - before.runs;
        let ns = (after.run_time_ns - before.run_time_ns) as f64;
        println!(
            "    {:<48} {:>4} prefixes: {:>6.0} ns per connection in the program ({:.1} runs of {:.0} ns), connect + accept {:.0} ns",
            what,
            entries.len(),
            ns / f64::from(a.bpf_connections),
            runs as f64 / f64::from(a.bpf_connections),
            if runs > 0 { ns / runs as f64 } else { 0.0 },
            wall_ns
        );
    }
    Ok(())
}
