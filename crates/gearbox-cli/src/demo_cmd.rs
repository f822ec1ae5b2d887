//! `gearbox demo`: the main job, in parts.
//!
//! 1. `loopback`: an edge and a client on loopback; the same seeded workload replayed
//!    over HTTP/1.1, HTTP/2 and HTTP/3 in turn; request-completion-time statistics per
//!    protocol, with both ends' telemetry kept on disk.
//! 2. `lab` (root): the same over an emulated path whose conditions change during the
//!    run (WiFi, then lossy cellular, then UDP throttled: `scenarios/demo.toml`),
//!    with the per-policy table and an HTML report (`gearbox lab demo`).
//! 3. `wisetrans` (root): the WiseTrans comparison on a changing emulated path — TCP-only,
//!    QUIC-only, race, v1, v2 and Ideal (`gearbox lab wisetrans demo`).
//! 4. `floo`: Floo's controller selection against static controllers, in the simulator.
//! 5. `sailfish` (root): the shipped SAILfish policy against stream MinRTT and HTTP/2 over
//!    kernel MPTCP, real edge and multipath client on two contrasting emulated path pairs
//!    (`gearbox lab sailfish evaluate --emulator` on a small grid).
//! 6. `flexhttp` (root): FlexHTTP's loop — agent, global pool, k-means labels, global forest,
//!    client cache, local pool and fine-tuning — choosing HTTP/2 or HTTP/3 per page load on a
//!    clean short and a long lossy emulated path (`gearbox lab flexhttp demo`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use gearbox_client::replay::{replay_requests, RecordLog, RecordingGear, ReplayOptions, Summary};
use gearbox_client::{Client, ClientConfig, StaticTransport, TransportPref, Trust};
use gearbox_edge::{Edge, EdgeConfig};
use gearbox_workload::{Limit, WorkloadSpec};

use crate::client_cmd::{runtime, telemetry_sink};

/// The two contrasting path pairs of the SAILfish part (SAILfish Table 5.2): two
/// low-bandwidth paths of similar rates, and a fast lossy path beside a slow one.
const SAILFISH_DEMO_PAIRS: &str = "t52-low-similar,t52-low-dissimilar";

/// Which parts of the demo run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    /// Every part; the emulated ones only where they can run (root, /dev/net/tun).
    All,
    /// Edge and client on loopback.
    Loopback,
    /// The lab demo over a changing emulated path.
    Lab,
    /// The WiseTrans comparison over a changing emulated path.
    Wisetrans,
    /// Floo's controller selection against static controllers, in the simulator.
    Floo,
    /// SAILfish's stream-to-path scheduling against stream MinRTT and kernel MPTCP on two
    /// contrasting path pairs, in the emulator.
    Sailfish,
    /// FlexHTTP's HTTP/2-or-HTTP/3 choice per page load, with its agent, on a clean short and a
    /// long lossy path, in the emulator.
    Flexhttp,
}

/// Arguments of `gearbox demo`.
#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Which part to run.
    #[arg(long, value_enum, default_value_t = Part::All)]
    pub part: Part,
    /// Workload replayed over each protocol (a built-in name or a TOML file).
    #[arg(long, default_value = "app")]
    pub workload: String,
    /// Workload seed: every protocol gets exactly the same requests.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Seconds of workload replayed per protocol.
    #[arg(long, default_value_t = 30.0)]
    pub duration_s: f64,
    /// Multiply the workload's send times by this factor (0.5: twice as fast).
    #[arg(long, default_value_t = 0.5)]
    pub time_scale: f64,
    /// Directory for the certificate and both ends' telemetry.
    #[arg(long, default_value = "out/demo")]
    pub out: PathBuf,
}

/// Why the emulated parts cannot run here, if they cannot.
fn emulation_unavailable() -> Option<String> {
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false);
    if !root {
        return Some("not root (the emulator creates network namespaces)".into());
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Some("/dev/net/tun is missing".into());
    }
    None
}

/// Runs one part of the Python lab, inheriting the terminal.
fn lab_part(title: &str, args: &[&str]) -> anyhow::Result<()> {
    println!("\n== {title}: gearbox lab {}", args.join(" "));
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let (mut cmd, python) = crate::lab_cmd::python_lab(&args)?;
    let status = cmd.status().map_err(|e| crate::lab_cmd::start_error(&python, &e))?;
    if !status.success() {
        bail!("gearbox lab {} failed ({status})", args.join(" "));
    }
    Ok(())
}

