//! Switching a live connection's controller on the emulator (docs/cc.md "Switching,
//! measured"; Floo §2.3 Fig. 3, §5.4 Fig. 12-13), not a test.
//!
//! `cargo build --release -p gearbox-cli && cargo run --release -p gearbox-emu --example cc_switch -- [traces|compare|one ...] [OUT_DIR]`
//! (root). One HTTP/3 download from our edge per run; the client polls the edge's admin
//! port every 100 ms (`GET /connections`: controller, phase, cwnd, sRTT, delivery rate,
//! bytes sent and lost) and asks for the switch at `SWITCH_AT_S` (`POST
//! /connections/1/cc`). The poll rides the emulated path, behind the download: each
//! sample is the edge's state when it answered.
//!
//! - `traces`: BBR→Copa, BBR→Cubic and Cubic→BBR, full and part switching, on a
//!   10 Mbit/s, 40 ms, 1-BDP path; one CSV per run in OUT_DIR (default
//!   `target/cc-switch`), and a table of cwnd and sRTT around the switch.
//! - `one CC MBIT RTT_MS BDP [OUT_DIR]`: one controller through a download with no
//!   switch, its state every half second (a diagnostic).
//! - `compare`: 24 scenarios (6 ordered pairs of Cubic, BBR and Copa × 4 paths), each
//!   switched in both modes; loss and mean sRTT in the 2 s after the switch, full
//!   against part (Floo Fig. 13).

use std::path::{Path, PathBuf};
use std::time::Duration;

use gearbox_emu::RunOptions;

#[path = "../tests/common/transfer.rs"]
mod transfer;

/// When the switch is asked for, s after the download starts (Floo Fig. 3 and 12 switch at 10 s).
const SWITCH_AT_S: f64 = 10.0;

#[derive(Debug, Clone, Copy)]
struct PathSpec {
    mbit: f64,
    rtt_ms: f64,
    bdps: f64,
    loss: f64,
}

impl PathSpec {
    fn label(&self) -> String {
        let loss = if self.loss > 0.0 {
            format!(", {}% loss", self.loss * 100.0)
        } else {
            String::new()
        };
        format!("{} Mbit/s, {} ms, {} BDP{loss}", self.mbit, self.rtt_ms, self.bdps)
    }
}

/// One poll of the edge's state.
#[derive(Debug, Clone)]
struct Sample {
    t_s: f64,
    cca: String,
    phase: String,
    cwnd: f64,
    srtt_ms: f64,
    delivery_rate: f64,
    sent: f64,
    lost: f64,
}

fn run(from: &str, to: &str, mode: &str, p: PathSpec, scratch: &Path) -> Result<Vec<Sample>, String> {
    let bin = transfer::gearbox();
    let (cert, key) = transfer::edge_certificate(scratch)?;
    let cfg = transfer::single_path(p.mbit, p.rtt_ms, p.bdps, p.loss)?;
    let trace = scratch.join("trace.txt");
    let _ = std::fs::remove_file(&trace);
    // Enough bytes for the switch time plus 4 s at line rate: the download outlasts the
    // 2 s after a switch.
    let bytes = (p.mbit * 1e6 / 8.0 * (SWITCH_AT_S + 4.0)) as u64;
    let client = format!(
        "{bin} get --proto quic --insecure --timeout-s 120 https://10.0.0.1:4433/bytes/{bytes} > /dev/null & g=$!; \
         start=$(date +%s%N); \
         (sleep {SWITCH_AT_S}; curl -s -X POST 'http://10.0.0.1:9100/connections/1/cc?to={to}&mode={mode}' > /dev/null) & \
         while kill -0 $g 2>/dev/null; do now=$(date +%s%N); \
         echo \"$(( (now - start) / 1000 )) $(curl -s -m 1 http://10.0.0.1:9100/connections)\" >> {trace}; sleep 0.1; done; \
         wait $g",
        bin = bin.display(),
        trace = trace.display()
    );
    let options = RunOptions {
        server: Some(format!(
            "exec {} edge --listen 10.0.0.1:4433 --admin 10.0.0.1:9100 --cert {} --key {} --cc {from} --max-bytes {bytes}",
            bin.display(),
            cert.display(),
            key.display()
        )),
        client: Some(client),
        duration: Some(Duration::from_secs(150)),
        ready_ports: vec!["4433/udp".parse().unwrap(), "9100/tcp".parse().unwrap()],
        ..RunOptions::default()
    };
    let outcome = gearbox_emu::run(&cfg, &options).map_err(|e| format!("emu run: {e}"))?;
    if outcome.exit_code != 0 {
        return Err(format!(
            "{from}->{to} {mode}: the client exited with {}",
            outcome.exit_code
        ));
    }
    let text = std::fs::read_to_string(&trace).map_err(|e| format!("{}: {e}", trace.display()))?;
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((t, json)) = line.split_once(' ') else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else {
            continue;
        };
        let Some(c) = v.as_array().and_then(|a| a.iter().find(|c| c["transport"] == "quic")) else {
            continue;
        };
        let num = |k: &str| c[k].as_f64().unwrap_or(f64::NAN);
        out.push(Sample {
            t_s: t.parse::<f64>().unwrap_or(0.0) / 1e6,
            cca: c["cca"].as_str().unwrap_or("").to_string(),
            phase: c["phase"].as_str().unwrap_or("").to_string(),
            cwnd: num("cwnd"),
            srtt_ms: num("srtt_ms"),
            delivery_rate: num("delivery_rate"),
            sent: num("sent_bytes"),
            lost: num("lost_bytes"),
        });
    }
    if out.is_empty() {
        return Err("no samples".into());
    }
    Ok(out)
}

