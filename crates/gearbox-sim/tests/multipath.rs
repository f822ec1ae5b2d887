//! Page loads on a multipath client in virtual time (SAILfish §4.2.1: one decision per
//! stream, one QUIC connection per path).

use std::path::Path;

use gearbox_sim::{PageLoad, SimConfig};
use gearbox_workload::generate_page;

/// Two paths: path 0 fast (50 Mbit/s, 10 ms RTT), path 1 slow (2 Mbit/s, 100 ms RTT).
fn two_paths() -> SimConfig {
    let text = "seed = 3\nduration_s = 1.0\ntime_limit_s = 120.0\nworkload = \"page\"\n\
        [[path]]\nname = \"wifi\"\n[path.down]\nrate_bps = 50000000\ndelay_ms = 5.0\nbase_rtt_ms = 10.0\n\
        [[path]]\nname = \"lte\"\n[path.down]\nrate_bps = 2000000\ndelay_ms = 50.0\nbase_rtt_ms = 100.0\n";
    SimConfig::parse(text, Path::new("mp.toml")).unwrap()
}

fn load_on(path: usize, page_seed: u64) -> gearbox_sim::PageOutcome {
    let page = generate_page(page_seed).unwrap();
    let mut load = PageLoad::new(&two_paths(), &page).unwrap();
    load.run(|_| (path, "test".into())).unwrap()
}

#[test]
fn every_object_of_a_page_arrives_on_the_path_it_was_given() {
    let page = generate_page(11).unwrap();
    let mut load = PageLoad::new(&two_paths(), &page).unwrap();
    assert_eq!(load.paths(), 2);
    let mut order = Vec::new();
    let out = load
        .run(|r| {
            order.push(r.object);
            assert_eq!(r.paths.len(), 2);
            (r.object % 2, format!("alternate;object={}", r.object))
        })
        .unwrap();
    assert!(!out.timed_out);
    assert_eq!(out.streams.len(), page.objects.len());
    // The HTML root is requested first, and nothing before its dependencies arrived.
    assert_eq!(order[0], 0);
    for s in &out.streams {
        assert_eq!(s.path, Some(s.object % 2));
        let o = &page.objects[s.object];
        for &d in &o.depends_on {
            assert!(out.streams[d].done_ms.unwrap() <= s.discovered_ms.unwrap());
        }
        assert!(s.completion_ms.unwrap() > 0.0);
    }
    // Each record names its path and the scheduler's reason, and the local address is
    // the path's own.
    let records: Vec<serde_json::Value> = load
        .records()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), page.objects.len());
    for r in &records {
        let path = r["path_index"].as_u64().unwrap();
        assert!(
            r["path_decision"].as_str().unwrap().starts_with("alternate;object="),
            "{r}"
        );
        assert!(
            r["local_addr"]
                .as_str()
                .unwrap()
                .starts_with(&format!("10.0.{path}.2:")),
            "{r}"
        );
    }
}

#[test]
fn the_fast_path_loads_a_page_faster_than_the_slow_one() {
    for seed in [1, 2] {
        let fast = load_on(0, seed).page_load_ms.unwrap();
        let slow = load_on(1, seed).page_load_ms.unwrap();
        assert!(fast * 2.0 < slow, "page {seed}: fast {fast:.0} ms, slow {slow:.0} ms");
    }
}

#[test]
fn a_decision_sees_each_path_as_the_client_knows_it() {
    let page = generate_page(5).unwrap();
    let mut load = PageLoad::new(&two_paths(), &page).unwrap();
    let mut seen = Vec::new();
    // The root on the slow path, so both handshakes are done before the rest.
    load.run(|r| {
        seen.push(r.paths.clone());
        (usize::from(r.object == 0), "root slow, the rest fast".into())
    })
    .unwrap();
    // Before its handshake a path has no RTT; once both are done, the sRTTs tell the
    // paths apart.
    assert_eq!(seen[0][1].srtt_ms, None);
    let late = seen.last().unwrap();
    assert!(
        late[0].srtt_ms.unwrap() < 40.0 && late[1].srtt_ms.unwrap() >= 100.0,
        "{late:?}"
    );
    assert_eq!(late[0].local_addr, "10.0.0.2");
    // Counters cover the load so far; a delivery rate, once measured, is below the
    // link's 50 Mbit/s.
    assert!(
        late[0].sent_packets > 0 && late[0].min_rtt_ms.unwrap() >= 10.0,
        "{late:?}"
    );
    let rate = seen.iter().filter_map(|s| s[0].delivery_rate_bps).max().unwrap_or(0);
    assert!(rate < 50_000_000, "{rate}");
}

#[test]
fn a_path_gear_schedules_a_whole_page() {
    let page = generate_page(8).unwrap();
    let mut load = PageLoad::new(&two_paths(), &page).unwrap();
    let mut gear = gearbox_gears::path::scheduler("minrtt").unwrap();
    let out = load.run_gear(gear.as_mut()).unwrap();
    assert!(!out.timed_out);
    assert!(out
        .streams
        .iter()
        .all(|s| s.path.is_some() && s.completion_ms.is_some()));
    let records: Vec<serde_json::Value> = load
        .records()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(records
        .iter()
        .all(|r| r["path_decision"].as_str().unwrap().starts_with("minrtt:")));
}

#[test]
fn the_same_seed_and_choices_give_the_same_load() {
    assert_eq!(load_on(0, 4), load_on(0, 4));
}

#[test]
fn a_path_that_does_not_exist_is_refused_with_its_name() {
    let page = generate_page(1).unwrap();
    let mut load = PageLoad::new(&two_paths(), &page).unwrap();
    let r = load.next_stream().unwrap().unwrap();
    let e = load.assign(r.object, 2, "x").unwrap_err().to_string();
    assert!(e.contains("path 2 does not exist"), "{e}");
    let e = load.assign(99, 0, "x").unwrap_err().to_string();
    assert!(e.contains("object 99 is not waiting"), "{e}");
}

#[test]
fn a_config_gives_either_one_path_or_a_list() {
    let both =
        "duration_s = 1\nworkload = \"page\"\n[down]\nrate_bps = 1000000\n[[path]]\n[path.down]\nrate_bps = 1000000\n";
    let e = SimConfig::parse(both, Path::new("b.toml")).unwrap_err().to_string();
    assert!(e.starts_with("b.toml: path:"), "{e}");
    let none = "duration_s = 1\nworkload = \"page\"\n";
    let e = SimConfig::parse(none, Path::new("n.toml")).unwrap_err().to_string();
    assert!(e.starts_with("n.toml: down: missing"), "{e}");
    let bad = "duration_s = 1\nworkload = \"page\"\n[[path]]\n[path.down]\nrate_bps = 1000000\n[[path]]\n[path.down]\nrate_bps = 0\n";
    let e = SimConfig::parse(bad, Path::new("p.toml")).unwrap_err().to_string();
    assert!(e.starts_with("p.toml: path[1].down:"), "{e}");
}
