//! Per-request decision cost of the WiseTrans gear (a benchmark, not a test).
//!
//! One iteration = what the client does per request: `observe` a finished request's
//! record (feature update + Network Monitor evaluation) and `choose` the next one's
//! transport (decision + reason string). The models are synthetic, 300 trees of depth 7
//! (gearbox-policy's generator; §IV-B1 uses depth 7), with Table I's 7 features for TCP
//! and 5 for QUIC. Then one evaluation of each shipped TCP model in `models/wisetrans`
//! (the trained XGBoost and Table II's 128-64 MLP, mode `mlp`). Prints p50/p99 in
//! microseconds.
//!
//! ```text
//! cargo run --release -p gearbox-gears --example decision_bench [-- ITERATIONS]
//! ```

use std::path::Path;
use std::time::{Duration, Instant};

use gearbox_gear_api::{
    ClientRecord, DecisionId, Protocol, Side, TransportChoice, TransportGear, TransportSnapshot, SCHEMA_VERSION,
};
use gearbox_gears::transport::{
    FeatureExtractor, NetworkMonitor, Transport, TransportConfig, Version, WiseTrans, QUIC_FEATURES, TCP_FEATURES,
};
use gearbox_policy::synthetic::{synthetic_model_json, SplitMix64, SyntheticSpec};

fn write_models(dir: &Path) -> std::io::Result<()> {
    for (name, features, seed) in [("tcp", &TCP_FEATURES[..], 1), ("quic", &QUIC_FEATURES[..], 2)] {
        let spec = SyntheticSpec {
            trees: 300,
            depth: 7,
            num_features: features.len(),
            seed,
        };
        std::fs::write(dir.join(format!("{name}.json")), synthetic_model_json(&spec))?;
        let meta = serde_json::json!({
            "format_version": 1,
            "model_version": "bench-synthetic-300x7",
            "objective": "binary:logistic",
            "features": features.iter().map(|n| serde_json::json!({"name": n})).collect::<Vec<_>>(),
            "class_labels": ["stay", "switch"],
            "training_data": {"sha256": "0".repeat(64)},
        });
        std::fs::write(dir.join(format!("{name}.meta.json")), meta.to_string())?;
    }
    Ok(())
}

fn record(rng: &mut SplitMix64, i: u64, protocol: Protocol) -> ClientRecord {
    let rct = 20.0 + 200.0 * rng.unit();
    ClientRecord {
        side: Side::Client,
        schema: SCHEMA_VERSION,
        time_unix_ms: 0.0,
        conn_id: 1 + i % 4,
        server_addr: "127.0.0.1:4433".into(),
        local_addr: "127.0.0.1:50000".into(),
        protocol,
        method: "GET".into(),
        url: "https://127.0.0.1:4433/bytes/20000".into(),
        status: Some(200),
        bytes: 1000 + (rng.unit() * 100_000.0) as u64,
        rct_ms: Some(rct),
        ttfb_ms: Some(rct * (0.2 + 0.6 * rng.unit())),
        new_connection: false,
        handshake_ms: None,
        transport: Some(TransportSnapshot {
            cc: "cubic".into(),
            rtt_ms: 10.0 + 100.0 * rng.unit(),
            sent_packets: 100 * i,
            lost_packets: (i as f64 * 100.0 * 0.02 * rng.unit()) as u64,
            ..TransportSnapshot::default()
        }),
        decision: None,
        decision_id: None,
        click: None,
        error: None,
        retried_from: None,
        retry_lost_ms: None,
        hedged: None,
        hedge_at_ms: None,
        path_index: None,
        path_decision: None,
    }
}

/// p50 and p99 of `ns` (nanoseconds), in microseconds.
fn percentiles(ns: Vec<u64>) -> (f64, f64) {
    let us = gearbox_dataplane::stats::sorted(ns.into_iter().map(|n| n as f64 / 1e3));
    let at = |p: f64| gearbox_dataplane::stats::percentile(&us, p).unwrap_or(f64::NAN);
    (at(50.0), at(99.0))
}

