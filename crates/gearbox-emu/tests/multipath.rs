//! Multipath page loads across two emulated paths (docs/client.md "Multipath"): our
//! edge in the server namespace, `gearbox load --workload page --paths A,B --scheduler
//! NAME` in the client namespace, each path its own pair of links. Every scheduler
//! loads its pages with every object on the path it chose; a path whose links start
//! dropping everything mid-load is taken out and its requests go on the other.
//!
//! Figures are printed (mean object completion and page load time per scheduler), not
//! asserted: timings depend on the machine. Needs root and /dev/net/tun, like every
//! emulator test, and the `gearbox` binary.

mod common;

use std::time::Duration;

use common::{config, edge_and_load, gearbox_bin, read_records, scratch, setup};
use gearbox_emu::RunOptions;

/// Path 0: 20 Mbit/s, 10 ms each way; path 1: 5 Mbit/s, 30 ms each way (a WiFi-like
/// and an LTE-like path); `extra` is appended to path 1's links (a schedule).
fn two_paths(extra_path1: &str) -> gearbox_emu::EmuConfig {
    let link = |rate: u64, delay: f64, dir: &str, extra: &str| {
        format!(
            "rate_bps = {rate}\ndelay_ms = {delay}\nbase_rtt_ms = {}\n[path.{dir}.queue]\nlimit_bdp = 2.0\n{extra}",
            2.0 * delay
        )
    };
    config(&format!(
        "topology = \"multipath\"\n\
         [[path]]\nname = \"wifi\"\n[path.uplink]\n{}\n[path.downlink]\n{}\n\
         [[path]]\nname = \"lte\"\n[path.uplink]\n{}\n[path.downlink]\n{}\n",
        link(20_000_000, 10.0, "uplink", ""),
        link(20_000_000, 10.0, "downlink", ""),
        link(5_000_000, 30.0, "uplink", &extra_path1.replace("{dir}", "uplink")),
        link(5_000_000, 30.0, "downlink", &extra_path1.replace("{dir}", "downlink")),
    ))
}

/// `gearbox load` of 60 objects of the `page` workload over both paths with `scheduler`,
/// against our edge across `emu`; returns the client records.
fn load(name: &str, emu: &gearbox_emu::EmuConfig, scheduler: &str) -> Vec<serde_json::Value> {
    let args = format!(
        "--workload page --seed 3 --requests 60 --time-scale 0.01 --paths \"$GEARBOX_CLIENT_ADDRS\" --scheduler {scheduler}"
    );
    let run = edge_and_load(&format!("multipath-{name}"), emu, &args, Duration::from_secs(90));
    let _ = std::fs::remove_dir_all(&run.dir);
    run.records
}

#[test]
fn every_scheduler_loads_pages_over_two_emulated_paths() {
    let _guard = setup();
    let emu = two_paths("");
    for scheduler in ["minrtt", "round-robin", "single-best", "ecf", "blest"] {
        let records = load(scheduler, &emu, scheduler);
        assert!(records.len() >= 20, "{scheduler}: only {} requests", records.len());
        let mut per_path = [0usize; 2];
        let mut rct = Vec::new();
        for r in &records {
            assert!(r["error"].is_null(), "{scheduler}: {r}");
            assert_eq!(r["protocol"], "h3");
            let path = r["path_index"].as_u64().expect("path_index") as usize;
            let reason = r["path_decision"].as_str().expect("path_decision");
            assert!(reason.starts_with(&format!("{scheduler}:")), "{reason}");
            let local = r["local_addr"].as_str().unwrap();
            assert!(
                local.starts_with(&format!("100.64.{path}.1:")),
                "path {path} left from {local}"
            );
            per_path[path] += 1;
            rct.push(r["rct_ms"].as_f64().unwrap());
        }
        if scheduler == "round-robin" {
            assert!(per_path.iter().all(|&n| n > 0), "round-robin uses both: {per_path:?}");
        }
        let mean = rct.iter().sum::<f64>() / rct.len() as f64;
        println!(
            "{scheduler:>12}: {} objects, per path {per_path:?}, mean object completion {mean:.1} ms",
            records.len()
        );
    }
}

