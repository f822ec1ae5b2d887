//! `gearbox bench sim`: how fast the simulator runs (docs/sim.md "Speed"): simulated
//! seconds per wall second and packets per wall second, for a 10 Mbit/s path with the
//! `app` workload, a 100 Mbit/s bulk transfer, an hour of `search` (a new connection per
//! request: the cost of a long run) and a population of 1,000 clients on 250 /24s (TCP
//! WISE's environment); a Floo training episode (10 simulated minutes of `app` over a
//! `wifi` trace, the shipped Floo policy choosing the controller every 12 s: Floo §4.3.1);
//! and page loads per wall second on a two-path client (SAILfish's training
//! environment). Not a test: it prints figures.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gearbox_sim::SimConfig;

/// Arguments of `gearbox bench sim`.
#[derive(clap::Args, Debug)]
pub struct SimBenchArgs {
    /// Repeats of every case; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// The Floo policy of the Floo-episode case (skipped when it cannot be loaded).
    #[arg(long, default_value = "models/floo")]
    pub floo_model: PathBuf,
}

/// Runs the cases and prints a table.
pub fn run(a: SimBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.repeats > 0, "--repeats must be at least 1");
    let cases = [
        (
            "10 Mbit/s, 40 ms, app, 120 s",
            "seed = 1\nduration_s = 120.0\nworkload = \"app\"\n[down]\nrate_bps = 10000000\ndelay_ms = 20.0\nbase_rtt_ms = 40.0\n[down.queue]\nlimit_bdp = 1.0\n",
        ),
        (
            "10 Mbit/s, 40 ms, bulk 50 MB",
            "seed = 1\nduration_s = 1.0\ntime_limit_s = 600.0\nworkload = \"bulk\"\n[down]\nrate_bps = 10000000\ndelay_ms = 20.0\nbase_rtt_ms = 40.0\n[down.queue]\nlimit_bdp = 1.0\n",
        ),
        (
            "100 Mbit/s, 20 ms, bulk 50 MB",
            "seed = 1\nduration_s = 1.0\ntime_limit_s = 600.0\nworkload = \"bulk\"\n[down]\nrate_bps = 100000000\ndelay_ms = 10.0\nbase_rtt_ms = 20.0\n[down.queue]\nlimit_bdp = 1.0\n",
        ),
        (
            "10 Mbit/s, 40 ms, search, 1 h (a new connection per request)",
            "seed = 1\nduration_s = 3600.0\nworkload = \"search\"\n[down]\nrate_bps = 10000000\ndelay_ms = 20.0\nbase_rtt_ms = 40.0\n[down.queue]\nlimit_bdp = 1.0\n",
        ),
        (
            "population: 250 /24s x 4 hosts (1,000 clients), 20 Mbit/s, 40 ms each, search x 20, 120 s",
            "seed = 1\nduration_s = 2400.0\ntime_scale = 0.05\nworkload = \"search\"\n[population]\nprefixes = 250\nhosts_per_prefix = 4\n[population.down]\nrate_bps = 20000000\ndelay_ms = 20.0\nbase_rtt_ms = 40.0\n[population.down.queue]\nlimit_bdp = 1.0\n",
        ),
        (
            "10 Mbit/s, 40 ms, bulk 50 MB, real TLS packet protection",
            "seed = 1\nduration_s = 1.0\ntime_limit_s = 600.0\nworkload = \"bulk\"\npacket_protection = \"tls\"\n[down]\nrate_bps = 10000000\ndelay_ms = 20.0\nbase_rtt_ms = 40.0\n[down.queue]\nlimit_bdp = 1.0\n",
        ),
    ];
    println!(
        "| case | simulated s | wall s | x real time | packets/s (wall) | CPU s | x real time (CPU) | packets/s (CPU) |\n|---|---:|---:|---:|---:|---:|---:|---:|"
    );
    for (name, text) in cases {
        let config = SimConfig::parse(text, Path::new(name))?;
        let mut runs = Vec::new();
        for _ in 0..a.repeats {
            let (t, cpu) = (Instant::now(), thread_cpu_s());
            let out = gearbox_sim::run(&config)?;
            let (wall, cpu) = (t.elapsed().as_secs_f64(), thread_cpu_s() - cpu);
            runs.push((wall, cpu, out.simulated.as_secs_f64(), out.packets));
        }
        let (sim, packets) = (runs[0].2, runs[0].3);
        let wall = median(runs.iter().map(|r| r.0).collect());
        let cpu = median(runs.iter().map(|r| r.1).collect());
        let packets = packets as f64;
        println!(
            "| {name} | {sim:.1} | {wall:.3} | {:.0} | {:.0} | {cpu:.3} | {:.0} | {:.0} |",
            sim / wall,
            packets / wall,
            sim / cpu,
            packets / cpu
        );
    }
    floo_episode(a.repeats, &a.floo_model)?;
    page_loads(a.repeats)
}

