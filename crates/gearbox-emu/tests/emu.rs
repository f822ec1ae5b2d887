//! Emulator tests against real kernel stacks: iperf3 and UDP probes between a
//! server and a client namespace. They need root, /dev/net/tun and iperf3
//! (`scripts/setup.sh` installs it) and fail — never skip — without them.
//!
//! They run one at a time (a shared lock): throughput and delay checks on a
//! 2-core machine must not compete with each other. Each test makes its own
//! namespaces (unique names) and the `Emulator` guard removes them even when
//! the test panics.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gearbox_emu::probe::{ms, CpuLoad};
use gearbox_emu::{EmuConfig, Emulator, EmulatorOptions, RunOptions, Side};

mod common;

use common::{config, gearbox_bin, netns_list, scratch, setup, single};

/// Runs `iperf3 -s -1` in the server namespace and `iperf3 -c ... -J <args>`
/// in the client namespace through the full `gearbox emu` sequence; returns
/// the client's JSON report.
fn iperf(cfg: &EmuConfig, client_args: &str, name: &str) -> serde_json::Value {
    let dir = scratch(name);
    let out = dir.join("iperf.json");
    let options = RunOptions {
        server: Some("exec iperf3 -s -1 >/dev/null".into()),
        client: Some(format!(
            "exec iperf3 -c \"$GEARBOX_SERVER_ADDR\" -J {client_args} > {}",
            out.display()
        )),
        duration: Some(Duration::from_secs(60)),
        ready_ports: vec!["5201/tcp".parse().unwrap()],
        ..RunOptions::default()
    };
    let outcome = gearbox_emu::run(cfg, &options).unwrap_or_else(|e| panic!("emu run: {e}"));
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    assert_eq!(outcome.exit_code, 0, "iperf3 client failed: {text}");
    assert!(
        !netns_list().contains(&outcome.name),
        "namespaces of {} left behind",
        outcome.name
    );
    let _ = std::fs::remove_dir_all(&dir);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("iperf3 JSON: {e}: {text}"))
}

