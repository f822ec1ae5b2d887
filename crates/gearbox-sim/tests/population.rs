//! A population of clients over /24 prefixes, each prefix its own links (the emulator's
//! `population` topology; TCP WISE §IV-C1 clusters clients by /24).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use gearbox_gears::tcpwise::{CwndTable, SharedTable, TcpWiseGear};
use gearbox_sim::{run, Session, SimConfig};

/// Four prefixes of two hosts on 20 Mbit/s, 20 ms links; prefix 3 at 200 ms and 5 Mbit/s.
/// The `search` workload (a new connection per response, clients over many /24s), eight
/// times as fast.
fn population(seed: u64) -> String {
    format!(
        "seed = {seed}\nduration_s = 240.0\ntime_scale = 0.125\nworkload = \"search\"\n\
         [population]\nprefixes = 4\nhosts_per_prefix = 2\n\
         [population.down]\nrate_bps = 20000000\ndelay_ms = 10.0\nbase_rtt_ms = 20.0\nqueue = {{ limit_bdp = 1.0 }}\n\
         [[population.prefix]]\nindex = 3\n\
         [population.prefix.down]\nrate_bps = 5000000\ndelay_ms = 100.0\nbase_rtt_ms = 200.0\n"
    )
}

fn parse(text: &str) -> SimConfig {
    SimConfig::parse(text, Path::new("pop.toml")).unwrap()
}