/// Runs the parts of the demo that were asked for.
pub fn run(a: DemoArgs) -> anyhow::Result<()> {
    let part = a.part;
    if matches!(part, Part::All | Part::Loopback) {
        println!("== loopback: edge and client on 127.0.0.1");
        loopback(&a)?;
    }
    if part == Part::Loopback {
        return Ok(());
    }
    let out = a.out.to_string_lossy().into_owned();
    if matches!(part, Part::All | Part::Floo) {
        let dir = format!("{out}/floo");
        lab_part(
            "Floo: the shipped policy against static controllers on 12 held-apart simulated paths",
            &[
                "floo",
                "evaluate",
                "--scenarios",
                "12",
                "--duration-s",
                "120",
                "--out",
                &dir,
            ],
        )?;
    }
    if part == Part::Floo {
        return Ok(());
    }
    if let Some(why) = emulation_unavailable() {
        if part == Part::All {
            println!("\n(skipping the emulated parts: {why}; `gearbox demo --part loopback` is what runs here)");
            return Ok(());
        }
        bail!("the {part:?} part needs the emulator: {why}");
    }
    if matches!(part, Part::All | Part::Lab) {
        let dir = format!("{out}/lab");
        lab_part(
            "changing emulated path (WiFi -> lossy cellular -> UDP throttled)",
            &["demo", "--out", &dir],
        )?;
    }
    if matches!(part, Part::All | Part::Sailfish) {
        let dir = format!("{out}/sailfish");
        lab_part(
            "SAILfish: the shipped policy against stream MinRTT and kernel MPTCP on two contrasting Table 5.2 path pairs, in the emulator",
            &[
                "sailfish",
                "evaluate",
                "--emulator",
                "--realtime-endpoints",
                "--pairs",
                SAILFISH_DEMO_PAIRS,
                "--schemes",
                "sailfish,minrtt,mptcp",
                "--pages",
                "0,3,6",
                "--reps",
                "2",
                "--out",
                &dir,
            ],
        )?;
    }
    if matches!(part, Part::All | Part::Flexhttp) {
        let dir = format!("{out}/flexhttp");
        // A fresh folder each time: the demo starts from an empty agent.
        let _ = std::fs::remove_dir_all(&dir);
        lab_part(
            "FlexHTTP: HTTP/2 or HTTP/3 per page load, with its agent, on a clean short and a long lossy path, in the emulator",
            &["flexhttp", "demo", "--out", &dir],
        )?;
    }
    if matches!(part, Part::All | Part::Wisetrans) {
        let dir = format!("{out}/wisetrans");
        lab_part(
            "WiseTrans: TCP-only, QUIC-only, race, v1, v2, Ideal",
            &["wisetrans", "demo", "--out", &dir],
        )?;
    }
    Ok(())
}

/// The loopback part.
fn loopback(a: &DemoArgs) -> anyhow::Result<()> {
    if !(a.duration_s.is_finite() && a.duration_s > 0.0) {
        bail!("--duration-s must be positive, got {}", a.duration_s);
    }
    if !(a.time_scale.is_finite() && a.time_scale > 0.0) {
        bail!("--time-scale must be positive, got {}", a.time_scale);
    }
    let spec = WorkloadSpec::load(&a.workload).with_context(|| format!("--workload {}", a.workload))?;
    let requests = spec.generate(a.seed, Limit::DurationMs(a.duration_s * 1e3));
    if requests.is_empty() {
        bail!("workload {} gives no requests in {} s", spec.name, a.duration_s);
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("cannot create {}", a.out.display()))?;
    let (cert, key) = (a.out.join("cert.pem"), a.out.join("key.pem"));
    let (edge_log, client_log) = (a.out.join("edge.jsonl"), a.out.join("client.jsonl"));
    for f in [&edge_log, &client_log] {
        let _ = std::fs::remove_file(f);
    }
    gearbox_dataplane::tls::write_self_signed(&["localhost".into(), "127.0.0.1".into()], &cert, &key)?;

    let rt = runtime()?;
    rt.block_on(async {
        let config = EdgeConfig {
            listen: "127.0.0.1:0".parse()?,
            cert: cert.clone(),
            key,
            telemetry: Some(edge_log.clone()),
            ..EdgeConfig::default()
        };
        let edge = Edge::bind(config.clone(), crate::edge_cmd::static_gears(&config)).await?;
        let target = format!("https://localhost:{}", edge.tcp_addr().port());
        println!(
            "gearbox demo: edge on {target} (TCP) and udp {}; workload {} seed {}: {} requests in {} clicks, replayed \
             over each protocol at {}x speed",
            edge.quic_addr(),
            spec.name,
            a.seed,
            requests.len(),
            requests.last().map_or(0, |r| r.click + 1),
            1.0 / a.time_scale
        );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(edge.serve(async move {
            let _ = stopped.await;
        }));

        let sink = telemetry_sink(Some(&client_log))?;
        let log = RecordLog::new();
        let started = Instant::now();
        for (name, transport) in [
            ("h1", TransportPref::H1),
            ("h2", TransportPref::Tcp),
            ("h3", TransportPref::Quic),
        ] {
            let gear = RecordingGear::new(StaticTransport::new(transport), log.clone());
            let client_config = ClientConfig {
                trust: Trust::Roots(vec![cert.clone()]),
                telemetry: sink.clone(),
                request_timeout: Duration::from_secs(60),
                ..ClientConfig::default()
            };
            let client = Client::with_gear(client_config, Box::new(gear)).context("client")?;
            let t = Instant::now();
            let options = ReplayOptions {
                target: target.clone(),
                transport,
                time_scale: a.time_scale,
                paths: 1,
                path_scheduler: None,
                page_version: None,
            };
            replay_requests(&client, &requests, &options).await?;
            client.flush_telemetry().await;
            println!("  {name}: replayed in {:.1} s", t.elapsed().as_secs_f64());
        }
        let _ = stop.send(());
        serving.await.context("edge task")?;
        let summary = Summary::new(&spec.name, a.seed, started.elapsed(), &log.take(), &[]);
        println!();
        summary.write_table(&mut std::io::stdout().lock(), Some(&client_log))?;
        let edge_records = std::fs::read_to_string(&edge_log)
            .map(|t| t.lines().count())
            .unwrap_or(0);
        println!("edge telemetry: {edge_records} records in {}", edge_log.display());
        Ok(())
    })
}
