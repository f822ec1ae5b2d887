//! `gearbox bench floo`: what the Floo gear costs (Floo §5.3, Fig. 7 and Table 5: monitor
//! 47 µs and selector 66 µs per decision, +1.4% CPU on the server).
//!
//! Per part, in process: the Monitor's normalisation (`observation`), the Selector (the
//! shipped policy's forward pass and argmax through `FlooGear::choose`) and the
//! Switcher (a full and a part switch of the suite's `Switchable`), nanoseconds each.
//! The Monitor's reading of the connection state is a lock and a copy of the
//! controller's status; it is inside the whole-process figure.
//!
//! Whole process, when root can run the emulator: the edge's CPU seconds for one long
//! HTTP/3 download over an emulated 48 Mbit/s, 20 ms path (Floo Fig. 7's set-up) with
//! `--gear floo` against the same edge without a gear, in one run.

use std::hint::black_box;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use gearbox_cc::{Cca, SwitchMode};
use gearbox_gear_api::{CcaPeriodGear, ConnectionStats, Transport};
use gearbox_gears::floo::{observation, FlooGear};

use super::cc::{median, per_switch, whole_process};

/// Arguments of `gearbox bench floo`.
#[derive(clap::Args, Debug)]
pub struct FlooBenchArgs {
    /// The Floo policy.
    #[arg(long, default_value = "models/floo")]
    pub model_dir: PathBuf,
    /// Decisions per timing; the median of the repeats is reported.
    #[arg(long, default_value_t = 100_000)]
    pub decisions: u32,
    /// Timings per part.
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
    /// Length of each emulated transfer, seconds (0: skip the whole-process part).
    #[arg(long, default_value_t = 60.0)]
    pub transfer_s: f64,
    /// The selection period of the edge's gear in the whole-process part, seconds.
    #[arg(long, default_value_t = 12.0)]
    pub period_s: f64,
}

fn stats(i: u32) -> ConnectionStats {
    let f = f64::from(i % 97);
    ConnectionStats {
        conn_id: u64::from(i),
        transport: Transport::Quic,
        cca: [Cca::Cubic, Cca::Bbr, Cca::Copa, Cca::Westwood][(i % 4) as usize],
        period_ms: 12_000.0,
        max_delivery_rate_bps: Some(5_000_000 + 100_000 * u64::from(i % 97)),
        min_rtt_ms: Some(20.0 + f),
        srtt_ms: Some(30.0 + 1.5 * f),
        rtt_var_ms2: Some(4.0 + f),
        loss_rate: Some(f / 1e4),
        cwnd_bytes: 50_000 + 1000 * u64::from(i % 97),
        pacing_rate_bps: Some(6_000_000),
        goodput_bps: Some(2_000_000.0 + 1e4 * f),
        unsent_bytes: 1000 * u64::from(i % 7),
        response_wait_ms: Some(f / 10.0),
        response_wait_gradient_ms_per_s: Some(f / 100.0 - 0.5),
        bytes_sent: 3_000_000,
    }
}

/// Runs the benchmark and prints its figures.
pub fn run(a: FlooBenchArgs) -> anyhow::Result<()> {
    if a.decisions == 0 || a.repeats == 0 || a.transfer_s < 0.0 || a.period_s.is_nan() || a.period_s <= 0.0 {
        bail!("--decisions, --repeats and --period-s must be positive, --transfer-s 0 or more");
    }
    let mut gear = FlooGear::load(&a.model_dir).with_context(|| format!("--model-dir {}", a.model_dir.display()))?;
    let inputs: Vec<ConnectionStats> = (0..1024).map(stats).collect();
    let time = |f: &mut dyn FnMut(&ConnectionStats)| {
        median(
            (0..a.repeats)
                .map(|_| {
                    let start = Instant::now();
                    for i in 0..a.decisions {
                        f(&inputs[(i % 1024) as usize]);
                    }
                    start.elapsed().as_nanos() as f64 / f64::from(a.decisions)
                })
                .collect(),
        )
    };
    let monitor = time(&mut |s| {
        black_box(observation(black_box(s)));
    });
    let now = Instant::now();
    let selector = time(&mut |s| {
        black_box(gear.choose(black_box(s), now));
    });
    println!(
        "# gearbox bench floo: {} decisions x {} repeats per part, policy {}",
        a.decisions,
        a.repeats,
        gear.model_path().display()
    );
    println!("\n| part | ns per decision |");
    println!("|---|---:|");
    println!("| monitor: normalised state from the period's metrics | {monitor:.0} |");
    println!("| selector: observation + policy + argmax + reason (FlooGear::choose) | {selector:.0} |");
    for mode in [SwitchMode::Full, SwitchMode::Part] {
        let ns = median((0..a.repeats).map(|_| per_switch(mode, 30)).collect());
        println!("| switcher: one {} switch | {ns:.0} |", mode.name());
    }
    if a.transfer_s > 0.0 {
        // The edge runs in another namespace and folder: give it an absolute path.
        let model = std::env::current_dir()?.join(&a.model_dir);
        let cpu = whole_process(
            48.0,
            20,
            a.transfer_s,
            &[
                ("cubic, no gear", "--cc cubic".into()),
                (
                    "cubic, --gear floo",
                    format!(
                        "--cc cubic --gear floo --model-dir {} --period-s {}",
                        model.display(),
                        a.period_s
                    ),
                ),
            ],
        )
        .context("whole-process part (needs root and /dev/net/tun; --transfer-s 0 skips it)")?;
        println!("\nFloo over no gear: {:+.1}% edge CPU", (cpu[1] / cpu[0] - 1.0) * 100.0);
    }
    Ok(())
}
