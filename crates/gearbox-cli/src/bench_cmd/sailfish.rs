//! `gearbox bench sailfish`: what a stream-to-path decision costs on the client
//! (the SAILfish issue's budget: ≤ 5 µs per decision in Rust), for the shipped SAILfish
//! policy beside the heuristic schedulers, measured in the same run on the same inputs:
//! two paths with varied state and a request each time.

use std::hint::black_box;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use gearbox_gear_api::{PathGear, PathRequest, PathState};
use gearbox_gears::path::{sailfish, scheduler, SailfishGear};

use super::cc::median;

/// Arguments of `gearbox bench sailfish`.
#[derive(clap::Args, Debug)]
pub struct SailfishBenchArgs {
    /// The SAILfish policy (a two-path model).
    #[arg(long, default_value = "models/sailfish")]
    pub model_dir: PathBuf,
    /// Decisions per timing; the median of the repeats is reported.
    #[arg(long, default_value_t = 100_000)]
    pub decisions: u32,
    /// Timings per scheduler.
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
}

/// Two paths in state `i` (of 1024 varied ones).
fn paths(i: u32) -> Vec<PathState> {
    let f = f64::from(i % 97);
    (0..2)
        .map(|p| PathState {
            index: p,
            local_addr: format!("10.0.{p}.2"),
            delivery_rate_bps: (!i.is_multiple_of(5))
                .then_some(1_000_000 + 200_000 * u64::from(i % 89) * (p as u64 + 1)),
            srtt_ms: Some(10.0 + f + 20.0 * p as f64),
            srtt_history_ms: (0..8).map(|k| 10.0 + f + k as f64).collect(),
            min_rtt_ms: Some(8.0 + 20.0 * p as f64),
            cwnd_bytes: Some(12_000),
            bytes_in_flight: 10_000 * u64::from(i % 13) * p as u64,
            streams_in_flight: (i % 5) as usize,
            lost_packets: u64::from(i % 3),
            retransmitted_packets: u64::from(i % 3),
            sent_packets: 100 + u64::from(i),
        })
        .collect()
}

fn request(i: u32) -> PathRequest {
    PathRequest {
        url: format!("https://edge/object/{i}.js"),
        urgency: (i % 8) as u8,
        expected_bytes: Some(1_000 + 997 * u64::from(i % 200)),
        workload_client: None,
    }
}

/// Runs the benchmark and prints its figures.
pub fn run(a: SailfishBenchArgs) -> anyhow::Result<()> {
    if a.decisions == 0 || a.repeats == 0 {
        bail!("--decisions and --repeats must be positive");
    }
    let inputs: Vec<(PathRequest, Vec<PathState>)> = (0..1024).map(|i| (request(i), paths(i))).collect();
    let time = |f: &mut dyn FnMut(&PathRequest, &[PathState])| {
        median(
            (0..a.repeats)
                .map(|_| {
                    let start = Instant::now();
                    for i in 0..a.decisions {
                        let (r, p) = &inputs[(i % 1024) as usize];
                        f(r, p);
                    }
                    start.elapsed().as_nanos() as f64 / f64::from(a.decisions)
                })
                .collect(),
        )
    };
    let now = Instant::now();
    let mut gear =
        SailfishGear::load(&a.model_dir, 2).with_context(|| format!("--model-dir {}", a.model_dir.display()))?;
    let features = time(&mut |r, p| {
        black_box(sailfish::features(black_box(r), black_box(p)));
    });
    let learned = time(&mut |r, p| {
        black_box(gear.choose(black_box(r), black_box(p), now));
    });
    println!(
        "# gearbox bench sailfish: {} decisions x {} repeats per scheduler, two paths, policy {}",
        a.decisions,
        a.repeats,
        gear.model_path().display()
    );
    println!("\n| scheduler | ns per decision | x minrtt |");
    println!("|---|---:|---:|");
    let mut minrtt = f64::NAN;
    for name in ["minrtt", "ecf", "blest", "round-robin", "single-best"] {
        let mut h = scheduler(name)?;
        let ns = time(&mut |r, p| {
            black_box(h.choose(black_box(r), black_box(p), now));
        });
        if name == "minrtt" {
            minrtt = ns;
        }
        println!("| {name} | {ns:.0} | {:.1} |", ns / minrtt);
    }
    println!("| sailfish: features only | {features:.0} | {:.1} |", features / minrtt);
    println!(
        "| sailfish: features + policy + argmax + reason (SailfishGear::choose) | {learned:.0} | {:.1} |",
        learned / minrtt
    );
    Ok(())
}