/// One Floo training episode as `gearbox learn floo` runs it (Floo §4.3.1), without Python:
/// 10 simulated minutes of `app` over a `wifi` trace (the project's generator, seed 1),
/// 40 ms, 1 BDP, every connection starting on Copa, the shipped policy choosing each
/// connection's controller every 12 s (full switching). The target of the simulator's
/// issue: ≤ 2 s of wall time per episode.
fn floo_episode(repeats: usize, model: &Path) -> anyhow::Result<()> {
    let mut gear = match gearbox_gears::floo::FlooGear::load(model) {
        Ok(g) => g,
        Err(e) => {
            println!("\nFloo episode: skipped ({}: {e})", model.display());
            return Ok(());
        }
    };
    let text = "seed = 1\nduration_s = 600.0\nworkload = \"app\"\ncc = \"copa\"\n[down]\nrate_bps = 1\ndelay_ms = 20.0\nbase_rtt_ms = 40.0\n[down.queue]\nlimit_bdp = 1.0\n";
    let mut config = SimConfig::parse(text, Path::new("floo episode"))?;
    let trace = gearbox_link::tracegen::Preset::Wifi.generate(660.0, 1)?;
    if let Some(down) = config.down.as_mut() {
        down.rate_bps = None;
        down.trace = Some(Arc::new(trace));
    }
    let mut runs = Vec::new();
    for _ in 0..repeats {
        let (t, cpu) = (Instant::now(), thread_cpu_s());
        let mut session = gearbox_sim::Session::new(&config)?;
        let run = session.drive(&mut gear, Duration::from_secs(12), gearbox_cc::SwitchMode::Full)?;
        let (wall, cpu) = (t.elapsed().as_secs_f64(), thread_cpu_s() - cpu);
        runs.push((wall, cpu, session.now().as_secs_f64(), run.decisions, run.switches));
    }
    let (_, _, sim, decisions, switches) = runs[0];
    let wall = median(runs.iter().map(|r| r.0).collect());
    let cpu = median(runs.iter().map(|r| r.1).collect());
    println!(
        "\n| Floo episode: app, 10 min, wifi trace, 40 ms, policy every 12 s | simulated s | decisions | switches | wall s | x real time | CPU s |\n|---|---:|---:|---:|---:|---:|---:|"
    );
    println!(
        "| {} | {sim:.1} | {decisions} | {switches} | {wall:.3} | {:.0} | {cpu:.3} |",
        model.display(),
        sim / wall
    );
    Ok(())
}

/// The median of `v` (the upper one of an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// CPU time of the calling thread, seconds (the simulator runs on it): on a machine shared
/// with other work the wall time includes waiting for a core, the CPU time much less so.
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec, which `ts` is.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return f64::NAN;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Two contrasting paths (20 Mbit/s 20 ms, 5 Mbit/s 80 ms), 20 pages of the `page`
/// workload, every stream scheduled by stream MinRTT: loads and decisions per wall
/// second.
fn page_loads(repeats: usize) -> anyhow::Result<()> {
    let text = "seed = 1\nduration_s = 1.0\ntime_limit_s = 120.0\nworkload = \"page\"\n\
        [[path]]\n[path.down]\nrate_bps = 20000000\ndelay_ms = 10.0\nbase_rtt_ms = 20.0\n\
        [[path]]\n[path.down]\nrate_bps = 5000000\ndelay_ms = 40.0\nbase_rtt_ms = 80.0\n";
    let config = SimConfig::parse(text, Path::new("two paths"))?;
    let pages: Vec<_> = (0..20).map(gearbox_workload::generate_page).collect::<Result<_, _>>()?;
    let mut runs = Vec::new();
    for _ in 0..repeats {
        let (t, mut decisions, mut plt) = (Instant::now(), 0usize, 0.0);
        for page in &pages {
            let mut load = gearbox_sim::PageLoad::new(&config, page)?;
            let mut gear = gearbox_gears::path::scheduler("minrtt")?;
            let out = load.run_gear(gear.as_mut())?;
            decisions += out.streams.len();
            plt += out.page_load_ms.unwrap_or(f64::NAN);
        }
        runs.push((t.elapsed().as_secs_f64(), decisions, plt / pages.len() as f64));
    }
    runs.sort_by(|x, y| x.0.total_cmp(&y.0));
    let (wall, decisions, plt) = runs[runs.len() / 2];
    println!(
        "\n| page loads, two paths (20 and 5 Mbit/s), stream MinRTT | loads | decisions | wall s | loads/s | decisions/s | mean page load ms |\n|---|---:|---:|---:|---:|---:|---:|"
    );
    println!(
        "| 20 pages of `page` | {} | {decisions} | {wall:.3} | {:.0} | {:.0} | {plt:.0} |",
        pages.len(),
        pages.len() as f64 / wall,
        decisions as f64 / wall
    );
    Ok(())
}
