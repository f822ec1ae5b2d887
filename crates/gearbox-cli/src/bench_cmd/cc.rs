//! `gearbox bench cc`: what the congestion-control suite costs (Floo §5.3 measured its
//! switcher at 19 µs a switch and +1.4% CPU).
//!
//! In process: nanoseconds per ACK of every algorithm alone and inside [`Switchable`]
//! (the difference is the wrapper: the connection-level estimator and one dynamic
//! call), and nanoseconds per switch, full and part, over every pair. A synthetic
//! steady flow drives them (1200-byte packets at the transfer's rate, each acknowledged
//! one RTT later, two per ACK frame, one loss every 1000 packets) with virtual
//! timestamps, so only the controller's own work is timed.
//!
//! Whole process, when root can run the emulator: the edge's CPU seconds for one
//! transfer over an emulated path (Floo's Fig. 7 set-up: 48 Mbit/s, 20 ms, 60 s) with
//! the suite's Cubic inside `Switchable` against quinn's built-in Cubic, both in one
//! run, read from the edge's own `process_cpu_seconds_total`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use gearbox_cc::{Ack, CcConfig, Cca, PathState, SwitchHandle, SwitchMode, Switchable};

/// Arguments of `gearbox bench cc`.
#[derive(clap::Args, Debug)]
pub struct CcBenchArgs {
    /// ACKs per timing of one controller.
    #[arg(long, default_value_t = 200_000)]
    pub acks: u64,
    /// Timings per controller; the median is reported.
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
    /// Length of each emulated transfer, seconds (0: skip the whole-process part).
    #[arg(long, default_value_t = 60.0)]
    pub transfer_s: f64,
    /// Bottleneck rate of the synthetic flow and the emulated path, Mbit/s.
    #[arg(long, default_value_t = 48.0)]
    pub rate_mbps: f64,
    /// Round-trip time of the synthetic flow and the emulated path, milliseconds.
    #[arg(long, default_value_t = 20)]
    pub rtt_ms: u64,
}

const PACKET: u64 = 1200;

/// The synthetic flow's schedule: packet gap and packets in flight.
struct Flow {
    gap: Duration,
    in_flight: u64,
    rtt: Duration,
}

impl Flow {
    fn new(a: &CcBenchArgs) -> Self {
        let gap = Duration::from_secs_f64(PACKET as f64 * 8.0 / (a.rate_mbps * 1e6));
        let rtt = Duration::from_millis(a.rtt_ms);
        let in_flight = (rtt.as_secs_f64() / gap.as_secs_f64()).ceil().max(1.0) as u64;
        Flow { gap, in_flight, rtt }
    }
}

/// Nanoseconds per ACK of `cca` inside a `Switchable`.
fn per_ack_switchable(cca: Cca, flow: &Flow, acks: u64) -> f64 {
    let t0 = Instant::now();
    let mut c = Switchable::new(
        Arc::new(CcConfig::default()),
        cca,
        12_000,
        SwitchHandle::new(),
        t0,
        1200,
    );
    use gearbox_cc::Controller as _;
    let start = Instant::now();
    for i in 0..acks + flow.in_flight {
        let now = t0 + flow.gap * i as u32;
        c.on_sent(now, PACKET, i);
        if i >= flow.in_flight {
            let sent = now - flow.rtt;
            if i % 1000 == 0 {
                c.on_congestion_event(now, sent, false, PACKET);
            } else {
                c.ack(now, sent, PACKET, false, flow.rtt);
            }
            if i % 2 == 1 {
                c.on_end_acks(now, flow.in_flight * PACKET, false, Some(i - flow.in_flight));
            }
        }
    }
    black_box(c.window());
    start.elapsed().as_nanos() as f64 / acks as f64
}

