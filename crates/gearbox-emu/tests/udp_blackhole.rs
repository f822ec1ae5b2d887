//! UDP blackholed mid-session (issue "When UDP breaks mid-session", docs/client.md
//! "Fallback"): our edge and `gearbox load` across an emulated 40 ms path whose policer
//! starts dropping every UDP packet, both ways, a few seconds into the replay, as a
//! firewall or a mobile network does. The client's silence watch must give up the QUIC
//! connection in about a second, so that:
//!
//! - in the modes that can fall back (the Chromium race, and `auto` with a gear that
//!   picks QUIC), every request completes, the ones caught on QUIC retried over TCP
//!   (`retried_from = "h3"`), and none waits anywhere near QUIC's 30 s idle timeout;
//! - QUIC-only fails the requests UDP cannot carry with a typed error, none waiting
//!   for the idle timeout (a new handshake into the blackhole waits out the client's
//!   bound for a request without a fallback, 10 s, before it fails).
//!
//! Needs root and /dev/net/tun, like every emulator test, and the `gearbox` binary.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{config, edge_and_load, setup, EdgeAndLoad};

/// When the policer starts blocking UDP, ms after the links start (the client starts
/// after the edge is ready, a fraction of a second later).
const BLOCK_AT_MS: u64 = 3_000;
/// Send times of the replay (`--duration-s`).
const DURATION_S: u64 = 8;
/// QUIC's idle timeout in the client (`ClientConfig::idle_timeout`, 30 s): what a
/// request on a blackholed connection would wait without the silence watch.
const IDLE_TIMEOUT_MS: f64 = 30_000.0;
/// The client's bound on a QUIC handshake of a request without a fallback, QUIC-only's
/// (`gearbox_client::silence::HANDSHAKE_LIMIT_WITHOUT_FALLBACK`, Chromium's 10 s).
const QUIC_ONLY_HANDSHAKE_MS: f64 = 10_000.0;

/// A symmetric 20 Mbit/s path with 20 ms each way, UDP blocked both ways from
/// `BLOCK_AT_MS`.
fn blackholed_path() -> gearbox_emu::EmuConfig {
    let link = format!(
        "rate_bps = 20_000_000\ndelay_ms = 20.0\n[path.{{dir}}.queue]\nlimit_packets = 200\n\
         [[path.{{dir}}.schedule]]\nat_ms = {BLOCK_AT_MS}.0\npolicer = {{ action = \"block\", protocol = \"udp\" }}\n"
    );
    config(&format!(
        "topology = \"single\"\n[[path]]\n[path.uplink]\n{}\n[path.downlink]\n{}\n",
        link.replace("{dir}", "uplink"),
        link.replace("{dir}", "downlink")
    ))
}

/// Replays the `app` workload (seed 26: clicks at 0, 1.1, 3.9 and 6.0 s, `DURATION_S` of send times) against our edge
/// across the blackholed path with `load_args` choosing the transport.
fn replay(name: &str, load_args: &str) -> EdgeAndLoad {
    // Far above a replay that never waits (about DURATION_S + a few seconds), far below
    // one whose requests wait for the idle timeout.
    edge_and_load(
        &format!("blackhole-{name}"),
        &blackholed_path(),
        &format!("--workload app --seed 26 --duration-s {DURATION_S} {load_args}"),
        Duration::from_secs(55),
    )
}

fn str_of<'a>(r: &'a serde_json::Value, field: &str) -> Option<&'a str> {
    r[field].as_str()
}

/// Checks of a fallback mode: every request completed, some on QUIC before the block,
/// some retried from QUIC over TCP after it, and none close to the idle timeout.
fn assert_falls_back(name: &str, r: &EdgeAndLoad) {
    let n = r.records.len();
    assert!(n >= 10, "{name}: only {n} requests");
    let failed: Vec<_> = r.records.iter().filter(|x| !x["error"].is_null()).collect();
    assert!(failed.is_empty(), "{name}: requests failed: {failed:?}");
    let on_quic = r.records.iter().filter(|x| str_of(x, "protocol") == Some("h3")).count();
    assert!(on_quic > 0, "{name}: no request ran on QUIC before the block");
    let retried: Vec<_> = r
        .records
        .iter()
        .filter(|x| str_of(x, "retried_from") == Some("h3"))
        .collect();
    assert!(
        !retried.is_empty(),
        "{name}: no request was retried from QUIC; decisions: {:?}",
        r.records.iter().map(|x| &x["decision"]).collect::<Vec<_>>()
    );
    for x in &retried {
        assert_ne!(
            str_of(x, "protocol"),
            Some("h3"),
            "{name}: a retry ran on QUIC again: {x}"
        );
        let lost = x["retry_lost_ms"]
            .as_f64()
            .expect("a retried record says the time lost");
        let rct = x["rct_ms"].as_f64().expect("a retried request completed");
        assert!(lost > 0.0 && lost <= rct, "{name}: retry_lost_ms {lost} vs rct {rct}");
        assert!(
            str_of(x, "decision").is_some_and(|d| d.contains("fallback=tcp-retry")),
            "{name}: {x}"
        );
    }
    let worst = r
        .records
        .iter()
        .filter_map(|x| x["rct_ms"].as_f64())
        .fold(0.0, f64::max);
    eprintln!(
        "{name}: {n} requests, {on_quic} on QUIC, {} retried over TCP (time lost {:?} ms), slowest {worst:.0} ms",
        retried.len(),
        retried
            .iter()
            .map(|x| x["retry_lost_ms"].as_f64().unwrap_or(f64::NAN).round())
            .collect::<Vec<_>>()
    );
    assert!(
        worst < IDLE_TIMEOUT_MS / 3.0,
        "{name}: a request took {worst} ms, as if it waited for the idle timeout"
    );
    // After the first retry QUIC is broken: no later request goes to QUIC again.
    let first_retry = r
        .records
        .iter()
        .filter(|x| str_of(x, "retried_from") == Some("h3"))
        .filter_map(|x| x["time_unix_ms"].as_f64().zip(x["retry_lost_ms"].as_f64()))
        .map(|(t, lost)| t + lost)
        .fold(f64::INFINITY, f64::min);
    let late_quic: Vec<_> = r
        .records
        .iter()
        .filter(|x| x["time_unix_ms"].as_f64().is_some_and(|t| t > first_retry + 100.0))
        .filter(|x| str_of(x, "protocol") == Some("h3"))
        .collect();
    assert!(late_quic.is_empty(), "{name}: QUIC used after it broke: {late_quic:?}");
    let _ = std::fs::remove_dir_all(&r.dir);
}