/// (loss rate, mean sRTT ms, mean cwnd) over samples in [a, b) seconds.
fn window(samples: &[Sample], a: f64, b: f64) -> (f64, f64, f64) {
    let w: Vec<&Sample> = samples.iter().filter(|s| s.t_s >= a && s.t_s < b).collect();
    if w.len() < 2 {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let (first, last) = (w[0], w[w.len() - 1]);
    let sent = last.sent - first.sent;
    let loss = if sent > 0.0 {
        (last.lost - first.lost) / sent
    } else {
        f64::NAN
    };
    let n = w.len() as f64;
    (
        loss,
        w.iter().map(|s| s.srtt_ms).sum::<f64>() / n,
        w.iter().map(|s| s.cwnd).sum::<f64>() / n,
    )
}

/// One CSV row per poll.
fn write_csv(path: &Path, samples: &[Sample]) {
    let mut text = String::from("t_s,cca,phase,cwnd_bytes,srtt_ms,delivery_rate_bytes_per_s,sent_bytes,lost_bytes\n");
    for x in samples {
        text += &format!(
            "{:.3},{},{},{},{},{},{},{}\n",
            x.t_s, x.cca, x.phase, x.cwnd, x.srtt_ms, x.delivery_rate, x.sent, x.lost
        );
    }
    std::fs::write(path, text).expect("csv");
}

/// When the controller changed (the first sample naming `to`), else the request time.
fn switched_at(samples: &[Sample], to: &str) -> f64 {
    samples
        .iter()
        .find(|s| s.t_s >= SWITCH_AT_S - 0.5 && s.cca == to)
        .map_or(SWITCH_AT_S, |s| s.t_s)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let what = args.first().map_or("traces", String::as_str).to_string();
    let out_arg = if what == "one" { 5 } else { 1 };
    let out = PathBuf::from(args.get(out_arg).map_or("target/cc-switch", String::as_str));
    if let Err(e) = gearbox_emu::check_environment() {
        eprintln!("cc_switch needs root, /dev/net/tun and ip: {e}");
        std::process::exit(1);
    }
    std::fs::create_dir_all(&out).expect("output folder");
    let scratch = std::env::temp_dir().join(format!("gearbox-cc-switch-{}", std::process::id()));
    let base = PathSpec {
        mbit: 10.0,
        rtt_ms: 40.0,
        bdps: 1.0,
        loss: 0.0,
    };
    if what == "one" {
        // A diagnostic: one controller's state through a download, no switch (the
        // request names the running controller: a recorded no-op).
        let arg = |i: usize, name: &str| -> String {
            args.get(i).cloned().unwrap_or_else(|| {
                eprintln!("usage: cc_switch one CC MBIT RTT_MS BDP [OUT_DIR]; missing {name}");
                std::process::exit(2)
            })
        };
        let num = |i: usize, name: &str| -> f64 {
            arg(i, name).parse().unwrap_or_else(|e| {
                eprintln!("cc_switch one: {name}: {e}");
                std::process::exit(2)
            })
        };
        let cc = arg(1, "CC");
        let p = PathSpec {
            mbit: num(2, "MBIT"),
            rtt_ms: num(3, "RTT_MS"),
            bdps: num(4, "BDP"),
            loss: 0.0,
        };
        match run(&cc, &cc, "full", p, &scratch) {
            Ok(s) => {
                let csv = out.join(format!("{cc}-{}mbit.csv", p.mbit));
                write_csv(&csv, &s);
                println!(
                    "| t s | phase | cwnd kB | sRTT ms | delivery Mbit/s | lost kB |\n|---:|---|---:|---:|---:|---:|"
                );
                let mut next = 0.0;
                for x in &s {
                    if x.t_s >= next {
                        println!(
                            "| {:.1} | {} | {:.0} | {:.1} | {:.1} | {:.0} |",
                            x.t_s,
                            x.phase,
                            x.cwnd / 1e3,
                            x.srtt_ms,
                            x.delivery_rate * 8.0 / 1e6,
                            x.lost / 1e3
                        );
                        next = x.t_s + 0.5;
                    }
                }
                println!("wrote {}", csv.display());
            }
            Err(e) => {
                eprintln!("cc_switch one: {e}");
                std::process::exit(1);
            }
        }
    } else if what == "traces" {
        println!("\n### Through a switch at t = {SWITCH_AT_S} s ({})\n", base.label());
        println!("| switch | mode | phase after | cwnd kB 2 s before | cwnd kB 2 s after | sRTT ms before | sRTT ms after | loss 2 s after |");
        println!("|---|---|---|---:|---:|---:|---:|---:|");
        for (from, to) in [("bbr", "copa"), ("bbr", "cubic"), ("cubic", "bbr")] {
            for mode in ["full", "part"] {
                match run(from, to, mode, base, &scratch) {
                    Ok(s) => {
                        write_csv(&out.join(format!("{from}-{to}-{mode}.csv")), &s);
                        let at = switched_at(&s, to);
                        let (_, rtt0, cwnd0) = window(&s, at - 2.0, at);
                        let (loss1, rtt1, cwnd1) = window(&s, at, at + 2.0);
                        let phase = s
                            .iter()
                            .find(|x| x.t_s >= at && x.cca == to)
                            .map_or("", |x| x.phase.as_str());
                        println!(
                            "| {from} → {to} | {mode} | {phase} | {:.0} | {:.0} | {rtt0:.1} | {rtt1:.1} | {:.2}% |",
                            cwnd0 / 1e3,
                            cwnd1 / 1e3,
                            loss1 * 100.0
                        );
                    }
                    Err(e) => println!("| {from} → {to} | {mode} | failed: {e} | | | | | |"),
                }
            }
        }
    } else {
        let paths = [
            base,
            PathSpec {
                mbit: 20.0,
                rtt_ms: 80.0,
                bdps: 2.0,
                loss: 0.0,
            },
            PathSpec { loss: 0.01, ..base },
            PathSpec {
                mbit: 50.0,
                rtt_ms: 20.0,
                bdps: 4.0,
                loss: 0.0,
            },
        ];
        let pairs = [
            ("cubic", "bbr"),
            ("cubic", "copa"),
            ("bbr", "cubic"),
            ("bbr", "copa"),
            ("copa", "cubic"),
            ("copa", "bbr"),
        ];
        println!("\n### Full against part switching, the 2 s after a switch (Floo Fig. 13)\n");
        println!("| path | switch | loss full | loss part | sRTT ms full | sRTT ms part |");
        println!("|---|---|---:|---:|---:|---:|");
        let (mut n, mut loss_better, mut rtt_better) = (0, 0, 0);
        let (mut loss_f, mut loss_p, mut rtt_f, mut rtt_p) = (0.0, 0.0, 0.0, 0.0);
        for p in paths {
            for (from, to) in pairs {
                let after = |mode: &str| {
                    run(from, to, mode, p, &scratch).map(|s| {
                        let at = switched_at(&s, to);
                        let (loss, rtt, _) = window(&s, at, at + 2.0);
                        (loss, rtt)
                    })
                };
                match (after("full"), after("part")) {
                    (Ok((lf, rf)), Ok((lp, rp))) if lf.is_finite() && lp.is_finite() => {
                        n += 1;
                        loss_better += usize::from(lf <= lp);
                        rtt_better += usize::from(rf <= rp);
                        loss_f += lf;
                        loss_p += lp;
                        rtt_f += rf;
                        rtt_p += rp;
                        println!(
                            "| {} | {from} → {to} | {:.2}% | {:.2}% | {rf:.1} | {rp:.1} |",
                            p.label(),
                            lf * 100.0,
                            lp * 100.0
                        );
                    }
                    (f, q) => println!(
                        "| {} | {from} → {to} | failed: {:?} {:?} | | | |",
                        p.label(),
                        f.err(),
                        q.err()
                    ),
                }
            }
        }
        let k = n.max(1) as f64;
        println!(
            "\nOver {n} scenarios: full switching's loss at most part's in {loss_better}, its sRTT in {rtt_better}; \
             mean loss {:.2}% vs {:.2}%, mean sRTT {:.1} vs {:.1} ms.",
            loss_f / k * 100.0,
            loss_p / k * 100.0,
            rtt_f / k,
            rtt_p / k
        );
    }
    let _ = std::fs::remove_dir_all(&scratch);
}
