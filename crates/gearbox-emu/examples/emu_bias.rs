//! Delay-bias benchmark (not a test): how much longer than configured the round
//! trips through the emulator are, and where the extra time goes.
//!
//! `cargo run --release -p gearbox-emu --example emu_bias [--load] [--uncompensated] [--count N] [CASE...]`
//! (root). `--uncompensated` runs with `relay.compensate_hops = false`, the
//! relay as it was before hop compensation (packets stamped when read, written
//! when due), for the before/after figures in docs/emu.md. CASE is `single-10`, `single-40`, `single-100`, `single-200`,
//! `multipath` (2 x 5 ms and 2 x 30 ms) or `population` (prefixes at 22 and
//! 82 ms RTT behind a shared access path); default all. `--load` keeps both
//! cores busy with two spinning child processes (`sh -c 'while :; do :; done'`,
//! normal priority) while it measures.
//!
//! For each address it sends N UDP echo probes (default 60, 10 ms apart) with
//! [`gearbox_emu::probe`] and prints the round trip's excess over the configured
//! RTT (min, median, p90, max) and the median of each hop of that excess,
//! matched against the relay's event log:
//! - `in`: the application's `send_to` until the relay read the packet (TUN
//!   queue, relay wake-up), counted from the relay's enqueue time;
//! - `link`: enqueue to scheduled delivery, less the configured delay
//!   (serialisation, and on chained links the middle hop);
//! - `out`: scheduled delivery until the receiving application has the packet
//!   (relay timer lateness, the TUN write, the receiver's wake-up);
//! - `echo`: the echo thread's turnaround.

use std::time::Duration;

use gearbox_emu::probe::{ms, udp_echo_probes, CpuLoad, ProbeTimes};
use gearbox_emu::{EmuConfig, Emulator, EmulatorOptions};

struct Case {
    name: &'static str,
    toml: String,
    /// Configured RTT of each client address, ms.
    rtt_ms: Vec<f64>,
    /// Link labels where a probe enters (up) and leaves (up) the relay, by address.
    up_entry: Vec<String>,
    up_exit: Vec<String>,
}

fn link(dir: &str, prefix: &str, rate: &str, delay_ms: f64) -> String {
    format!("[{prefix}.{dir}]\nrate_bps = {rate}\ndelay_ms = {delay_ms}\n")
}

fn path(name: &str, one_way_ms: f64) -> String {
    format!(
        "[[path]]\nname = \"{name}\"\n{}{}",
        link("uplink", "path", "100_000_000", one_way_ms),
        link("downlink", "path", "100_000_000", one_way_ms)
    )
}

fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    for rtt in [10.0, 40.0, 100.0, 200.0] {
        v.push(Case {
            name: match rtt as u32 {
                10 => "single-10",
                40 => "single-40",
                100 => "single-100",
                _ => "single-200",
            },
            toml: format!("topology = \"single\"\n{}", path("path0", rtt / 2.0)),
            rtt_ms: vec![rtt],
            up_entry: vec!["path0".into()],
            up_exit: vec!["path0".into()],
        });
    }
    v.push(Case {
        name: "multipath",
        toml: format!("topology = \"multipath\"\n{}{}", path("wifi", 5.0), path("lte", 30.0)),
        rtt_ms: vec![10.0, 60.0],
        up_entry: vec!["wifi".into(), "lte".into()],
        up_exit: vec!["wifi".into(), "lte".into()],
    });
    v.push(Case {
        name: "population",
        toml: format!(
            "topology = \"population\"\n[population]\nprefixes = 2\nhosts_per_prefix = 2\n{}{}\
             [[population.prefix]]\nindex = 1\n[population.prefix.uplink]\ndelay_ms = 40.0\n\
             [population.prefix.downlink]\ndelay_ms = 40.0\n{}",
            link("uplink", "population", "50_000_000", 10.0),
            link("downlink", "population", "50_000_000", 10.0),
            path("access", 1.0)
        ),
        rtt_ms: vec![22.0, 22.0, 82.0, 82.0],
        up_entry: vec!["prefix0".into(), "prefix0".into(), "prefix1".into(), "prefix1".into()],
        up_exit: vec!["access".into(); 4],
    });
    v
}