#[test]
fn a_path_that_goes_dark_mid_load_is_taken_out_and_every_object_arrives() {
    let _guard = setup();
    // Path 1 drops every UDP packet both ways from 1.5 s into the run.
    let dark = "[[path.{dir}.schedule]]\nat_ms = 1500.0\npolicer = { action = \"block\", protocol = \"udp\" }\n";
    let records = load("dark", &two_paths(dark), "round-robin");
    let failed: Vec<_> = records.iter().filter(|r| !r["error"].is_null()).collect();
    let done: Vec<_> = records.iter().filter(|r| r["error"].is_null()).collect();
    assert!(!failed.is_empty(), "no request was caught on path 1 when it went dark");
    for r in &failed {
        assert_eq!(r["path_index"], 1, "only the dark path fails: {r}");
    }
    let reissued = done
        .iter()
        .filter(|r| r["path_decision"].as_str().unwrap_or("").contains(";reissued-from=1"))
        .count();
    // Each failed attempt and each re-issue, named, so that a mismatch can be read from
    // the test's output alone (seen once, under a load average of 7: 2 failed, 1 re-issued).
    let show = |rs: &[&serde_json::Value]| -> Vec<String> {
        rs.iter()
            .map(|r| format!("{} {} {}", r["url"], r["error"], r["path_decision"]))
            .collect()
    };
    let reissues: Vec<_> = done
        .iter()
        .copied()
        .filter(|r| r["path_decision"].as_str().unwrap_or("").contains(";reissued-from=1"))
        .collect();
    assert_eq!(
        reissued,
        failed.len(),
        "every failed request was sent again: failed {:#?}, re-issued {:#?}",
        show(&failed),
        show(&reissues)
    );
    println!(
        "dark path: {} objects, {} failed on path 1 and were re-issued on path 0",
        done.len(),
        failed.len()
    );
}

/// One `MPTcpExt` counter from a copy of a namespace's `/proc/net/netstat`.
fn mptcp_counter(netstat: &str, name: &str) -> u64 {
    let lines: Vec<&str> = netstat.lines().filter(|l| l.starts_with("MPTcpExt:")).collect();
    assert_eq!(lines.len(), 2, "no MPTCP counters in the client namespace");
    lines[0]
        .split_whitespace()
        .zip(lines[1].split_whitespace())
        .find(|(n, _)| *n == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or_else(|| panic!("no MPTCP counter {name}"))
}

#[test]
fn kernel_mptcp_carries_http2_page_loads_over_both_emulated_paths() {
    let _guard = setup();
    let enabled = std::fs::read_to_string("/proc/sys/net/mptcp/enabled").unwrap_or_default();
    assert_eq!(enabled.trim(), "1", "MPTCP is off: `sysctl -w net.mptcp.enabled=1`");
    let bin = gearbox_bin();
    let dir = scratch("multipath-mptcp");
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    gearbox_dataplane::tls::write_self_signed(&["10.0.0.1".into()], &cert, &key).unwrap();
    let telemetry = dir.join("client.jsonl");
    let netstat = dir.join("netstat.txt");
    let _ = std::fs::remove_file(&telemetry);
    // The lab's MPTCP setup: the edge listens on an MPTCP socket; the client namespace
    // has path 1's address as a subflow endpoint, so the kernel joins a second subflow
    // over it to every connection made from path 0's address (the kernel's default
    // scheduler then spreads packets over both).
    let limits = "ip mptcp limits set subflow 2 add_addr_accepted 2";
    let options = RunOptions {
        server: Some(format!(
            "{limits} && exec {} edge --mptcp --listen 10.0.0.1:4433 --cert {} --key {}",
            bin.display(),
            cert.display(),
            key.display()
        )),
        client: Some(format!(
            "{limits} && ip mptcp endpoint add 100.64.1.1 dev gbx0 subflow && \
             {} load --workload page --seed 3 --requests 60 --time-scale 0.01 --proto tcp --mptcp \
             --local-addr 100.64.0.1 --target https://10.0.0.1:4433 --insecure --telemetry {} --json > /dev/null; \
             rc=$?; cat /proc/net/netstat > {}; exit $rc",
            bin.display(),
            telemetry.display(),
            netstat.display()
        )),
        duration: Some(Duration::from_secs(90)),
        ready_ports: vec!["4433/tcp".parse().unwrap(), "4433/udp".parse().unwrap()],
        ..RunOptions::default()
    };
    let outcome = gearbox_emu::run(&two_paths(""), &options).unwrap_or_else(|e| panic!("emu run: {e}"));
    assert_eq!(outcome.exit_code, 0, "gearbox load over MPTCP failed");
    let records = read_records(&telemetry);
    assert!(records.len() >= 20, "only {} requests", records.len());
    for r in &records {
        assert!(r["error"].is_null(), "{r}");
        assert_eq!(r["protocol"], "h2");
    }
    let netstat = std::fs::read_to_string(&netstat).unwrap();
    let capable = mptcp_counter(&netstat, "MPCapableSYNACKRX");
    let joined = mptcp_counter(&netstat, "MPJoinSynAckRx");
    assert!(capable > 0, "the edge did not agree to MPTCP");
    assert!(joined > 0, "no second subflow joined over path 1");
    let mean = records.iter().map(|r| r["rct_ms"].as_f64().unwrap()).sum::<f64>() / records.len() as f64;
    println!(
        "mptcp: {} objects, {capable} MPTCP connections, {joined} subflows joined, mean object completion {mean:.1} ms",
        records.len()
    );
}