fn main() -> std::io::Result<()> {
    let iterations: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let dir = tempfile::tempdir()?;
    write_models(dir.path())?;
    let origin = "127.0.0.1:4433";
    let t0 = Instant::now();

    for version in [Version::V1, Version::V2] {
        let mut gear = WiseTrans::load(version, Some(dir.path()), TransportConfig::default());
        assert!(gear.score(origin).is_none());
        let mut rng = SplitMix64::new(7);
        let mut protocol = Protocol::H2;
        let mut ns = Vec::with_capacity(iterations);
        let mut decision = String::new();
        let mut decision_id: Option<DecisionId> = None;
        for i in 0..iterations as u64 {
            // Requests finish 5 ms apart: the 10 s window is full (capped at 256).
            let now = t0 + Duration::from_millis(5 * i);
            let mut r = record(&mut rng, i, protocol);
            r.decision = Some(std::mem::take(&mut decision));
            r.decision_id = decision_id.take();
            let start = Instant::now();
            gear.observe(&r, now);
            let d = gear.choose(origin, now);
            ns.push(start.elapsed().as_nanos() as u64);
            protocol = if d.choice == TransportChoice::Quic {
                Protocol::H3
            } else {
                Protocol::H2
            };
            decision = d.reason;
            decision_id = d.id;
        }
        let (p50, p99) = percentiles(ns);
        println!(
            "{}: observe + choose per request: p50 {p50:.2} us, p99 {p99:.2} us ({iterations} requests, 300 trees x depth 7)",
            version.mode()
        );
    }

    // The parts alone: the feature update, and one model evaluation.
    let mut rng = SplitMix64::new(9);
    let mut fx = FeatureExtractor::new(Duration::from_secs(10), 256);
    let mut monitor = NetworkMonitor::load(Some(dir.path()));
    let (mut upd, mut eval) = (Vec::with_capacity(iterations), Vec::with_capacity(iterations));
    for i in 0..iterations as u64 {
        let now = t0 + Duration::from_millis(5 * i);
        let r = record(&mut rng, i, Protocol::H2);
        let start = Instant::now();
        fx.observe(&r, now);
        let f = fx.features(Transport::Tcp, now);
        upd.push(start.elapsed().as_nanos() as u64);
        let start = Instant::now();
        let p = monitor.score(Transport::Tcp, &f);
        eval.push(start.elapsed().as_nanos() as u64);
        std::hint::black_box(p);
    }
    let (u50, u99) = percentiles(upd);
    let (e50, e99) = percentiles(eval);
    println!("feature update alone: p50 {u50:.2} us, p99 {u99:.2} us");
    println!("model evaluation alone (TCP, 7 features): p50 {e50:.2} us, p99 {e99:.2} us");

    // The shipped models, on the same feature rows.
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/wisetrans");
    for (what, prefix) in [("shipped XGBoost tcp.json", ""), ("shipped MLP mlp-tcp.json", "mlp-")] {
        let mut monitor = NetworkMonitor::load_prefixed(Some(&shipped), prefix);
        let mut rng = SplitMix64::new(9);
        let mut fx = FeatureExtractor::new(Duration::from_secs(10), 256);
        let mut eval = Vec::with_capacity(iterations);
        for i in 0..iterations as u64 {
            let now = t0 + Duration::from_millis(5 * i);
            fx.observe(&record(&mut rng, i, Protocol::H2), now);
            let f = fx.features(Transport::Tcp, now);
            let start = Instant::now();
            let p = monitor.score(Transport::Tcp, &f);
            eval.push(start.elapsed().as_nanos() as u64);
            if p.is_none() {
                println!("{what}: not loadable from {} (see the warning)", shipped.display());
                break;
            }
        }
        if eval.len() == iterations {
            let (p50, p99) = percentiles(eval);
            println!("{what} evaluation: p50 {p50:.2} us, p99 {p99:.2} us");
        }
    }
    Ok(())
}
