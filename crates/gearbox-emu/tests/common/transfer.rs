#![allow(dead_code)]
//! One bulk download from our edge over an emulated bottleneck, measured at the
//! bottleneck itself from the relay's event log. Shared by the congestion-control tests
//! (`tests/cc.rs`) and the validation tables of docs/cc.md (`examples/cc_validate.rs`).
//!
//! Utilisation is counted where it happens: the bytes that left the downlink's
//! bottleneck (`departed_us` of its deliveries) over the link rate, in the steady part of
//! the download: from `skip` after the first departure (past slow start) to one second
//! before the last (before the tail, where the last losses wait for a probe timeout
//! with nothing else to send). Queueing delay is `departed_us` minus the packet's
//! enqueue time.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gearbox_emu::{EmuConfig, RunOptions};

/// A download to run.
#[derive(Debug, Clone)]
pub struct Download {
    /// `gearbox edge --cc` (QUIC) or `--tcp-cc` (TCP) value.
    pub cc: String,
    /// `quic` or `tcp`.
    pub proto: &'static str,
    /// Bottleneck rate, Mbit/s, both directions.
    pub mbit: f64,
    /// Base RTT, ms.
    pub rtt_ms: f64,
    /// Queue limit in BDPs.
    pub bdps: f64,
    /// Random loss rate, each direction.
    pub loss: f64,
    /// Size of the download in seconds at line rate.
    pub seconds: f64,
    /// Flows downloading at once (each `size / flows` bytes on its own connection).
    pub flows: usize,
}

impl Download {
    /// A QUIC download with controller `cc`: 8 s at line rate, one flow, no loss.
    pub fn quic(cc: &str, mbit: f64, rtt_ms: f64, bdps: f64) -> Self {
        Download {
            cc: cc.into(),
            proto: "quic",
            mbit,
            rtt_ms,
            bdps,
            loss: 0.0,
            seconds: 8.0,
            flows: 1,
        }
    }
}

/// What the downlink's bottleneck saw, and the client's completion times.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Departed bytes over the link rate after the skip.
    pub utilisation: f64,
    /// Mean queueing delay of packets departing after the skip, ms.
    pub mean_queue_ms: f64,
    /// Drops at the queue and by random loss over arrivals.
    pub drop_rate: f64,
    /// Each flow's completion time, s.
    pub rct_s: Vec<f64>,
    /// Bytes of each flow.
    pub flow_bytes: f64,
    /// Bottleneck rate, bytes per second.
    pub rate_bytes: f64,
}

impl Measured {
    /// Jain's fairness index of two equal flows' throughputs while both ran. Flow 1
    /// finished at t1 with all its bytes; after t1 flow 2 ran alone at the bottleneck's
    /// achieved rate R until t2, so by t1 it had sent S - R (t2 - t1). Counting 1 / RCT
    /// instead would hide most of an unfairness, since the slower flow speeds up once
    /// alone.
    pub fn jain(&self) -> f64 {
        let mut t = self.rct_s.clone();
        t.sort_by(f64::total_cmp);
        let (t1, t2) = (t[0], t[t.len() - 1]);
        let r = self.rate_bytes * self.utilisation;
        let x1 = self.flow_bytes / t1;
        let x2 = ((self.flow_bytes - r * (t2 - t1)) / t1).max(0.0);
        (x1 + x2).powi(2) / (2.0 * (x1 * x1 + x2 * x2))
    }
}

