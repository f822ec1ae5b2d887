//! Relay benchmark (not a test): TCP through the emulator with iperf3, with
//! the relay thread's CPU time sampled over the transfer.
//!
//! 1. maximum relay throughput: a 100 Gbit/s link with no delay, so the relay
//!    itself is the bottleneck (target >= 1.5 Gbit/s on one core);
//! 2. a 50 Mbit/s, 2 x 20 ms path (target <= 10% of a core);
//! 3. the same with the packet-event log on.
//!
//! `cargo run --release -p gearbox-emu --example emu_bench [seconds [case]]` (root, iperf3).
//! Relay CPU is user + system time of the relay thread; system time includes
//! the kernel's work on each packet the relay writes into a TUN device (the
//! receiving namespace's IP/TCP input runs in the writer's context).

use std::process::Stdio;
use std::time::{Duration, Instant};

use gearbox_emu::{EmuConfig, Emulator, EmulatorOptions, Side};

/// A symmetric single path; `{dir}` in `link` becomes `uplink` / `downlink`.
fn config(link: &str) -> EmuConfig {
    let text = format!(
        "topology = \"single\"\n[[path]]\n[path.uplink]\n{}\n[path.downlink]\n{}\n",
        link.replace("{dir}", "uplink"),
        link.replace("{dir}", "downlink")
    );
    EmuConfig::from_toml_str(&text, "bench", None).unwrap_or_else(|e| panic!("{e}"))
}

struct Figures {
    goodput_bps: f64,
    relay_cpu_fraction: f64,
    relay_wall_s: f64,
}

fn bench(cfg: &EmuConfig, options: &EmulatorOptions, seconds: u32) -> Result<Figures, String> {
    let emu = Emulator::start(cfg, options).map_err(|e| e.to_string())?;
    let mut server = emu
        .command(Side::Server, "exec iperf3 -s -1 >/dev/null")
        .spawn()
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !emu
        .bound_ports(Side::Server)
        .map_err(|e| e.to_string())?
        .0
        .contains(&5201)
    {
        if Instant::now() > deadline {
            return Err("iperf3 -s did not start".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // Sample CPU over the transfer only (-O 1 leaves out slow start).
    let cmd = format!("exec iperf3 -c \"$GEARBOX_SERVER_ADDR\" -J -t {seconds} -O 1");
    let client = emu
        .command(Side::Client, &cmd)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_millis(1200));
    let (cpu0, t0) = (emu.relay_cpu_time().unwrap_or_default(), Instant::now());
    std::thread::sleep(Duration::from_secs(u64::from(seconds.saturating_sub(1)).max(1)));
    let (cpu1, t1) = (emu.relay_cpu_time().unwrap_or_default(), Instant::now());
    let out = client.wait_with_output().map_err(|e| e.to_string())?;
    let _ = server.wait();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| format!("iperf3 JSON: {e}"))?;
    let goodput_bps = report["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .ok_or_else(|| format!("no sum_received in {report}"))?;
    let relay = emu.stop().map_err(|e| e.to_string())?;
    Ok(Figures {
        goodput_bps,
        relay_cpu_fraction: (cpu1 - cpu0).as_secs_f64() / (t1 - t0).as_secs_f64(),
        relay_wall_s: relay.wall_time.as_secs_f64(),
    })
}

fn main() {
    let seconds: u32 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(10);
    // The event log goes to a fresh private folder (removed at the end), never a predictable /tmp name.
    let scratch = tempfile::tempdir().unwrap_or_else(|e| {
        eprintln!("cannot make a scratch folder: {e}");
        std::process::exit(1)
    });
    let events = scratch.path().join("events.jsonl");
    let cases = [
        (
            "max: 100 Gbit/s link, no delay",
            config("rate_bps = 100_000_000_000"),
            None,
        ),
        (
            "50 Mbit/s, 2 x 20 ms",
            config("rate_bps = 50_000_000\ndelay_ms = 20.0\n[path.{dir}.queue]\nlimit_packets = 300"),
            None,
        ),
        (
            "50 Mbit/s, 2 x 20 ms, event log on",
            config("rate_bps = 50_000_000\ndelay_ms = 20.0"),
            Some(events.clone()),
        ),
    ];
    println!(
        "gearbox-emu relay benchmark, iperf3 TCP for {seconds} s, {} CPUs",
        num_cpus()
    );
    println!("| case | TCP goodput | relay CPU (% of one core) |");
    println!("|---|---|---|");
    // An optional second argument picks one case (1-based), e.g. for profiling.
    let only: Option<usize> = std::env::args().nth(2).and_then(|s| s.parse().ok());
    for (i, (name, cfg, ev)) in cases.into_iter().enumerate() {
        if only.is_some_and(|o| o != i + 1) {
            continue;
        }
        let options = EmulatorOptions {
            events: ev,
            ..Default::default()
        };
        match bench(&cfg, &options, seconds) {
            Ok(f) => println!(
                "| {name} | {:.3} Gbit/s ({:.1} Mbit/s) | {:.1}% (relay ran {:.1} s) |",
                f.goodput_bps / 1e9,
                f.goodput_bps / 1e6,
                f.relay_cpu_fraction * 100.0,
                f.relay_wall_s
            ),
            Err(e) => println!("| {name} | failed: {e} | |"),
        }
    }
}

fn num_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
