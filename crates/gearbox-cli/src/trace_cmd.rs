//! `gearbox trace` (hidden): writes the synthetic link traces of
//! `gearbox_link::tracegen` as mahimahi files, for the lab's scenarios
//! (`trace = { preset = "4g-mobile", seed = 3 }`, docs/lab.md).
//!
//! The Python lab calls this command instead of reimplementing the generators:
//! one generator, one set of presets, the same trace for the same seed in the
//! emulator, the simulator and the lab (docs/architecture.md "One link model, two clocks").
//! A PyO3 binding was the alternative; a subcommand keeps the lab usable with
//! only the `gearbox` binary built.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use gearbox_link::tracegen::Preset;

/// Arguments of `gearbox trace`.
#[derive(Args, Debug)]
pub struct TraceArgs {
    #[command(subcommand)]
    command: TraceCommand,
}

#[derive(Subcommand, Debug)]
enum TraceCommand {
    /// Generate a preset's trace for a seed and write it in mahimahi format.
    Gen(GenArgs),
    /// List the preset names, one per line.
    Presets,
}

#[derive(Args, Debug)]
struct GenArgs {
    /// Preset name (`gearbox trace presets`; docs/traces.md).
    #[arg(long)]
    preset: String,
    /// Seed of the generator: the same seed gives the same trace.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Length of the trace in seconds (the link repeats it after its end).
    #[arg(long, value_name = "S")]
    duration_s: f64,
    /// Where to write the trace.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
}

fn preset(name: &str) -> anyhow::Result<Preset> {
    Preset::ALL.into_iter().find(|p| p.name() == name).with_context(|| {
        let names: Vec<&str> = Preset::ALL.iter().map(|p| p.name()).collect();
        format!("unknown trace preset `{name}`: presets are {}", names.join(", "))
    })
}

/// Runs `gearbox trace`.
pub fn run(a: TraceArgs) -> anyhow::Result<()> {
    match a.command {
        TraceCommand::Presets => {
            for p in Preset::ALL {
                println!("{}", p.name());
            }
            Ok(())
        }
        TraceCommand::Gen(g) => {
            if !(g.duration_s.is_finite() && g.duration_s > 0.0) {
                anyhow::bail!(
                    "--duration-s must be a positive number of seconds, got {}",
                    g.duration_s
                );
            }
            let trace = preset(&g.preset)?
                .generate(g.duration_s, g.seed)
                .with_context(|| format!("generating preset {} (seed {})", g.preset, g.seed))?;
            trace
                .write_file(&g.out)
                .with_context(|| format!("writing {}", g.out.display()))?;
            println!(
                "{}",
                serde_json::json!({
                    "out": g.out.display().to_string(),
                    "preset": g.preset,
                    "seed": g.seed,
                    "period_ms": trace.period_ms(),
                    "mean_rate_bps": trace.mean_rate_bps(),
                })
            );
            Ok(())
        }
    }
}