/// The relay's view of one probe: enqueue and scheduled delivery, each way (µs).
#[derive(Debug, Default, Clone, Copy)]
struct RelayTimes {
    up_enqueue: u64,
    up_due: u64,
    down_enqueue: u64,
    down_due: u64,
}

/// Walks the event log in time order. Probes are strictly one at a time, so the
/// k-th probe's events are the k-th of each kind on its entry and exit links.
fn relay_times(events: &str, case: &Case, per_address: usize) -> Result<Vec<RelayTimes>, String> {
    let mut parsed: Vec<serde_json::Value> = Vec::new();
    for (i, line) in events.lines().enumerate() {
        parsed.push(serde_json::from_str(line).map_err(|e| format!("event log line {}: {e}", i + 1))?);
    }
    let n = case.rtt_ms.len() * per_address;
    let mut out = vec![RelayTimes::default(); n];
    let pick = |dir: &str, event: &str, labels: &dyn Fn(usize) -> String| -> Result<Vec<u64>, String> {
        let mut found = Vec::new();
        let mut k = 0;
        for e in &parsed {
            if k == n {
                break;
            }
            if e["dir"] == dir && e["event"] == event && e["link"] == labels(k / per_address).as_str() {
                let t = e["t_us"].as_u64().ok_or("event without t_us")?;
                found.push(t);
                k += 1;
            }
        }
        if found.len() != n {
            return Err(format!("{dir} {event}: {} events for {n} probes", found.len()));
        }
        Ok(found)
    };
    let entry = |a: usize| case.up_entry[a].clone();
    let exit = |a: usize| case.up_exit[a].clone();
    for (k, t) in pick("up", "enqueue", &entry)?.into_iter().enumerate() {
        out[k].up_enqueue = t;
    }
    for (k, t) in pick("up", "deliver", &exit)?.into_iter().enumerate() {
        out[k].up_due = t;
    }
    for (k, t) in pick("down", "enqueue", &exit)?.into_iter().enumerate() {
        out[k].down_enqueue = t;
    }
    for (k, t) in pick("down", "deliver", &entry)?.into_iter().enumerate() {
        out[k].down_due = t;
    }
    Ok(out)
}

/// The `q` quantile (0..=1) of `v`, by the project's one percentile definition
/// (docs/telemetry.md "Percentiles").
fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    gearbox_dataplane::stats::percentile(v, q * 100.0).unwrap_or(f64::NAN)
}