fn records(lines: &[String]) -> Vec<serde_json::Value> {
    lines.iter().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The /24 prefix index of a record's client address (`100.(64 + i / 256).(i % 256).h`).
fn prefix_of(r: &serde_json::Value) -> u32 {
    let addr: std::net::SocketAddrV4 = r["local_addr"].as_str().unwrap().parse().unwrap();
    let o = addr.ip().octets();
    assert_eq!(o[0], 100, "{r}");
    u32::from(o[1] - 64) * 256 + u32::from(o[2])
}

fn by_prefix(rs: &[serde_json::Value]) -> BTreeMap<u32, Vec<&serde_json::Value>> {
    let mut out: BTreeMap<u32, Vec<&serde_json::Value>> = BTreeMap::new();
    for r in rs {
        out.entry(prefix_of(r)).or_default().push(r);
    }
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn requests_spread_over_the_prefixes_and_a_far_prefix_is_slower() {
    let out = run(&parse(&population(3))).unwrap();
    assert!(!out.timed_out);
    assert!(out.requests > 200, "{} requests", out.requests);
    assert_eq!(out.completed, out.requests);
    let rs = records(&out.records);
    let groups = by_prefix(&rs);
    assert_eq!(groups.keys().copied().collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    for (prefix, g) in &groups {
        assert!(g.len() > 30, "prefix {prefix}: {} requests", g.len());
        // Hosts 1 and 2 of each /24, as the emulator numbers them.
        for r in g {
            let host = r["local_addr"].as_str().unwrap().split(':').next().unwrap();
            let last: u32 = host.rsplit('.').next().unwrap().parse().unwrap();
            assert!((1..=2).contains(&last), "{r}");
        }
    }
    let handshake = |p: u32| median(groups[&p].iter().map(|r| r["handshake_ms"].as_f64().unwrap()).collect());
    let rct = |p: u32| median(groups[&p].iter().map(|r| r["rct_ms"].as_f64().unwrap()).collect());
    // Each prefix runs on its own link: the 200 ms prefix's handshakes take ten times the
    // 20 ms ones', and its responses take far longer; the three 20 ms prefixes agree.
    for p in 0..3 {
        assert!(
            (20.0..40.0).contains(&handshake(p)),
            "prefix {p}: handshake {}",
            handshake(p)
        );
        assert!(
            rct(3) > rct(p) + 300.0,
            "prefix 3 {} ms vs prefix {p} {} ms",
            rct(3),
            rct(p)
        );
    }
    assert!(
        (200.0..260.0).contains(&handshake(3)),
        "prefix 3: handshake {}",
        handshake(3)
    );
    // Each prefix's links carried its own packets: 4 prefixes x (down, up).
    assert_eq!(out.links.len(), 8);
    for (i, dir, stats) in &out.links {
        assert!(stats.delivered_packets > 100, "prefix {i} {dir}: {stats:?}");
    }
}

#[test]
fn a_client_goes_from_its_workload_index_modulo_the_addresses() {
    // One host per prefix and three prefixes: the `search` workload's client index is
    // `prefix << 8 | host`, so its address is that modulo 3, as `gearbox load` does with
    // three local addresses.
    let text = population(5)
        .replace("hosts_per_prefix = 2", "hosts_per_prefix = 1")
        .replace("prefixes = 4", "prefixes = 3")
        .replace("index = 3", "index = 2");
    let cfg = parse(&text);
    let spec = gearbox_workload::WorkloadSpec::load("search").unwrap();
    let requests = spec.generate(5, gearbox_workload::Limit::DurationMs(240e3));
    let out = run(&cfg).unwrap();
    let mut want: Vec<(f64, u32)> = requests
        .iter()
        .map(|r| ((r.send_at_ms * 0.125 * 1e3).round() / 1e3, r.client_index % 3))
        .collect();
    let mut got: Vec<(f64, u32)> = records(&out.records)
        .iter()
        .map(|r| ((r["time_unix_ms"].as_f64().unwrap() * 1e3).round() / 1e3, prefix_of(r)))
        .collect();
    want.sort_by(|a, b| a.partial_cmp(b).unwrap());
    got.sort_by(|a, b| a.partial_cmp(b).unwrap());
    assert_eq!(got, want);
}

#[test]
fn the_same_seed_gives_byte_identical_population_records() {
    let a = run(&parse(&population(9))).unwrap();
    let b = run(&parse(&population(9))).unwrap();
    assert!(a.completed > 200);
    assert_eq!(a.records, b.records);
}

#[test]
fn a_cwnd_table_entry_for_one_prefix_changes_only_that_prefixs_window() {
    let cfg = parse(&population(4));
    let mut s = Session::new(&cfg).unwrap();
    let table = "version = 2\ncap = 100\n[[cluster]]\nprefix = \"100.64.1.0/24\"\niw = [40, 40]\n\
                 [[cluster]]\nprefix = \"others\"\niw = [10, 10]\n";
    let gear = TcpWiseGear::new(SharedTable::new(CwndTable::parse(table).unwrap()), 1);
    s.set_initial_window_gear(Some(Box::new(gear)));
    while !s.advance(Duration::from_secs(60)).unwrap() {}
    let rs = records(&s.take_records());
    let groups = by_prefix(&rs);
    for (prefix, g) in &groups {
        for r in g {
            let (cluster, iw) = if *prefix == 1 {
                ("100.64.1.0/24", 40)
            } else {
                ("others", 10)
            };
            assert_eq!(r["iw"]["cluster"], cluster, "{r}");
            assert_eq!(r["iw"]["iw"], iw, "{r}");
        }
    }
    // And the window was applied: the search responses (median 19 packets of 1440 bytes)
    // of prefix 1 take fewer round trips than those of prefixes 0 and 2, on the same
    // links.
    let transfer = |p: u32| {
        median(
            groups[&p]
                .iter()
                .filter(|r| r["bytes"].as_u64().unwrap() > 20 * 1440)
                .map(|r| r["rct_ms"].as_f64().unwrap() - r["handshake_ms"].as_f64().unwrap())
                .collect(),
        )
    };
    for p in [0, 2] {
        assert!(
            transfer(1) + 10.0 < transfer(p),
            "prefix 1 {} ms vs prefix {p} {} ms",
            transfer(1),
            transfer(p)
        );
    }
}

#[test]
fn bad_population_configs_name_the_field() {
    let err = |text: String| SimConfig::parse(&text, Path::new("pop.toml")).unwrap_err().to_string();
    let e = err(population(1).replace("index = 3", "index = 4"));
    assert!(e.contains("population.prefix[0].index: prefix 4 does not exist"), "{e}");
    let e = err(population(1).replace("prefixes = 4", "prefixes = 0"));
    assert!(e.contains("population.prefixes: must be in 1 ..= 16384, got 0"), "{e}");
    let e = err(population(1).replace("rate_bps = 5000000", "rate_bps = 0"));
    assert!(e.contains("pop.toml: population.prefix[0].down"), "{e}");
    let e = err(population(1).replace("delay_ms = 100.0", "delay_msec = 100.0"));
    assert!(
        e.contains("population.prefix[0].down") && e.contains("delay_msec"),
        "{e}"
    );
    let e = err(format!("{}[down]\nrate_bps = 1000000\n", population(1)));
    assert!(e.contains("not several"), "{e}");
    let e = err(population(1).replace("time_scale = 0.125", "time_scale = 0.0"));
    assert!(e.contains("time_scale: must be > 0"), "{e}");
}