/// Nanoseconds per ACK of `cca` alone, given a fixed path state.
fn per_ack_bare(cca: Cca, flow: &Flow, acks: u64) -> f64 {
    let t0 = Instant::now();
    let mut path = PathState::new(1200, flow.rtt);
    path.min_rtt = flow.rtt;
    path.btl_bw = (PACKET as f64 / flow.gap.as_secs_f64()) as u64;
    let mut a = CcConfig::default().build(cca, 12_000, t0, &path);
    let start = Instant::now();
    for i in 0..acks + flow.in_flight {
        let now = t0 + flow.gap * i as u32;
        a.on_sent(now, PACKET, &path);
        if i >= flow.in_flight {
            let sent = now - flow.rtt;
            if i % 1000 == 0 {
                a.on_congestion_event(now, sent, false, PACKET, &path);
            } else {
                let ack = Ack {
                    sent,
                    bytes: PACKET,
                    app_limited: false,
                    rtt: flow.rtt,
                };
                a.on_ack(now, &ack, &path);
            }
            if i % 2 == 1 {
                a.on_end_acks(now, flow.in_flight * PACKET, false, &path);
            }
        }
    }
    black_box(a.window());
    start.elapsed().as_nanos() as f64 / acks as f64
}

/// Nanoseconds per switch in `mode`, over every ordered pair of algorithms.
pub(crate) fn per_switch(mode: SwitchMode, rounds: u32) -> f64 {
    let t0 = Instant::now();
    let mut c = Switchable::new(
        Arc::new(CcConfig::default()),
        Cca::Cubic,
        12_000,
        SwitchHandle::new(),
        t0,
        1200,
    );
    let mut n = 0u32;
    let start = Instant::now();
    for r in 0..rounds {
        for to in Cca::ALL {
            if to != c.cca() {
                black_box(c.switch_now(t0 + Duration::from_millis(u64::from(r)), to, mode));
                n += 1;
            }
        }
    }
    start.elapsed().as_nanos() as f64 / f64::from(n.max(1))
}

/// The median of the repeats (NaN for none, which the tables print as such): every
/// benchmark's one definition, `gearbox_dataplane::stats::median`.
pub(crate) fn median(v: Vec<f64>) -> f64 {
    gearbox_dataplane::stats::median(&v).unwrap_or(f64::NAN)
}

/// Runs the benchmark and prints its figures.
pub fn run(a: CcBenchArgs) -> anyhow::Result<()> {
    if a.acks == 0 || a.repeats == 0 || a.rate_mbps <= 0.0 || a.rtt_ms == 0 || a.transfer_s < 0.0 {
        bail!("--acks, --repeats, --rate-mbps and --rtt-ms must be positive, --transfer-s 0 or more");
    }
    let flow = Flow::new(&a);
    println!(
        "# gearbox bench cc: {} ACKs x {} repeats per controller, synthetic flow {} Mbit/s, {} ms RTT ({} packets in flight)",
        a.acks, a.repeats, a.rate_mbps, a.rtt_ms, flow.in_flight
    );
    println!("\n| controller | ns/ACK alone | ns/ACK in Switchable | Switchable adds |");
    println!("|---|---:|---:|---:|");
    for cca in Cca::ALL {
        let bare = median((0..a.repeats).map(|_| per_ack_bare(cca, &flow, a.acks)).collect());
        let wrapped = median((0..a.repeats).map(|_| per_ack_switchable(cca, &flow, a.acks)).collect());
        println!("| {cca} | {bare:.1} | {wrapped:.1} | {:.1} |", wrapped - bare);
    }
    println!(
        "\n| switch | ns/switch (median of {} timings, 30 per pair) |",
        a.repeats
    );
    println!("|---|---:|");
    for mode in [SwitchMode::Full, SwitchMode::Part] {
        let ns = median((0..a.repeats).map(|_| per_switch(mode, 30)).collect());
        println!("| {} | {ns:.0} |", mode.name());
    }
    if a.transfer_s > 0.0 {
        let cpu = whole_process(
            a.rate_mbps,
            a.rtt_ms,
            a.transfer_s,
            &[
                ("cubic", "--cc cubic".into()),
                ("quinn-cubic", "--cc quinn-cubic".into()),
            ],
        )
        .context("whole-process part (needs root and /dev/net/tun; --transfer-s 0 skips it)")?;
        println!(
            "\nSwitchable (the suite's Cubic) over quinn's built-in Cubic: {:+.1}% edge CPU",
            (cpu[0] / cpu[1] - 1.0) * 100.0
        );
    }
    Ok(())
}

