//! Page loads and workload runs on a multipath client in virtual time (SAILfish §4.2.1:
//! one decision per stream, one QUIC connection per path).

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

/// The error of a config that must not parse, read as from `s.toml`.
fn config_error(text: &str) -> String {
    SimConfig::parse(text, Path::new("s.toml")).unwrap_err().to_string()
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

// Workload runs on several paths: each request's path chosen by the client's rule or by a
// path scheduler (docs/sim.md "Workloads on several paths").

/// 200 s of `app` sent in 20 s (time scale 0.1) over two paths: `fast` (50 Mbit/s, 10 ms) and `slow` (5 Mbit/s, 100 ms)
/// in the order given, with `scheduler` choosing each request's path (None: the client's
/// rule).
fn workload_on_two_paths(fast_first: bool, scheduler: Option<&str>) -> Vec<serde_json::Value> {
    let fast = "rate_bps = 50000000\ndelay_ms = 5.0\nbase_rtt_ms = 10.0\nqueue = { limit_bdp = 2.0 }\n";
    let slow = "rate_bps = 5000000\ndelay_ms = 50.0\nbase_rtt_ms = 100.0\nqueue = { limit_bdp = 2.0 }\n";
    let (a, b) = if fast_first { (fast, slow) } else { (slow, fast) };
    let scheduler = scheduler.map_or(String::new(), |s| format!("path_scheduler = \"{s}\"\n"));
    let text = format!(
        "seed = 5\nduration_s = 200.0\ntime_scale = 0.1\nworkload = \"app\"\n{scheduler}\
         [[path]]\n[path.down]\n{a}[[path]]\n[path.down]\n{b}"
    );
    let config = SimConfig::parse(&text, Path::new("mp-app.toml")).unwrap();
    let out = gearbox_sim::run(&config).unwrap();
    assert!(
        !out.timed_out && out.completed == out.requests && out.requests > 50,
        "{out:?}"
    );
    out.records.iter().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Requests per path.
fn per_path(records: &[serde_json::Value]) -> [usize; 2] {
    let mut n = [0; 2];
    for r in records {
        let p = r["path_index"].as_u64().expect("a multipath record names its path") as usize;
        assert!(
            r["local_addr"].as_str().unwrap().starts_with(&format!("10.0.{p}.2:")),
            "{r}"
        );
        n[p] += 1;
    }
    n
}

#[test]
fn a_workload_on_two_paths_goes_where_its_rule_puts_each_request() {
    // Round robin alternates, so both paths carry half the requests.
    let rr = workload_on_two_paths(true, Some("round-robin"));
    let n = per_path(&rr);
    assert!(n[0].abs_diff(n[1]) <= 1, "round-robin: {n:?}");
    assert!(rr
        .iter()
        .all(|r| r["path_decision"].as_str().unwrap().starts_with("round-robin:")));
    // The client's own rule: workload client c on path c mod 2; `app` has one client, so
    // every request goes on path 0, as `gearbox load` sends it with two local addresses.
    let own = workload_on_two_paths(true, None);
    assert_eq!(per_path(&own), [own.len(), 0]);
    assert!(
        own.iter().all(|r| r["path_decision"] == "client-index:0%2"),
        "{}",
        own[0]
    );
    assert!(own.iter().all(|r| r["source"] == "sim"));
}

#[test]
fn minrtt_moves_requests_to_the_faster_path_wherever_it_is() {
    // The same paths in both orders: a rule that ignored the paths would put the same
    // share on path 0 both times.
    for fast_first in [true, false] {
        let records = workload_on_two_paths(fast_first, Some("minrtt"));
        let n = per_path(&records);
        let fast = if fast_first { n[0] } else { n[1] };
        assert!(
            fast * 10 >= records.len() * 6,
            "fast path {} first: {n:?}",
            if fast_first { "listed" } else { "not listed" }
        );
    }
    // And it is faster than sending everything on the slow path would be: the client's
    // rule with the slow path first.
    let mean =
        |rs: &[serde_json::Value]| rs.iter().map(|r| r["rct_ms"].as_f64().unwrap()).sum::<f64>() / rs.len() as f64;
    let minrtt = mean(&workload_on_two_paths(false, Some("minrtt")));
    let slow_only = mean(&workload_on_two_paths(false, None));
    assert!(
        minrtt < slow_only,
        "minrtt {minrtt:.1} ms, all on the slow path {slow_only:.1} ms"
    );
}

#[test]
fn the_same_seed_gives_the_same_multipath_records() {
    let a = workload_on_two_paths(false, Some("ecf"));
    let b = workload_on_two_paths(false, Some("ecf"));
    assert_eq!(a, b);
}

#[test]
fn a_bad_path_scheduler_is_named() {
    let base = "duration_s = 1\nworkload = \"app\"\n";
    let two = "[[path]]\n[path.down]\nrate_bps = 1000000\n[[path]]\n[path.down]\nrate_bps = 1000000\n";
    let e = config_error(&format!("{base}path_scheduler = \"fastest\"\n{two}"));
    assert!(
        e.starts_with("s.toml: path_scheduler: unknown path scheduler \"fastest\""),
        "{e}"
    );
    assert!(e.contains("minrtt") && e.contains("sailfish"), "{e}");
    let one = "[down]\nrate_bps = 1000000\n";
    let e = config_error(&format!("{base}path_scheduler = \"minrtt\"\n{one}"));
    assert!(
        e.starts_with("s.toml: path_scheduler:") && e.contains("[[path]]"),
        "{e}"
    );
    let e = config_error(&format!("{base}path_scheduler = \"sailfish\"\n{two}"));
    assert!(e.starts_with("s.toml: sailfish_model: missing"), "{e}");
    let e = config_error(&format!(
        "{base}path_scheduler = \"sailfish\"\nsailfish_model = \"/nonexistent\"\n{two}"
    ));
    assert!(e.starts_with("s.toml: sailfish_model: /nonexistent"), "{e}");
}

#[test]
fn the_shipped_sailfish_policy_schedules_a_workload_too() {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/sailfish");
    let text = format!(
        "seed = 2\nduration_s = 10.0\nworkload = \"app\"\npath_scheduler = \"sailfish\"\nsailfish_model = {:?}\n\
         [[path]]\n[path.down]\nrate_bps = 20000000\ndelay_ms = 10.0\nbase_rtt_ms = 20.0\n\
         [[path]]\n[path.down]\nrate_bps = 5000000\ndelay_ms = 40.0\nbase_rtt_ms = 80.0\n",
        model.display().to_string()
    );
    let out = gearbox_sim::run(&SimConfig::parse(&text, Path::new("sf.toml")).unwrap()).unwrap();
    assert_eq!(out.completed, out.requests);
    for line in &out.records {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(r["path_decision"].as_str().unwrap().starts_with("sailfish:"), "{r}");
    }
}