fn run_case(case: &Case, count: usize, uncompensated: bool) -> Result<(), String> {
    let toml = if uncompensated {
        format!("{}\n[relay]\ncompensate_hops = false\n", case.toml)
    } else {
        case.toml.clone()
    };
    let cfg = EmuConfig::from_toml_str(&toml, case.name, None).map_err(|e| e.to_string())?;
    let scratch = tempfile::tempdir().map_err(|e| format!("scratch folder: {e}"))?;
    let log = scratch.path().join("events.jsonl");
    let options = EmulatorOptions {
        events: Some(log.clone()),
        ..Default::default()
    };
    let emu = Emulator::start(&cfg, &options).map_err(|e| e.to_string())?;
    let probes = udp_echo_probes(&emu, count, Duration::from_millis(10)).map_err(|e| e.to_string())?;
    let report = emu.stop().map_err(|e| e.to_string())?;
    let h = report.hop_compensation;
    println!(
        "{:<11} compensation µs: out towards client {:.0}, towards server {:.0} (applied unless --uncompensated); \
         mean TUN wait {:.0} µs ({} tapped, {} untapped packets, {} calibration probes)",
        case.name,
        h.client_out.as_secs_f64() * 1e6,
        h.server_out.as_secs_f64() * 1e6,
        report.mean_tun_wait.as_secs_f64() * 1e6,
        report.tapped_arrivals,
        report.untapped_arrivals,
        report.calibration_probes
    );
    let text = std::fs::read_to_string(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let relay = relay_times(&text, case, count)?;
    for (a, (want, ps)) in case.rtt_ms.iter().zip(&probes).enumerate() {
        let us = |d: Duration| d.as_micros() as f64;
        let rows: Vec<(&ProbeTimes, &RelayTimes)> = ps.iter().zip(&relay[a * count..(a + 1) * count]).collect();
        let mut excess: Vec<f64> = ps.iter().map(|p| ms(p.rtt()) - want).collect();
        // "median/min" of one hop over the probes.
        let col = |f: &dyn Fn(&ProbeTimes, &RelayTimes) -> f64| {
            let mut v: Vec<f64> = rows.iter().map(|(p, r)| f(p, r)).collect();
            format!("{:.0}/{:.0}", quantile(&mut v, 0.5), quantile(&mut v, 0.0))
        };
        let one_way_us = want * 500.0;
        let in_up = col(&|p, r| r.up_enqueue as f64 - us(p.sent));
        let link_up = col(&|_, r| (r.up_due - r.up_enqueue) as f64 - one_way_us);
        let out_up = col(&|p, r| us(p.echo_received) - r.up_due as f64);
        let echo = col(&|p, _| us(p.echo_sent) - us(p.echo_received));
        let in_down = col(&|p, r| r.down_enqueue as f64 - us(p.echo_sent));
        let link_down = col(&|_, r| (r.down_due - r.down_enqueue) as f64 - one_way_us);
        let out_down = col(&|p, r| us(p.received) - r.down_due as f64);
        println!(
            "{:<11} {:>2} {:>6.1} | {:>7.3} {:>7.3} {:>7.3} {:>7.3} | up in {:>7} link {:>5} out {:>7} | echo {:>5} | down in {:>7} link {:>5} out {:>7}",
            case.name,
            a,
            want,
            quantile(&mut excess, 0.0),
            quantile(&mut excess, 0.5),
            quantile(&mut excess, 0.9),
            quantile(&mut excess, 1.0),
            in_up,
            link_up,
            out_up,
            echo,
            in_down,
            link_down,
            out_down
        );
    }
    Ok(())
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let load = args.iter().any(|a| a == "--load");
    let uncompensated = args.iter().any(|a| a == "--uncompensated");
    args.retain(|a| a != "--load" && a != "--uncompensated");
    let mut count = 60;
    if let Some(i) = args.iter().position(|a| a == "--count") {
        count = args.get(i + 1).and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            eprintln!("--count needs a number");
            std::process::exit(2)
        });
        args.drain(i..=i + 1);
    }
    let all = cases();
    let chosen: Vec<&Case> = if args.is_empty() {
        all.iter().collect()
    } else {
        let mut v = Vec::new();
        for a in &args {
            match all.iter().find(|c| c.name == a) {
                Some(c) => v.push(c),
                None => {
                    let names: Vec<_> = all.iter().map(|c| c.name).collect();
                    eprintln!("unknown case {a:?}; cases: {}", names.join(", "));
                    std::process::exit(2);
                }
            }
        }
        v
    };
    let _load = load.then(|| {
        CpuLoad::start().unwrap_or_else(|e| {
            eprintln!("cannot start the CPU load: {e}");
            std::process::exit(1)
        })
    });
    println!(
        "excess RTT over configured, ms ({count} probes per address{}{}); hops as median/min in µs",
        if load { ", both cores loaded" } else { ", idle" },
        if uncompensated { ", hop compensation off" } else { "" }
    );
    println!(
        "{:<11} {:>2} {:>6} | {:>7} {:>7} {:>7} {:>7} |",
        "case", "a", "rtt", "min", "median", "p90", "max"
    );
    let mut floor: Vec<f64> =
        gearbox_emu::probe::loopback_echo_probes(count, Duration::from_millis(10), Duration::from_millis(10))
            .unwrap_or_else(|e| {
                eprintln!("loopback floor: {e}");
                std::process::exit(1)
            })
            .iter()
            .map(|p| ms(p.network()))
            .collect();
    println!(
        "{:<11} {:>2} {:>6} | {:>7.3} {:>7.3} {:>7.3} {:>7.3} | the same two threads over loopback, answer held 10 ms (held time left out)",
        "floor",
        "-",
        "0",
        quantile(&mut floor, 0.0),
        quantile(&mut floor, 0.5),
        quantile(&mut floor, 0.9),
        quantile(&mut floor, 1.0)
    );
    for c in chosen {
        if let Err(e) = run_case(c, count, uncompensated) {
            eprintln!("{}: {e}", c.name);
            std::process::exit(1);
        }
    }
}