#[test]
fn the_race_retries_over_tcp_when_udp_goes_silent_and_nothing_waits_for_the_idle_timeout() {
    let _g = setup();
    let r = replay("race", "--gear race");
    assert_falls_back("race", &r);
}

#[test]
fn a_gear_that_picks_quic_falls_back_to_tcp_when_udp_goes_silent() {
    let _g = setup();
    // `auto` with a gear that always answers QUIC: every request is a fallback mode's.
    let r = replay("auto-quic", "--proto auto --gear quic");
    assert_falls_back("auto-quic", &r);
    // Once QUIC broke, the gear's QUIC choices go straight to TCP.
    assert!(
        r.records
            .iter()
            .any(|x| str_of(x, "decision").is_some_and(|d| d.contains("fallback=quic-broken"))),
        "no request skipped the broken QUIC"
    );
}

#[test]
fn quic_only_fails_fast_with_a_typed_error_when_udp_goes_silent() {
    let _g = setup();
    let r = replay("quic-only", "--proto quic");
    let ok = r.records.iter().filter(|x| x["error"].is_null()).count();
    let failed: Vec<_> = r.records.iter().filter(|x| !x["error"].is_null()).collect();
    assert!(ok > 0, "no request completed before the block");
    assert!(!failed.is_empty(), "no request failed after the block");
    for x in &failed {
        // In flight when the path went silent: `quic_silent`; a new connection's
        // handshake into the blackhole: `timeout` (after the 10 s a handshake without
        // a fallback may take).
        let kind = str_of(x, "error").unwrap_or_default();
        assert!(
            matches!(kind, "quic_silent" | "timeout"),
            "unexpected error {kind}: {x}"
        );
        assert!(x["retried_from"].is_null(), "QUIC-only never retries: {x}");
        assert_eq!(str_of(x, "protocol"), Some("h3"));
    }
    assert!(
        failed.iter().any(|x| str_of(x, "error") == Some("quic_silent")),
        "no request failed as silent: {failed:?}"
    );
    // Every request ended long before any could have waited for the idle timeout: the
    // whole replay (sends over DURATION_S) took at most DURATION_S plus one QUIC-only
    // handshake bound (the requests after the silence wait for one new handshake and
    // fail with it) and 2 s of slack; a request that waited for the idle timeout from
    // the block (BLOCK_AT_MS) would end 3 + 30 = 33 s in. Until the QUIC-only handshake
    // bound became 10 s the replay ended after about 7 s and this bound was 18 s.
    let elapsed = r.summary["elapsed_s"].as_f64().expect("elapsed_s in the summary");
    eprintln!(
        "quic-only: {ok} completed, {} failed ({:?}), replay took {elapsed:.1} s",
        failed.len(),
        failed.iter().filter_map(|x| str_of(x, "error")).collect::<Vec<_>>()
    );
    assert!(
        elapsed < DURATION_S as f64 + QUIC_ONLY_HANDSHAKE_MS / 1000.0 + 2.0,
        "the replay took {elapsed} s: a request waited for the idle timeout"
    );
    let _ = std::fs::remove_dir_all(&r.dir);
}

#[test]
fn wisetrans_v2_completes_every_request_when_udp_goes_silent() {
    let _g = setup();
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/wisetrans");
    let r = replay(
        "wisetrans-v2",
        &format!("--proto auto --gear wisetrans-v2 --model-dir {}", models.display()),
    );
    let failed: Vec<_> = r.records.iter().filter(|x| !x["error"].is_null()).collect();
    assert!(failed.is_empty(), "requests failed: {failed:?}");
    let worst = r
        .records
        .iter()
        .filter_map(|x| x["rct_ms"].as_f64())
        .fold(0.0, f64::max);
    let retried = r
        .records
        .iter()
        .filter(|x| str_of(x, "retried_from") == Some("h3"))
        .count();
    let failovers = r
        .records
        .iter()
        .filter(|x| str_of(x, "decision").is_some_and(|d| d.contains(";failover=quic:")))
        .count();
    eprintln!(
        "wisetrans-v2: {} requests, {retried} retried over TCP, {failovers} decision(s) after a failover, slowest {worst:.0} ms",
        r.records.len()
    );
    assert!(
        worst < IDLE_TIMEOUT_MS / 3.0,
        "a request took {worst} ms, as if it waited for the idle timeout"
    );
    let _ = std::fs::remove_dir_all(&r.dir);
}