/// The `gearbox` binary: `GEARBOX_BIN`, or the one beside this executable's folder.
pub fn gearbox() -> PathBuf {
    if let Some(bin) = std::env::var_os("GEARBOX_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().expect("own path");
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    for _ in 0..2 {
        if dir.join("gearbox").is_file() {
            return dir.join("gearbox");
        }
        dir = dir.parent().map(Path::to_path_buf).unwrap_or_default();
    }
    panic!("no gearbox binary: run `cargo build -p gearbox-cli` first or set GEARBOX_BIN")
}

/// A symmetric single path: `mbit` Mbit/s each way, `rtt_ms` of base RTT (half each
/// way), a drop-tail queue of `bdps` BDPs and Bernoulli `loss` each way.
pub fn single_path(mbit: f64, rtt_ms: f64, bdps: f64, loss: f64) -> Result<EmuConfig, String> {
    let rate = (mbit * 1e6) as u64;
    let loss = if loss > 0.0 {
        format!("\n[path.{{dir}}.loss]\nmodel = \"bernoulli\"\nloss_rate = {loss}")
    } else {
        String::new()
    };
    let link = format!(
        "rate_bps = {rate}\ndelay_ms = {}\nbase_rtt_ms = {rtt_ms}\n[path.{{dir}}.queue]\nlimit_bdp = {bdps}{loss}",
        rtt_ms / 2.0
    );
    let text = format!(
        "topology = \"single\"\n[[path]]\n[path.uplink]\n{}\n[path.downlink]\n{}\n",
        link.replace("{dir}", "uplink"),
        link.replace("{dir}", "downlink")
    );
    EmuConfig::from_toml_str(&text, "single-path.toml", None).map_err(|e| e.to_string())
}

/// A certificate for the edge at 10.0.0.1 in `scratch`: (cert, key).
pub fn edge_certificate(scratch: &Path) -> Result<(PathBuf, PathBuf), String> {
    std::fs::create_dir_all(scratch).map_err(|e| e.to_string())?;
    let (cert, key) = (scratch.join("cert.pem"), scratch.join("key.pem"));
    gearbox_dataplane::tls::write_self_signed(&["10.0.0.1".into()], &cert, &key).map_err(|e| e.to_string())?;
    Ok((cert, key))
}

/// Runs `d` in a fresh pair of namespaces; errors say what failed.
pub fn run(d: &Download, scratch: &Path) -> Result<Measured, String> {
    let bin = gearbox();
    let (cert, key) = edge_certificate(scratch)?;
    let rate = (d.mbit * 1e6) as u64;
    let cfg = single_path(d.mbit, d.rtt_ms, d.bdps, d.loss)?;
    let total = (d.mbit * 1e6 / 8.0 * d.seconds) as u64;
    let each = total / d.flows.max(1) as u64;
    let events = scratch.join("events.jsonl");
    let records = scratch.join("client.jsonl");
    let _ = std::fs::remove_file(&records);
    let cc_flag = if d.proto == "tcp" { "--tcp-cc" } else { "--cc" };
    let get = format!(
        "{} get --proto {} --insecure --timeout-s 300 --out {} https://10.0.0.1:4433/bytes/{each} > /dev/null",
        bin.display(),
        d.proto,
        records.display()
    );
    let client = (0..d.flows.max(1))
        .map(|_| format!("{get} &"))
        .collect::<Vec<_>>()
        .join(" ")
        + " wait";
    let options = RunOptions {
        emulator: gearbox_emu::EmulatorOptions {
            events: Some(events.clone()),
            ..Default::default()
        },
        server: Some(format!(
            "exec {} edge --listen 10.0.0.1:4433 --cert {} --key {} {cc_flag} {} --max-bytes {each}",
            bin.display(),
            cert.display(),
            key.display(),
            d.cc
        )),
        client: Some(client),
        duration: Some(Duration::from_secs(330)),
        ready_ports: vec![if d.proto == "tcp" { "4433/tcp" } else { "4433/udp" }.parse().unwrap()],
        // The controllers are measured against the emulated path, not the host's
        // scheduler (Copa reads a CPU-starved endpoint's late ACKs as queueing).
        realtime_endpoints: true,
        ..RunOptions::default()
    };
    let outcome = gearbox_emu::run(&cfg, &options).map_err(|e| format!("emu run: {e}"))?;
    if outcome.exit_code != 0 {
        return Err(format!(
            "{} {}: the client exited with {}",
            d.proto, d.cc, outcome.exit_code
        ));
    }
    let rct_s: Vec<f64> = std::fs::read_to_string(&records)
        .map_err(|e| format!("{}: {e}", records.display()))?
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|r| r["rct_ms"].as_f64())
        .map(|ms| ms / 1e3)
        .collect();
    if rct_s.len() != d.flows.max(1) {
        return Err(format!("{} of {} downloads completed", rct_s.len(), d.flows));
    }
    let mut m = bottleneck(&events, rate as f64, Duration::from_secs(2))?;
    m.rct_s = rct_s;
    m.flow_bytes = each as f64;
    m.rate_bytes = rate as f64 / 8.0;
    Ok(m)
}

/// Summarises the downlink of an event log.
pub fn bottleneck(events: &Path, rate_bps: f64, skip: Duration) -> Result<Measured, String> {
    let file = std::fs::File::open(events).map_err(|e| format!("{}: {e}", events.display()))?;
    let mut enqueued: HashMap<u64, u64> = HashMap::new();
    let mut departures: Vec<(u64, u64, u64)> = Vec::new(); // (departed, len, queue)
    let (mut arrived, mut dropped) = (0u64, 0u64);
    for line in std::io::BufReader::new(file).lines() {
        let line = line.map_err(|e| e.to_string())?;
        let v: serde_json::Value = serde_json::from_str(&line).map_err(|e| e.to_string())?;
        if v["dir"] != "down" {
            continue;
        }
        let seq = v["seq"].as_u64().unwrap_or(0);
        match v["event"].as_str().unwrap_or("") {
            "enqueue" => {
                arrived += 1;
                enqueued.insert(seq, v["t_us"].as_u64().unwrap_or(0));
            }
            "drop" => dropped += 1,
            "deliver" => {
                let departed = v["departed_us"].as_u64().unwrap_or(0);
                let queue = enqueued.remove(&seq).map_or(0, |t| departed.saturating_sub(t));
                departures.push((departed, v["len"].as_u64().unwrap_or(0), queue));
            }
            _ => {}
        }
    }
    departures.sort_unstable();
    let first = departures.first().ok_or("nothing crossed the downlink")?.0;
    let from = first + skip.as_micros() as u64;
    let to = departures.last().map_or(0, |d| d.0).saturating_sub(1_000_000);
    if to <= from + 1_000_000 {
        return Err(format!(
            "download too short to measure: {} us",
            to.saturating_sub(first)
        ));
    }
    let late: Vec<&(u64, u64, u64)> = departures.iter().filter(|d| d.0 > from && d.0 <= to).collect();
    let bytes: u64 = late.iter().map(|d| d.1).sum();
    Ok(Measured {
        utilisation: bytes as f64 * 8.0 / ((to - from) as f64 / 1e6) / rate_bps,
        mean_queue_ms: late.iter().map(|d| d.2).sum::<u64>() as f64 / late.len().max(1) as f64 / 1e3,
        drop_rate: dropped as f64 / arrived.max(1) as f64,
        rct_s: Vec::new(),
        flow_bytes: 0.0,
        rate_bytes: rate_bps / 8.0,
    })
}
