//! The congestion-control suite on the emulator (issue "Validation", docs/cc.md): our
//! edge serves one HTTP/3 download with each of the suite's controllers over an emulated
//! bottleneck, and the relay's own event log says how busy the bottleneck was and how
//! long packets queued there. Needs root and /dev/net/tun, like every emulator test.
//!
//! Utilisation is counted where it happens: the bytes that left the downlink's
//! bottleneck (`departed_us` of its deliveries) over the link rate, from two seconds after
//! the first departure (past slow start) to the last. Queueing delay is `departed_us`
//! minus the packet's enqueue time, per packet.

mod common;

use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;
use std::time::Duration;

use common::{gearbox_bin, scratch, setup, single};
use gearbox_emu::RunOptions;

/// What the downlink's bottleneck saw during one download.
struct Bottleneck {
    utilisation: f64,
    mean_queue_ms: f64,
}

fn bottleneck(events: &Path, rate_bps: f64) -> Bottleneck {
    let file = std::fs::File::open(events).unwrap_or_else(|e| panic!("{}: {e}", events.display()));
    let mut enqueued: HashMap<u64, u64> = HashMap::new();
    let mut departures: Vec<(u64, u64)> = Vec::new();
    let mut queue_us = Vec::new();
    for line in std::io::BufReader::new(file).lines() {
        let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        if v["dir"] != "down" {
            continue;
        }
        let seq = v["seq"].as_u64().unwrap();
        match v["event"].as_str().unwrap() {
            "enqueue" => {
                enqueued.insert(seq, v["t_us"].as_u64().unwrap());
            }
            "deliver" => {
                let departed = v["departed_us"].as_u64().unwrap();
                departures.push((departed, v["len"].as_u64().unwrap()));
                if let Some(t) = enqueued.remove(&seq) {
                    queue_us.push((departed, departed.saturating_sub(t)));
                }
            }
            _ => {}
        }
    }
    departures.sort_unstable();
    let first = departures.first().expect("the download crossed the downlink").0;
    let from = first + 2_000_000;
    let to = departures.last().unwrap().0;
    assert!(to > from + 2_000_000, "download too short to measure: {} us", to - first);
    let bytes: u64 = departures
        .iter()
        .filter(|(t, _)| *t > from && *t <= to)
        .map(|(_, l)| l)
        .sum();
    let late: Vec<u64> = queue_us.iter().filter(|(t, _)| *t > from).map(|(_, q)| *q).collect();
    Bottleneck {
        utilisation: bytes as f64 * 8.0 / ((to - from) as f64 / 1e6) / rate_bps,
        mean_queue_ms: late.iter().sum::<u64>() as f64 / late.len().max(1) as f64 / 1e3,
    }
}

/// One HTTP/3 download of `seconds` worth of bytes at line rate, from an edge running
/// `cc`, over a symmetric `mbit` Mbit/s path with `rtt_ms` and a queue of `bdps` BDPs.
fn download(cc: &str, mbit: u64, rtt_ms: u64, bdps: f64, seconds: f64) -> Bottleneck {
    let bin = gearbox_bin();
    let dir = scratch(&format!("cc-{cc}-{mbit}-{bdps}"));
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    gearbox_dataplane::tls::write_self_signed(&["10.0.0.1".into()], &cert, &key).unwrap();
    let rate = mbit * 1_000_000;
    let cfg = single(&format!(
        "rate_bps = {rate}\ndelay_ms = {}\nbase_rtt_ms = {rtt_ms}\n[path.{{dir}}.queue]\nlimit_bdp = {bdps}",
        rtt_ms as f64 / 2.0
    ));
    let bytes = (rate as f64 / 8.0 * seconds) as u64;
    let events = dir.join("events.jsonl");
    let options = RunOptions {
        emulator: gearbox_emu::EmulatorOptions {
            events: Some(events.clone()),
            ..Default::default()
        },
        server: Some(format!(
            "exec {} edge --listen 10.0.0.1:4433 --cert {} --key {} --cc {cc} --max-bytes {bytes}",
            bin.display(),
            cert.display(),
            key.display()
        )),
        client: Some(format!(
            "exec {} get --proto quic --insecure --timeout-s 120 https://10.0.0.1:4433/bytes/{bytes} > /dev/null",
            bin.display()
        )),
        duration: Some(Duration::from_secs(150)),
        ready_ports: vec!["4433/udp".parse().unwrap()],
        ..RunOptions::default()
    };
    let outcome = gearbox_emu::run(&cfg, &options).unwrap_or_else(|e| panic!("emu run: {e}"));
    assert_eq!(outcome.exit_code, 0, "{cc}: the download failed");
    let b = bottleneck(&events, rate as f64);
    eprintln!(
        "{cc}: {mbit} Mbit/s, {rtt_ms} ms, {bdps} BDP buffer: utilisation {:.3}, mean queueing delay {:.1} ms",
        b.utilisation, b.mean_queue_ms
    );
    let _ = std::fs::remove_dir_all(&dir);
    b
}

#[test]
fn every_suite_controller_fills_a_10_and_a_50_mbit_bottleneck() {
    let _g = setup();
    let mut short = Vec::new();
    for cc in ["newreno", "cubic", "bbr", "copa", "westwood", "vivace"] {
        for mbit in [10, 50] {
            let b = download(cc, mbit, 40, 1.0, 8.0);
            if b.utilisation < 0.9 {
                short.push(format!("{cc} at {mbit} Mbit/s: {:.3}", b.utilisation));
            }
        }
    }
    assert!(short.is_empty(), "utilisation below 90%: {short:?}");
}

#[test]
fn copa_and_bbr_keep_a_deep_buffer_emptier_than_cubic() {
    let _g = setup();
    let cubic = download("cubic", 10, 40, 4.0, 10.0);
    let copa = download("copa", 10, 40, 4.0, 10.0);
    let bbr = download("bbr", 10, 40, 4.0, 10.0);
    // Cubic fills the 4-BDP (160 ms) buffer until it overflows.
    assert!(cubic.mean_queue_ms > 40.0, "cubic queue {:.1} ms", cubic.mean_queue_ms);
    assert!(
        copa.mean_queue_ms < cubic.mean_queue_ms / 3.0,
        "copa {:.1} ms vs cubic {:.1} ms",
        copa.mean_queue_ms,
        cubic.mean_queue_ms
    );
    // BBR's ProbeBW keeps about one BDP in flight: near the min RTT, far below Cubic.
    assert!(
        bbr.mean_queue_ms < cubic.mean_queue_ms / 2.0 && bbr.mean_queue_ms < 20.0,
        "bbr {:.1} ms vs cubic {:.1} ms",
        bbr.mean_queue_ms,
        cubic.mean_queue_ms
    );
    assert!(copa.utilisation > 0.8 && bbr.utilisation > 0.9);
}