fn received_bps(report: &serde_json::Value) -> f64 {
    report["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or_else(|| panic!("no end.sum_received in {report}"))
}

/// TCP payload per 1500-byte packet with timestamps: 1500 - 20 (IP) - 20 (TCP) - 12 (options).
const TCP_GOODPUT_FRACTION: f64 = 1448.0 / 1500.0;

#[test]
fn tcp_goodput_is_the_link_rate_less_headers_at_10_and_50_mbit() {
    let _g = setup();
    for mbit in [10u64, 50] {
        let cfg = single(&format!(
            "rate_bps = {}\ndelay_ms = 5.0\n[path.{{dir}}.queue]\nlimit_packets = 200",
            mbit * 1_000_000
        ));
        let report = iperf(&cfg, "-t 5 -O 1", &format!("goodput{mbit}"));
        let got = received_bps(&report);
        let want = mbit as f64 * 1e6 * TCP_GOODPUT_FRACTION;
        eprintln!(
            "{mbit} Mbit/s link: TCP goodput {:.3} Mbit/s, expected {:.3}",
            got / 1e6,
            want / 1e6
        );
        assert!(
            (got - want).abs() <= 0.05 * want,
            "{mbit} Mbit/s: got {got} bit/s, want {want} ± 5%"
        );
    }
}

/// Puts the calling thread under SCHED_FIFO, like the relay. The probe and
/// echo threads stand in for ping, whose echo is answered by the kernel in
/// softirq: on a busy 2-core machine an ordinary thread can wake milliseconds
/// late, which would measure the scheduler instead of the emulated path.
/// Round-trip times (ms) of `count` UDP echo probes from each client address
/// ([`gearbox_emu::probe`]: SCHED_FIFO probe and echo threads, like a kernel's
/// ping reply).
fn udp_rtts(emu: &Emulator, count: usize, gap: Duration) -> Vec<Vec<f64>> {
    gearbox_emu::probe::udp_echo_probes(emu, count, gap)
        .unwrap_or_else(|e| panic!("{e}"))
        .iter()
        .map(|v| v.iter().map(|p| ms(p.rtt())).collect())
        .collect()
}

/// How far above the configured round trip a median may be on a single path
/// or a multipath client (the bound these tests had before the emulator
/// compensated its hops). After compensation the medians measured here are
/// 0.07-0.46 ms above (docs/emu.md "Delay bias"); what is left is the spread
/// of the end hosts' own costs, which the same threads also pay over loopback
/// ([`loopback_floor_ms`], printed beside every figure).
const MEDIAN_TOLERANCE_MS: f64 = 0.5;
/// The same for a population, whose round trip crosses four links and so four
/// relay hops (was 1.0 ms).
const POPULATION_MEDIAN_TOLERANCE_MS: f64 = 0.75;

/// Median RTT (ms) of UDP echo probes over loopback between the probe and echo
/// threads the emulated probes use, the answer held 10 ms so both sleep as
/// long as behind a link (the hold is left out).
fn loopback_floor_ms() -> f64 {
    let probes = gearbox_emu::probe::loopback_echo_probes(20, Duration::from_millis(5), Duration::from_millis(10))
        .unwrap_or_else(|e| panic!("{e}"));
    median(&probes.iter().map(|p| ms(p.network())).collect::<Vec<_>>())
}

/// Asserts every address's RTTs: none early, the median at most `tolerance_ms`
/// above the configured RTT.
fn assert_rtts(
    what: &str,
    rtts: &[Vec<f64>],
    want_ms: &[f64],
    tolerance_ms: f64,
    floor_ms: f64,
    hops: &gearbox_emu::calibrate::HopCompensation,
) {
    for (a, (r, want)) in rtts.iter().zip(want_ms).enumerate() {
        let min = r.iter().copied().fold(f64::INFINITY, f64::min);
        let med = median(r);
        eprintln!(
            "{what} address {a}: configured RTT {want} ms, min {min:.3} ms, median {med:.3} ms; \
             loopback floor {floor_ms:.3} ms ({hops:?})"
        );
        assert!(
            min >= *want,
            "{what} address {a}: a probe came back early: {min:.3} ms < {want} ms ({hops:?})"
        );
        assert!(
            med - want <= tolerance_ms,
            "{what} address {a}: median RTT {med:.3} ms, want at most {want} + {tolerance_ms} ms \
             (loopback floor {floor_ms:.3} ms) ({hops:?})"
        );
    }
}

fn median(v: &[f64]) -> f64 {
    gearbox_dataplane::stats::median(v).expect("at least one probe answered")
}

#[test]
fn round_trip_time_is_twice_the_one_way_delay() {
    let _g = setup();
    let floor = loopback_floor_ms();
    let dir = scratch("rtt");
    let events = dir.join("events.jsonl");
    let options = EmulatorOptions {
        events: Some(events.clone()),
        ..Default::default()
    };
    let emu = Emulator::start(&single("rate_bps = 100_000_000\ndelay_ms = 20.0"), &options).unwrap();
    let rtts = udp_rtts(&emu, 40, Duration::from_millis(20));
    assert_rtts(
        "single 2 x 20 ms",
        &rtts,
        &[40.0],
        MEDIAN_TOLERANCE_MS,
        floor,
        &emu.hop_compensation(),
    );
    let name = emu.name().to_string();
    let report = emu.stop().unwrap();
    assert_eq!(report.links[0].stats.delivered_packets, 40);
    assert!(report.events_error.is_none());
    assert_eq!(report.unroutable_packets, 0, "calibration probes never reach the links");
    assert!(report.calibration_probes > 0);
    assert!(!netns_list().contains(&name), "namespaces left after stop");

    // The event log: one JSON object per line; every probe enqueued and
    // delivered once per direction, 20 ms after it left the bottleneck.
    let text = std::fs::read_to_string(&events).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    for (dir, event) in [
        ("up", "enqueue"),
        ("up", "deliver"),
        ("down", "enqueue"),
        ("down", "deliver"),
    ] {
        let n = lines
            .iter()
            .filter(|e| e["dir"] == dir && e["event"] == event && e["link"] == "path0")
            .count();
        assert_eq!(n, 40, "{dir} {event} events");
    }
    for e in lines.iter().filter(|e| e["event"] == "deliver") {
        let held = e["t_us"].as_u64().unwrap() - e["departed_us"].as_u64().unwrap();
        assert_eq!(held, 20_000, "{e}");
        assert_eq!(e["len"], 32, "{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn measured_loss_is_inside_the_binomial_99_percent_interval() {
    let _g = setup();
    let p = 0.1;
    let n = 4000u32;
    let cfg = config(&format!(
        "topology = \"single\"\n[[path]]\n[path.uplink]\nrate_bps = 100_000_000\ndelay_ms = 2.0\n\
         loss = {{ model = \"bernoulli\", loss_rate = {p} }}\n[path.downlink]\nrate_bps = 100_000_000\n"
    ));
    let emu = Emulator::start(
        &cfg,
        &EmulatorOptions {
            seed: 7,
            ..Default::default()
        },
    )
    .unwrap();
    let server_addr = SocketAddr::from((emu.server_addr(), 7008));
    let rx = emu
        .in_namespace(Side::Server, || UdpSocket::bind(server_addr))
        .unwrap()
        .unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let counter = std::thread::spawn(move || {
        let mut got = 0u32;
        let mut buf = [0u8; 2048];
        while rx.recv_from(&mut buf).is_ok() {
            got += 1;
        }
        got
    });
    let client = emu.client_addrs()[0];
    let tx = emu
        .in_namespace(Side::Client, || UdpSocket::bind((client, 0)))
        .unwrap()
        .unwrap();
    let payload = [0u8; 200];
    let start = Instant::now();
    for i in 0..n {
        tx.send_to(&payload, server_addr).unwrap();
        // ~4000 packets/s: far below the link rate, so only the loss stage drops.
        let due = start + Duration::from_micros(250 * u64::from(i + 1));
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    let received = counter.join().unwrap();
    let report = emu.stop().unwrap();
    let lost = n - received;
    let mean = f64::from(n) * p;
    let half = 2.576 * (f64::from(n) * p * (1.0 - p)).sqrt();
    eprintln!(
        "loss {p}: lost {lost} of {n}; 99% interval {:.0} ..= {:.0}",
        mean - half,
        mean + half
    );
    assert!((f64::from(lost) - mean).abs() <= half, "lost {lost} of {n}");
    let up = &report.links[0].stats;
    assert_eq!(
        up.loss_drops,
        u64::from(lost),
        "every missing packet was a loss-stage drop"
    );
    assert_eq!(up.queue_drops, 0);
}

#[test]
fn a_step_trace_changes_throughput_when_it_steps() {
    let _g = setup();
    let dir = scratch("step");
    let trace = dir.join("step.trace");
    gearbox_link::tracegen::step(50e6, 10e6, 4.0, 60.0)
        .unwrap()
        .write_file(&trace)
        .unwrap();
    let link = |t: &Path| format!("trace_file = \"{}\"\ndelay_ms = 5.0", t.display());
    let cfg = config(&format!(
        "topology = \"single\"\n[[path]]\n[path.uplink]\nrate_bps = 100_000_000\ndelay_ms = 5.0\n\
         [path.downlink]\n{}\n[path.downlink.queue]\nlimit_packets = 200\n",
        link(&trace)
    ));
    // -R: the server sends, so the client's intervals are measured at the receiver.
    let report = iperf(&cfg, "-R -t 8 -i 1", "step-iperf");
    let mbps: Vec<f64> = report["intervals"]
        .as_array()
        .expect("intervals")
        .iter()
        .map(|i| i["sum"]["bits_per_second"].as_f64().unwrap_or(0.0) / 1e6)
        .collect();
    eprintln!("per-second Mbit/s across the 50 -> 10 step at t = 4 s: {mbps:.1?}");
    assert!(mbps.len() >= 8, "{mbps:?}");
    let (before, after) = (50.0 * TCP_GOODPUT_FRACTION, 10.0 * TCP_GOODPUT_FRACTION);
    // Means over whole seconds clear of the step (iperf3 starts a few hundred ms
    // after the links' time zero): a receiver's 1-s intervals jitter by a few
    // percent when its wake-ups slip across a boundary.
    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
    let (m_before, m_after) = (mean(&mbps[1..3]), mean(&mbps[5..8]));
    assert!(
        (m_before - before).abs() <= 0.1 * before,
        "before the step: {m_before} Mbit/s in {mbps:?}"
    );
    assert!(
        (m_after - after).abs() <= 0.1 * after,
        "after the step: {m_after} Mbit/s in {mbps:?}"
    );
    for &m in &mbps[5..8] {
        assert!(m < 0.5 * before, "still fast after the step: {mbps:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_udp_policer_throttles_udp_but_not_tcp() {
    let _g = setup();
    let cfg = single(
        "rate_bps = 20_000_000\ndelay_ms = 5.0\n[path.{dir}.queue]\nlimit_packets = 200\n\
         [path.{dir}.policer]\naction = \"rate_limit\"\nprotocol = \"udp\"\nrate_bps = 2_000_000\nburst_bytes = 15_000",
    );
    let emu = Emulator::start(&cfg, &EmulatorOptions::default()).unwrap();
    let mut server = emu.command(Side::Server, "exec iperf3 -s >/dev/null").spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !emu.bound_ports(Side::Server).unwrap().0.contains(&5201) {
        assert!(Instant::now() < deadline, "iperf3 -s did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    let client = |args: &str| -> serde_json::Value {
        let out = emu
            .command(
                Side::Client,
                &format!("exec iperf3 -c \"$GEARBOX_SERVER_ADDR\" -J {args}"),
            )
            .stdout(Stdio::piped())
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("iperf3 JSON: {e}"))
    };
    let udp = client("-u -b 10M -t 4");
    let udp_bps = received_bps(&udp);
    let tcp = client("-t 4 -O 1");
    let tcp_bps = received_bps(&tcp);
    eprintln!(
        "UDP at 10 Mbit/s through a 2 Mbit/s UDP policer: {:.2} Mbit/s; TCP: {:.2} Mbit/s",
        udp_bps / 1e6,
        tcp_bps / 1e6
    );
    assert!(
        (1.4e6..=2.3e6).contains(&udp_bps),
        "UDP got {udp_bps} bit/s through a 2 Mbit/s policer"
    );
    let tcp_want = 20e6 * TCP_GOODPUT_FRACTION;
    assert!(
        tcp_bps >= 0.9 * tcp_want,
        "TCP got {tcp_bps} bit/s, want about {tcp_want}"
    );
    let _ = server.kill();
    let _ = server.wait();
    let report = emu.stop().unwrap();
    assert!(report.links[0].stats.policer_drops > 0);
}

/// Two /24s of two hosts, at 10 and 40 ms each way, behind a shared 1 ms access path.
fn population_config() -> EmuConfig {
    config(
        r#"
topology = "population"
[population]
prefixes = 2
hosts_per_prefix = 2
[population.uplink]
rate_bps = 50_000_000
delay_ms = 10.0
[population.downlink]
rate_bps = 50_000_000
delay_ms = 10.0
[[population.prefix]]
index = 1
[population.prefix.uplink]
delay_ms = 40.0
[population.prefix.downlink]
delay_ms = 40.0
[[path]]
name = "access"
[path.uplink]
rate_bps = 100_000_000
delay_ms = 1.0
[path.downlink]
rate_bps = 100_000_000
delay_ms = 1.0
"#,
    )
}

/// Two paths: `wifi` 2 x 5 ms, `lte` 2 x 30 ms.
fn multipath_config() -> EmuConfig {
    let path = |name: &str, ms: f64| {
        format!(
            "[[path]]\nname = \"{name}\"\n[path.uplink]\nrate_bps = 30_000_000\ndelay_ms = {ms}\n\
             [path.downlink]\nrate_bps = 30_000_000\ndelay_ms = {ms}\n"
        )
    };
    config(&format!(
        "topology = \"multipath\"\n{}{}",
        path("wifi", 5.0),
        path("lte", 30.0)
    ))
}

/// Probes single paths of 10 and 200 ms RTT (the ends of the range the lab uses).
fn short_and_long_single_paths_are_exact(what: &str, floor: f64) {
    for rtt in [10.0, 200.0] {
        let cfg = single(&format!("rate_bps = 100_000_000\ndelay_ms = {}", rtt / 2.0));
        let emu = Emulator::start(&cfg, &EmulatorOptions::default()).unwrap();
        let rtts = udp_rtts(&emu, 20, Duration::from_millis(5));
        assert_rtts(
            &format!("{what}single {rtt} ms"),
            &rtts,
            &[rtt],
            MEDIAN_TOLERANCE_MS,
            floor,
            &emu.hop_compensation(),
        );
    }
}

#[test]
fn short_and_long_round_trips_are_exact() {
    let _g = setup();
    short_and_long_single_paths_are_exact("", loopback_floor_ms());
}

#[test]
fn round_trips_stay_exact_while_another_process_keeps_both_cores_busy() {
    let _g = setup();
    let _load = CpuLoad::start().expect("start two CPU-bound sh processes");
    let floor = loopback_floor_ms();
    short_and_long_single_paths_are_exact("loaded, ", floor);
    let emu = Emulator::start(&multipath_config(), &EmulatorOptions::default()).unwrap();
    let rtts = udp_rtts(&emu, 20, Duration::from_millis(5));
    assert_rtts(
        "loaded, multipath",
        &rtts,
        &[10.0, 60.0],
        MEDIAN_TOLERANCE_MS,
        floor,
        &emu.hop_compensation(),
    );
    drop(emu);
    population_rtts_are_exact("loaded, population", floor);
}

/// Probes both prefixes of [`population_config`] (two hosts each) and asserts
/// their RTTs: prefix 0 at 2 x (10 + 1) ms, prefix 1 at 2 x (40 + 1) ms, across
/// four links a round trip.
fn population_rtts_are_exact(what: &str, floor: f64) {
    let emu = Emulator::start(&population_config(), &EmulatorOptions::default()).unwrap();
    assert_eq!(emu.client_addrs().len(), 4);
    let rtts = udp_rtts(&emu, 20, Duration::from_millis(5));
    assert_rtts(
        what,
        &rtts,
        &[22.0, 22.0, 82.0, 82.0],
        POPULATION_MEDIAN_TOLERANCE_MS,
        floor,
        &emu.hop_compensation(),
    );
}

#[test]
fn population_prefixes_see_their_own_delays() {
    let _g = setup();
    population_rtts_are_exact("population", loopback_floor_ms());
}

#[test]
fn a_server_that_exits_or_never_listens_stops_the_run_with_an_error() {
    let _g = setup();
    let cfg = single("rate_bps = 10_000_000");
    let options = RunOptions {
        server: Some("exit 2".into()),
        client: Some("exit 0".into()),
        ..RunOptions::default()
    };
    let e = gearbox_emu::run(&cfg, &options).unwrap_err().to_string();
    assert!(e.contains("exited") && e.contains("before it was ready"), "{e}");
    let options = RunOptions {
        server: Some("exec sleep 30".into()),
        client: Some("exit 0".into()),
        ready_timeout: Duration::from_millis(300),
        ..RunOptions::default()
    };
    let e = gearbox_emu::run(&cfg, &options).unwrap_err().to_string();
    assert!(e.contains("not ready after 0.3 s"), "{e}");
    // A UDP server counts as ready once it has bound its port.
    let options = RunOptions {
        server: Some("exec python3 -c 'import socket,time; time.sleep(0.3); s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((\"0.0.0.0\", 4433)); time.sleep(30)'".into()),
        client: Some("exit 5".into()),
        ready_ports: vec!["4433/udp".parse().unwrap()],
        ..RunOptions::default()
    };
    let outcome = gearbox_emu::run(&cfg, &options).unwrap();
    assert_eq!(outcome.exit_code, 5, "the client's exit code is the run's");
    assert!(!netns_list().contains(&outcome.name));
}

#[test]
fn multipath_client_addresses_take_their_own_paths() {
    let _g = setup();
    let floor = loopback_floor_ms();
    let cfg = multipath_config();
    let emu = Emulator::start(&cfg, &EmulatorOptions::default()).unwrap();
    assert_eq!(
        emu.client_addrs(),
        [
            "100.64.0.1".parse::<std::net::Ipv4Addr>().unwrap(),
            "100.64.1.1".parse().unwrap()
        ]
    );
    let rtts = udp_rtts(&emu, 20, Duration::from_millis(5));
    assert_rtts(
        "multipath",
        &rtts,
        &[10.0, 60.0],
        MEDIAN_TOLERANCE_MS,
        floor,
        &emu.hop_compensation(),
    );
    let report = emu.stop().unwrap();
    let labels: Vec<_> = report
        .links
        .iter()
        .map(|l| (l.label.as_str(), l.dir.as_str()))
        .collect();
    assert_eq!(
        labels,
        [("wifi", "up"), ("wifi", "down"), ("lte", "up"), ("lte", "down")]
    );
    assert!(report.links.iter().all(|l| l.stats.delivered_packets == 20));
}

/// Not a test on its own: the child of `a_killed_run_leaves_no_namespace_behind`.
#[test]
#[ignore = "helper: run by a_killed_run_leaves_no_namespace_behind"]
fn helper_hold_an_emulator_until_killed() {
    if std::env::var_os("GEARBOX_EMU_TEST_HELPER").is_none() {
        return;
    }
    let emu = Emulator::start(&single("rate_bps = 10_000_000"), &EmulatorOptions::default()).unwrap();
    let mut sleeper = emu.command(Side::Server, "exec sleep 600").spawn().unwrap();
    println!("GBX-HELD {} {} {}", emu.server_ns(), emu.client_ns(), sleeper.id());
    std::thread::sleep(Duration::from_secs(60));
    // Only reached if nobody killed us: clean up like a normal run.
    let _ = sleeper.kill();
    let _ = sleeper.wait();
}

#[test]
fn a_killed_run_leaves_no_namespace_behind() {
    let _g = setup();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "helper_hold_an_emulator_until_killed",
            "--ignored",
            "--nocapture",
        ])
        .env("GEARBOX_EMU_TEST_HELPER", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut held = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("GBX-HELD ") {
            held = Some(rest.split_whitespace().map(str::to_string).collect::<Vec<_>>());
            break;
        }
    }
    let held = held.expect("the helper printed its namespaces");
    assert!(netns_list().contains(&held[0]), "helper namespaces exist while it runs");
    child.kill().unwrap(); // SIGKILL: no destructor runs
    child.wait().unwrap();
    let sleeper = format!("/proc/{}", held[2]);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let list = netns_list();
        let gone = !list.contains(&held[0]) && !list.contains(&held[1]) && !Path::new(&sleeper).exists();
        if gone {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "5 s after SIGKILL: namespaces {list:?}, server process alive: {}",
            Path::new(&sleeper).exists()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The CLI contract, when the test runner says where the binary is
/// (`scripts/test.sh` sets GEARBOX_BIN).
#[test]
fn the_cli_returns_the_client_exit_code_and_cleans_up_after_sigkill() {
    let _g = setup();
    let bin = gearbox_bin();
    let dir = scratch("cli");
    let cfg = dir.join("emu.toml");
    std::fs::write(
        &cfg,
        "topology = \"single\"\n[[path]]\n[path.uplink]\nrate_bps = 10_000_000\n[path.downlink]\nrate_bps = 10_000_000\n",
    )
    .unwrap();
    let status = Command::new(&bin)
        .args(["emu", "--config"])
        .arg(&cfg)
        .args(["--client", "test \"$GEARBOX_SERVER_ADDR\" = 10.0.0.1 && exit 3"])
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(3));
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "topology = \"single\"\n[[path]]\n[path.uplink]\nrate_bps = 0\n[path.downlink]\nrate_bps = 1\n",
    )
    .unwrap();
    let out = Command::new(&bin).args(["emu", "--config"]).arg(&bad).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        err.contains("line 3") && err.contains("path[0].uplink.rate_bps"),
        "{err}"
    );

    let before = netns_list();
    let mut child = Command::new(&bin)
        .args(["emu", "--config"])
        .arg(&cfg)
        .args(["--duration-s", "60"])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let ours = format!("gbx{}x", child.id());
    while !netns_list().contains(&ours) {
        assert!(Instant::now() < deadline, "gearbox emu did not create its namespaces");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while netns_list().contains(&ours) {
        assert!(
            Instant::now() < deadline,
            "namespaces {ours}* left 5 s after SIGKILL: {}",
            netns_list()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!before.contains(&ours));
    let _ = std::fs::remove_dir_all(&dir);
}
