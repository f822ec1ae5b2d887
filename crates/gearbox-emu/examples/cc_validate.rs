//! The congestion-control suite's validation tables on the emulator (docs/cc.md
//! "Validation"), not a test: every figure is measured at the emulated bottleneck from
//! the relay's event log, one HTTP/3 (or TCP) download per cell.
//!
//! `cargo build --release -p gearbox-cli && cargo run --release -p gearbox-emu --example cc_validate [TABLE...]`
//! (root). TABLE is `utilisation`, `deep`, `loss`, `peers`, `tcp` or `fairness`;
//! default all. Prints markdown.
//!
//! `cc_validate repeat MBIT RUNS CC... [--bdp B] [--loss L]` instead downloads RUNS
//! times over the 40 ms path at MBIT Mbit/s (B BDPs of buffer, default 1; random loss L
//! each way, default 0) with each CC in turn (one run of every controller before the
//! next round, so a busy machine weighs on all of them alike) and prints each
//! utilisation and the spread: the check of a controller that is close to a bound,
//! against a reference (Cubic) measured in the same run. `--seconds S` sets the
//! download's size in seconds at line rate (default 8).
//!
//! `cc_validate fairness-repeat RUNS CC...` runs the fairness table's two-flow download
//! RUNS times per controller (interleaved as `repeat` does) and prints each run's Jain's
//! index.

#[path = "../tests/common/transfer.rs"]
mod transfer;

use transfer::{run, Download, Measured};

const SUITE: [&str; 6] = ["newreno", "cubic", "bbr", "copa", "westwood", "vivace"];

