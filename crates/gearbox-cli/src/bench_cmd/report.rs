//! The report of `gearbox bench edge`: the conditions of the run, then per measurement
//! the figures, the CPU each side used and the UDP drops, and which figures the client
//! rather than the server bounded.

use super::cc::median;
use super::measure::{Kind, Row, Sample};
use super::EdgeBenchArgs;

pub(super) fn print_report(a: &EdgeBenchArgs, rows: &[Row], load_before: &str, others_pct: f64) {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("gearbox bench edge: loopback, {cpus} CPUs shared by client and servers");
    println!(
        "background: load average {load_before} at the start; other processes used {others_pct:.0}% of one core on average during the run{}",
        if others_pct > 10.0 { " (NOISY: re-run when the machine is quiet)" } else { "" }
    );
    println!(
        "bulk: {} MB file, one connection, {} repeats; small: {} B, {} in flight on one connection, {} s after {} s warm-up, {} repeats",
        a.size_mb, a.repeats, a.small_bytes, a.concurrency, a.duration_s, a.warmup_s, a.repeats
    );
    if cfg!(debug_assertions) {
        println!(
            "WARNING: a debug build; build with `cargo build --release -p gearbox-cli` for figures worth recording"
        );
    }
    println!("figures: median of the repeats (best in brackets)\n");
    println!(
        "{:<24} {:>20} {:>20} {:>14} {:>20}",
        "measure", "gearbox (file)", "caddy (file)", "gearbox/caddy", "gearbox (/bytes)"
    );
    let mut client_bound = Vec::new();
    for row in rows {
        let fmt = |v: &[Sample]| {
            let vals: Vec<f64> = v.iter().map(|s| s.value).collect();
            let best = vals.iter().copied().fold(f64::NAN, f64::max);
            let prec = if row.kind == Kind::Bulk { 1 } else { 0 };
            format!("{:.prec$} ({:.prec$})", median(vals), best)
        };
        let med = |i: usize| median(row.samples[i].iter().map(|s| s.value).collect());
        println!(
            "{:<24} {:>20} {:>20} {:>14.2} {:>20}",
            row.name,
            fmt(&row.samples[0]),
            fmt(&row.samples[1]),
            med(0) / med(1),
            fmt(&row.samples[2])
        );
    }
    println!("\nCPU during each measurement, median % of one core: client / server");
    println!(
        "{:<24} {:>20} {:>20} {:>14} {:>20}",
        "measure", "gearbox (file)", "caddy (file)", "", "gearbox (/bytes)"
    );
    for row in rows {
        let cells: Vec<String> = row
            .samples
            .iter()
            .map(|v| {
                let c = median(v.iter().map(|s| s.client_cpu_pct).collect());
                let s = median(v.iter().map(|s| s.server_cpu_pct).collect());
                format!("{c:.0} / {s:.0}")
            })
            .collect();
        for (i, v) in row.samples.iter().enumerate() {
            let c = median(v.iter().map(|s| s.client_cpu_pct).collect());
            let s = median(v.iter().map(|s| s.server_cpu_pct).collect());
            if c >= s {
                client_bound.push(format!(
                    "{} against {}",
                    row.name,
                    ["gearbox (file)", "caddy (file)", "gearbox (/bytes)"][i]
                ));
            }
        }
        println!(
            "{:<24} {:>20} {:>20} {:>14} {:>20}",
            row.name, cells[0], cells[1], "", cells[2]
        );
    }
    println!("\nUDP datagrams dropped for a full socket receive buffer, median per measurement: at the server / elsewhere (client)");
    for row in rows.iter().filter(|r| r.name.starts_with("h3")) {
        let cells: Vec<String> = row
            .samples
            .iter()
            .map(|v| {
                let server = median(v.iter().map(|s| s.server_udp_drops as f64).collect());
                let other = median(v.iter().map(|s| s.other_udp_drops as f64).collect());
                format!("{server:.0} / {other:.0}")
            })
            .collect();
        println!(
            "{:<24} {:>20} {:>20} {:>14} {:>20}",
            row.name, cells[0], cells[1], "", cells[2]
        );
    }
    println!();
    if client_bound.is_empty() {
        println!("The servers used more CPU than the client in every measurement.");
    } else {
        println!(
            "CLIENT-BOUND: the client used at least as much CPU as the server in: {}.\n\
             With {cpus} cores shared, those figures are bounded by our client as much as by the server.",
            client_bound.join("; ")
        );
    }
}
