//! `gearbox_client::replay` against gearbox's own edge: a request workload and a page
//! workload replayed end to end, every request accounted for in the records and the
//! summary.

mod common;

use std::time::Duration;

use common::{bounded, Site};
use gearbox_client::replay::{replay, replay_page, RecordLog, RecordingGear, ReplayOptions, Summary};
use gearbox_client::{Client, StaticTransport, TransportPref};
use gearbox_workload::{Limit, WorkloadSpec};

/// Replays the first `n` requests of the built-in workload `name` over `transport` against
/// an edge on loopback (or, with `page_seed`, loads that one page); returns the records and
/// the page load times.
async fn replay_against_our_edge(
    name: &str,
    n: usize,
    transport: TransportPref,
    page_seed: Option<u64>,
) -> (Vec<gearbox_client::ClientRecord>, Vec<f64>, usize) {
    let site = Site::new();
    let edge = site.default_edge().await;
    let target = format!("https://localhost:{}", edge.tcp_addr().port());
    assert_eq!(
        edge.tcp_addr().port(),
        edge.quic_addr().port(),
        "one port for TCP and QUIC"
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(edge.serve(async {
        let _ = stopped.await;
    }));

    let spec = WorkloadSpec::builtin(name).expect("built-in workload");
    let requests = spec.generate(3, Limit::Requests(n));
    let log = RecordLog::new();
    let gear = RecordingGear::new(StaticTransport::new(transport), log.clone());
    let client = Client::with_gear(site.config(), Box::new(gear)).expect("client");
    let options = ReplayOptions {
        target,
        transport,
        // Think times of minutes would make a slow test; the order and overlap stay.
        time_scale: 0.001,
        paths: 1,
        path_scheduler: None,
        page_version: None,
    };
    let page_loads = match page_seed {
        Some(seed) => bounded(replay_page(&client, &spec, seed, &options)).await,
        None => bounded(replay(&client, &spec, 3, &requests, &options)).await,
    }
    .expect("replay runs");
    drop(client);
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
    (log.take(), page_loads, requests.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_workload_replays_every_request_once_over_the_chosen_protocol() {
    for (transport, protocol) in [(TransportPref::Tcp, "h2"), (TransportPref::Quic, "h3")] {
        let (records, page_loads, sent) = replay_against_our_edge("app", 20, transport, None).await;
        assert_eq!(records.len(), sent, "{protocol}: one record per request");
        assert!(page_loads.is_empty(), "not a page workload");
        let summary = Summary::new("app", 3, Duration::from_secs(1), &records, &page_loads);
        assert_eq!(summary.errors, Default::default(), "{protocol}: {:?}", summary.errors);
        assert_eq!(summary.by_protocol.keys().collect::<Vec<_>>(), [protocol]);
        let stats = &summary.by_protocol[protocol];
        assert_eq!((stats.requests, stats.rct_ms.len()), (sent, sent));
        let mut clicks: Vec<u32> = records.iter().filter_map(|r| r.click).collect();
        clicks.dedup();
        assert!(clicks.len() > 1, "the 20 requests span several clicks: {clicks:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_workload_replays_one_page_load_per_click() {
    let spec = WorkloadSpec::builtin("page").unwrap();
    let requests = spec.generate(3, Limit::Requests(40));
    let clicks = requests.last().unwrap().click as usize + 1;
    let (records, page_loads, _) = replay_against_our_edge("page", 40, TransportPref::Tcp, None).await;
    assert!(clicks > 1, "40 objects span several pages");
    assert_eq!(page_loads.len(), clicks, "every page completed");
    assert!(page_loads.iter().all(|ms| *ms > 0.0));
    let mut seen: Vec<u32> = records.iter().filter_map(|r| r.click).collect();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(
        seen,
        (0..clicks as u32).collect::<Vec<_>>(),
        "each click's objects are recorded"
    );
    assert!(records.iter().all(|r| r.error.is_none()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_chosen_by_its_seed_loads_once_with_every_object() {
    let page = gearbox_workload::generate_page(1_000_007).unwrap();
    let (records, page_loads, _) = replay_against_our_edge("page", 1, TransportPref::Quic, Some(1_000_007)).await;
    assert_eq!(page_loads.len(), 1, "one page load");
    let mut paths: Vec<&str> = records
        .iter()
        .map(|r| r.url.split_once("/bytes/").map_or("", |(_, p)| p))
        .collect();
    paths.sort_unstable();
    let mut expected: Vec<&str> = page
        .objects
        .iter()
        .map(|o| o.path.trim_start_matches("/bytes/"))
        .collect();
    expected.sort_unstable();
    assert_eq!(paths, expected, "the page of that seed, each object once");
    assert!(records.iter().all(|r| r.error.is_none() && r.click == Some(0)));
}