fn cell(d: &Download) -> Option<Measured> {
    let dir = std::env::temp_dir().join(format!("gearbox-cc-validate-{}", std::process::id()));
    let m = run(d, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    match m {
        Ok(m) => Some(m),
        Err(e) => {
            eprintln!("{} {} {} Mbit/s: {e}", d.proto, d.cc, d.mbit);
            None
        }
    }
}

fn pct(m: &Option<Measured>) -> String {
    m.as_ref()
        .map_or("failed".into(), |m| format!("{:.1}%", m.utilisation * 100.0))
}

fn queue(m: &Option<Measured>) -> String {
    m.as_ref()
        .map_or("failed".into(), |m| format!("{:.1}", m.mean_queue_ms))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("repeat") {
        return repeat(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("fairness-repeat") {
        return fairness_repeat(&args[1..]);
    }
    let want = |t: &str| args.is_empty() || args.iter().any(|a| a == t);
    require_emulator();
    if want("utilisation") {
        println!("\n### Loss-free utilisation (40 ms RTT, 1-BDP drop-tail buffer, 8 s download)\n");
        println!("| controller | 10 Mbit/s | queue ms | 50 Mbit/s | queue ms |\n|---|---:|---:|---:|---:|");
        for cc in SUITE.iter().chain(&["quinn-cubic", "quinn-newreno"]) {
            let a = cell(&Download::quic(cc, 10.0, 40.0, 1.0));
            let b = cell(&Download::quic(cc, 50.0, 40.0, 1.0));
            println!("| {cc} | {} | {} | {} | {} |", pct(&a), queue(&a), pct(&b), queue(&b));
        }
    }
    if want("deep") {
        println!("\n### Queueing with a deep buffer (10 Mbit/s, 40 ms, 4 BDP = 160 ms, 10 s download)\n");
        println!("| controller | utilisation | mean queueing delay ms |\n|---|---:|---:|");
        for cc in SUITE {
            let m = cell(&Download {
                seconds: 10.0,
                ..Download::quic(cc, 10.0, 40.0, 4.0)
            });
            println!("| {cc} | {} | {} |", pct(&m), queue(&m));
        }
    }
    if want("loss") {
        println!(
            "\n### Random loss (10 Mbit/s, 40 ms, 1 BDP, Bernoulli loss each direction, 5 s of bytes at line rate)\n"
        );
        println!("| controller | 0% | 1% | 2% | 3% |\n|---|---:|---:|---:|---:|");
        let quic = SUITE.map(|cc| ("quic", cc));
        let kernel = ["reno", "cubic", "bbr", "westwood"].map(|cc| ("tcp", cc));
        for (proto, cc) in quic.into_iter().chain(kernel) {
            let cells: Vec<String> = [0.0, 0.01, 0.02, 0.03]
                .iter()
                .map(|&loss| {
                    // Fewer bytes than elsewhere: a loss-based controller at 2-3% loss
                    // runs at a sixth of the link, and the run's length follows.
                    pct(&cell(&Download {
                        loss,
                        seconds: 5.0,
                        proto,
                        ..Download::quic(cc, 10.0, 40.0, 1.0)
                    }))
                })
                .collect();
            let label = if proto == "tcp" {
                format!("kernel TCP {cc}")
            } else {
                cc.to_string()
            };
            println!("| {label} | {} |", cells.join(" | "));
        }
    }
    if want("peers") {
        println!("\n### Our Cubic against quinn's built-in Cubic (same path, one download each)\n");
        println!("| path | ours util. | quinn util. | ours queue ms | quinn queue ms |\n|---|---:|---:|---:|---:|");
        for (mbit, rtt, bdp) in [
            (10.0, 40.0, 1.0),
            (50.0, 40.0, 1.0),
            (10.0, 100.0, 2.0),
            (50.0, 20.0, 4.0),
        ] {
            let ours = cell(&Download::quic("cubic", mbit, rtt, bdp));
            let quinn = cell(&Download::quic("quinn-cubic", mbit, rtt, bdp));
            println!(
                "| {mbit} Mbit/s, {rtt} ms, {bdp} BDP | {} | {} | {} | {} |",
                pct(&ours),
                pct(&quinn),
                queue(&ours),
                queue(&quinn)
            );
        }
    }
    if want("tcp") {
        println!("\n### Our BBR (QUIC) beside the kernel's BBR (TCP), same path\n");
        println!("| path | ours util. | kernel util. | ours queue ms | kernel queue ms |\n|---|---:|---:|---:|---:|");
        for (mbit, rtt, bdp) in [(10.0, 40.0, 1.0), (50.0, 40.0, 4.0)] {
            let ours = cell(&Download::quic("bbr", mbit, rtt, bdp));
            let kernel = cell(&Download {
                proto: "tcp",
                ..Download::quic("bbr", mbit, rtt, bdp)
            });
            println!(
                "| {mbit} Mbit/s, {rtt} ms, {bdp} BDP | {} | {} | {} | {} |",
                pct(&ours),
                pct(&kernel),
                queue(&ours),
                queue(&kernel)
            );
        }
    }
    if want("fairness") {
        println!("\n### Two flows of one controller (10 Mbit/s, 40 ms, 1 BDP, equal sizes)\n");
        println!("| controller | Jain's index while both ran | RCTs s |\n|---|---:|---|");
        for cc in SUITE {
            let m = cell(&two_flows(cc));
            match m {
                Some(m) => println!(
                    "| {cc} | {:.3} | {} |",
                    m.jain(),
                    m.rct_s.iter().map(|t| format!("{t:.1}")).collect::<Vec<_>>().join(", ")
                ),
                None => println!("| {cc} | failed | |"),
            }
        }
    }
}

/// The fairness table's download: two equal flows of `cc` started together over
/// 10 Mbit/s, 40 ms, 1 BDP, 12 s at line rate in all.
fn two_flows(cc: &str) -> Download {
    Download {
        flows: 2,
        seconds: 12.0,
        ..Download::quic(cc, 10.0, 40.0, 1.0)
    }
}

/// `fairness-repeat RUNS CC...`: RUNS two-flow downloads per controller, interleaved.
fn fairness_repeat(args: &[String]) {
    let usage = "usage: cc_validate fairness-repeat RUNS CC... (e.g. fairness-repeat 5 cubic vivace)";
    let Some(runs) = args.first().and_then(|a| a.parse::<usize>().ok()) else {
        fail(usage)
    };
    let ccs = &args[1..];
    if ccs.is_empty() {
        fail(usage)
    }
    let got = interleaved(ccs, runs, two_flows, |run, cc, m| match m {
        Some(m) => eprintln!("run {run} {cc}: Jain {:.3} RCTs {:?}", m.jain(), m.rct_s),
        None => eprintln!("run {run} {cc}: failed"),
    });
    println!("\n### Two flows of one controller (10 Mbit/s, 40 ms, 1 BDP), {runs} runs each\n");
    println!("| controller | Jain's index per run | min | mean |\n|---|---|---:|---:|");
    for (cc, ms) in ccs.iter().zip(&got) {
        let j: Vec<f64> = ms.iter().flatten().map(Measured::jain).collect();
        let min = j.iter().cloned().fold(f64::INFINITY, f64::min);
        let mean = j.iter().sum::<f64>() / j.len().max(1) as f64;
        println!(
            "| {cc} | {} | {min:.3} | {mean:.3} |",
            ms.iter()
                .map(|m| m.as_ref().map_or("failed".into(), |m| format!("{:.3}", m.jain())))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}

/// `repeat MBIT RUNS CC...`: RUNS downloads per controller, interleaved.
fn repeat(args: &[String]) {
    let usage =
        "usage: cc_validate repeat MBIT RUNS CC... [--bdp B] [--loss L] [--seconds S] (e.g. repeat 50 5 cubic vivace)";
    let mut bdps = 1.0;
    let mut loss = 0.0;
    let mut seconds = 8.0;
    let mut ccs = Vec::new();
    let mut rest = args.iter().skip(2);
    while let Some(a) = rest.next() {
        let value = |v: Option<&String>| v.and_then(|v| v.parse::<f64>().ok()).filter(|v| *v >= 0.0);
        match a.as_str() {
            "--bdp" => bdps = value(rest.next()).unwrap_or_else(|| fail(usage)),
            "--loss" => loss = value(rest.next()).unwrap_or_else(|| fail(usage)),
            "--seconds" => seconds = value(rest.next()).filter(|s| *s > 3.0).unwrap_or_else(|| fail(usage)),
            cc => ccs.push(cc.to_string()),
        }
    }
    let (Some(mbit), Some(runs)) = (
        args.first().and_then(|a| a.parse::<f64>().ok()),
        args.get(1).and_then(|a| a.parse::<usize>().ok()),
    ) else {
        fail(usage)
    };
    if ccs.is_empty() {
        fail(usage)
    }
    let download = |cc: &str| Download {
        loss,
        seconds,
        ..Download::quic(cc, mbit, 40.0, bdps)
    };
    let got = interleaved(&ccs, runs, download, |run, cc, m| {
        eprintln!("run {run} {cc}: {} queue {} ms", pct(m), queue(m))
    });
    println!("\n### {mbit} Mbit/s, 40 ms, {bdps} BDP, loss {loss}, {seconds} s download, {runs} runs each\n");
    println!("| controller | utilisation per run | min | mean | mean queue ms |\n|---|---|---:|---:|---:|");
    for (cc, ms) in ccs.iter().zip(&got) {
        let ok: Vec<&Measured> = ms.iter().flatten().collect();
        let u: Vec<f64> = ok.iter().map(|m| m.utilisation * 100.0).collect();
        let (min, mean) = if u.is_empty() {
            (f64::NAN, f64::NAN)
        } else {
            (
                u.iter().cloned().fold(f64::INFINITY, f64::min),
                u.iter().sum::<f64>() / u.len() as f64,
            )
        };
        let q = ok.iter().map(|m| m.mean_queue_ms).sum::<f64>() / ok.len().max(1) as f64;
        println!(
            "| {cc} | {} | {min:.1}% | {mean:.1}% | {q:.1} |",
            ms.iter().map(pct).collect::<Vec<_>>().join(", ")
        );
    }
}

/// Exits with the reason when the emulator cannot run here.
fn require_emulator() {
    if let Err(e) = gearbox_emu::check_environment() {
        eprintln!("cc_validate needs root, /dev/net/tun and ip: {e}");
        std::process::exit(1);
    }
}

/// `runs` measurements of `download(cc)` for every controller, interleaved (run 1 of
/// every controller, then run 2, ...) so that a change in the machine's load falls on
/// all of them alike; `log` sees each one (run numbered from 1) as it ends.
fn interleaved<C: AsRef<str>>(
    ccs: &[C],
    runs: usize,
    download: impl Fn(&str) -> Download,
    log: impl Fn(usize, &str, &Option<Measured>),
) -> Vec<Vec<Option<Measured>>> {
    require_emulator();
    let mut got: Vec<Vec<Option<Measured>>> = vec![Vec::new(); ccs.len()];
    for run in 0..runs {
        for (i, cc) in ccs.iter().enumerate() {
            let m = cell(&download(cc.as_ref()));
            log(run + 1, cc.as_ref(), &m);
            got[i].push(m);
        }
    }
    got
}

fn fail(usage: &str) -> ! {
    eprintln!("{usage}");
    std::process::exit(2)
}