/// The edge's CPU seconds for one emulated HTTP/3 transfer of `transfer_s` at line rate
/// over a `rate_mbps`, `rtt_ms` path, once per edge variant (a label and the edge's
/// extra flags), in one run; prints a table row per variant and returns the CPU seconds.
pub(crate) fn whole_process(
    rate_mbps: f64,
    rtt_ms: u64,
    transfer_s: f64,
    variants: &[(&str, String)],
) -> anyhow::Result<Vec<f64>> {
    let exe = std::env::current_exe().context("cannot find the gearbox binary")?;
    let exe = exe.display();
    let dir = tempfile::Builder::new().prefix("gearbox-bench-cc-").tempdir()?;
    let d = dir.path();
    let (cert, key) = (d.join("cert.pem"), d.join("key.pem"));
    gearbox_dataplane::tls::write_self_signed(&["10.0.0.1".into()], &cert, &key)?;
    let rate_bps = (rate_mbps * 1e6) as u64;
    let one_way_ms = rtt_ms as f64 / 2.0;
    std::fs::write(
        d.join("emu.toml"),
        format!(
            "topology = \"single\"\n[[path]]\n[path.uplink]\nrate_bps = {rate_bps}\ndelay_ms = {one_way_ms}\n\
             base_rtt_ms = {}\n[path.uplink.queue]\nlimit_bdp = 1.0\n[path.downlink]\nrate_bps = {rate_bps}\ndelay_ms = {one_way_ms}\n\
             base_rtt_ms = {}\n[path.downlink.queue]\nlimit_bdp = 1.0\n",
            rtt_ms, rtt_ms
        ),
    )?;
    let bytes = (rate_mbps * 1e6 / 8.0 * transfer_s) as u64;
    println!(
        "\n# whole process: the edge's CPU for one {bytes}-byte HTTP/3 download over an emulated {} Mbit/s, {} ms path \
         (about {} s at line rate)",
        rate_mbps, rtt_ms, transfer_s
    );
    println!("\n| edge | transfer s | edge CPU s | CPU s per GB |");
    println!("|---|---:|---:|---:|");
    let mut cpu = Vec::new();
    for (i, (label, flags)) in variants.iter().enumerate() {
        let metrics = d.join(format!("metrics-{i}.txt"));
        let done = d.join(format!("done-{i}.txt"));
        let server = format!(
            "exec {exe} edge --listen 10.0.0.1:4433 --admin 10.0.0.1:9100 --cert {} --key {} {flags} --max-bytes {bytes}",
            cert.display(),
            key.display()
        );
        // The request's own bound (default 60 s) must outlast a transfer of about
        // `transfer_s` at line rate; the emulator run's bound is the same.
        let bound = transfer_s * 3.0 + 30.0;
        let client = format!(
            "start=$(date +%s.%N); {exe} get --proto quic --insecure --timeout-s {bound} https://10.0.0.1:4433/bytes/{bytes} > /dev/null && \
             end=$(date +%s.%N) && curl -sf http://10.0.0.1:9100/metrics > {} && echo \"$start $end\" > {}",
            metrics.display(),
            done.display()
        );
        let status = std::process::Command::new(std::env::current_exe()?)
            .args(["emu", "--config"])
            .arg(d.join("emu.toml"))
            .args(["--ready-ports", "4433/udp,9100/tcp", "--duration-s"])
            .arg(format!("{bound}"))
            .args(["--server", &server, "--client", &client])
            .status()
            .context("cannot run gearbox emu")?;
        if !status.success() {
            bail!("the emulated transfer with the edge's {label} failed ({status})");
        }
        let text = std::fs::read_to_string(&metrics).with_context(|| format!("{}", metrics.display()))?;
        let secs: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("process_cpu_seconds_total "))
            .and_then(|v| v.trim().parse().ok())
            .context("the edge's /metrics has no process_cpu_seconds_total")?;
        let times = std::fs::read_to_string(&done)?;
        let t: Vec<f64> = times.split_whitespace().filter_map(|v| v.parse().ok()).collect();
        let transfer = t.get(1).zip(t.first()).map_or(f64::NAN, |(e, s)| e - s);
        println!(
            "| {label} | {transfer:.1} | {secs:.2} | {:.2} |",
            secs / (bytes as f64 / 1e9)
        );
        cpu.push(secs);
    }
    Ok(cpu)
}
