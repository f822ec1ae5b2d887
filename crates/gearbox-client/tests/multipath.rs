//! Multipath page loads against our own edge: two local paths (127.0.0.1 and
//! 127.0.0.2, both on loopback) with one QUIC connection each, every path scheduler,
//! and a path that dies mid-load.

mod common;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use common::{bounded, free_port, Site};
use gearbox_client::{Client, ClientConfig, MultipathOptions, Protocol};
use gearbox_gears::path::{scheduler, RoundRobin, SCHEDULERS};
use gearbox_workload::{ObjectKind, Page, PageObject};
use tokio::net::UdpSocket;

const PATH_0: &str = "127.0.0.1";
const PATH_1: &str = "127.0.0.2";

/// An HTML root, two CSS and two JS found in it, and `images` images found in the
/// first CSS, each of `image_bytes`.
fn page(images: usize, image_bytes: u64) -> Page {
    let object = |id: usize, kind: ObjectKind, size_bytes: u64, priority: u8, depends_on: Vec<usize>| PageObject {
        id,
        path: format!("/bytes/{size_bytes}?object={id}.{}", kind.extension()),
        kind,
        size_bytes,
        priority,
        depends_on,
    };
    let mut objects = vec![
        object(0, ObjectKind::Html, 30_000, 0, vec![]),
        object(1, ObjectKind::Css, 20_000, 2, vec![0]),
        object(2, ObjectKind::Css, 20_000, 2, vec![0]),
        object(3, ObjectKind::Js, 40_000, 2, vec![0]),
        object(4, ObjectKind::Js, 40_000, 2, vec![0]),
    ];
    for i in 0..images {
        objects.push(object(5 + i, ObjectKind::Image, image_bytes, 5, vec![1]));
    }
    Page { objects }
}

fn two_paths(site: &Site) -> ClientConfig {
    ClientConfig {
        local_addrs: vec![PATH_0.parse().unwrap(), PATH_1.parse().unwrap()],
        ..site.config()
    }
}

async fn with_edge<F, Fut>(site: &Site, f: F)
where
    F: FnOnce(SocketAddr) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let edge = site.default_edge().await;
    let quic = edge.quic_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(edge.serve(async {
        let _ = stopped.await;
    }));
    bounded(f(quic)).await;
    let _ = stop.send(());
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scheduler_loads_a_page_over_two_paths_and_each_record_names_path_and_reason() {
    let site = Site::new();
    let config = two_paths(&site);
    with_edge(&site, |quic| async move {
        for name in SCHEDULERS {
            let client = Client::new(config.clone()).expect("client");
            let mut gear = scheduler(name).expect("scheduler");
            let page = page(8, 60_000);
            let load = client
                .load_page_multipath(
                    &format!("https://{quic}"),
                    &page,
                    gear.as_mut(),
                    &MultipathOptions::default(),
                )
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(load.page.objects.len(), page.objects.len(), "{name}: every object");
            assert!(load.paths_down.is_empty(), "{name}: {:?}", load.paths_down);
            let mut used = HashMap::new();
            for o in &load.page.objects {
                assert_eq!((o.status, o.record.status), (200, Some(200)), "{name}");
                assert_eq!(o.record.protocol, Protocol::H3);
                assert_eq!(o.record.bytes, page.objects[o.id].size_bytes, "{name}: whole body");
                let path = o.record.path_index.expect("record names the path");
                let reason = o.record.path_decision.as_deref().expect("record has the reason");
                assert!(reason.starts_with(&format!("{name}:")), "{name}: {reason}");
                let want_ip = [PATH_0, PATH_1][path];
                assert!(
                    o.record.local_addr.starts_with(&format!("{want_ip}:")),
                    "{name}: path {path} went out of {}",
                    o.record.local_addr
                );
                *used.entry(path).or_insert(0) += 1;
            }
            if name == "round-robin" {
                assert_eq!(used.len(), 2, "round-robin uses both paths: {used:?}");
            }
            if name == "single-best" {
                assert_eq!(used.len(), 1, "single-best keeps one path: {used:?}");
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_address_that_is_not_of_this_host_is_refused_by_name() {
    let site = Site::new();
    let config = ClientConfig {
        local_addrs: vec![PATH_0.parse().unwrap(), "192.0.2.77".parse().unwrap()],
        ..site.config()
    };
    let client = Client::new(config).expect("client");
    let err = client
        .load_page_multipath(
            "https://127.0.0.1:1",
            &page(1, 1000),
            &mut RoundRobin::default(),
            &MultipathOptions::default(),
        )
        .await
        .expect_err("an address not on this host");
    assert!(err.to_string().contains("192.0.2.77"), "{err}");
}

/// A UDP relay in front of the edge that forwards each client source on its own
/// upstream socket, and drops everything to and from `victim` once it has forwarded
/// `kill_after_bytes` to it: a path that dies in the middle of a transfer.
struct Relay {
    addr: SocketAddr,
    killed: Arc<AtomicBool>,
}

async fn relay(edge: SocketAddr, victim: IpAddr, kill_after_bytes: u64) -> Relay {
    let port = free_port();
    let front = Arc::new(UdpSocket::bind(("127.0.0.1", port)).await.expect("relay binds"));
    let killed = Arc::new(AtomicBool::new(false));
    let to_victim = Arc::new(AtomicU64::new(0));
    let (front2, killed2) = (front.clone(), killed.clone());
    tokio::spawn(async move {
        let mut upstreams: HashMap<SocketAddr, Arc<UdpSocket>> = HashMap::new();
        let mut buf = vec![0u8; 65_536];
        loop {
            let Ok((n, from)) = front2.recv_from(&mut buf).await else {
                return;
            };
            if from.ip() == victim && killed2.load(Ordering::Acquire) {
                continue;
            }
            let up = match upstreams.get(&from) {
                Some(u) => u.clone(),
                None => {
                    let u = Arc::new(UdpSocket::bind("127.0.0.1:0").await.expect("upstream"));
                    u.connect(edge).await.expect("connect upstream");
                    upstreams.insert(from, u.clone());
                    let (front, killed, to_victim) = (front2.clone(), killed2.clone(), to_victim.clone());
                    let down = u.clone();
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; 65_536];
                        while let Ok(n) = down.recv(&mut buf).await {
                            if from.ip() == victim {
                                if killed.load(Ordering::Acquire) {
                                    continue;
                                }
                                if to_victim.fetch_add(n as u64, Ordering::AcqRel) + n as u64 >= kill_after_bytes {
                                    killed.store(true, Ordering::Release);
                                }
                            }
                            let _ = front.send_to(&buf[..n], from).await;
                        }
                    });
                    u
                }
            };
            let _ = up.send(&buf[..n]).await;
        }
    });
    Relay {
        addr: SocketAddr::new("127.0.0.1".parse().unwrap(), port),
        killed,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_that_dies_mid_load_is_taken_out_and_no_request_is_lost() {
    let site = Site::new();
    let config = two_paths(&site);
    with_edge(&site, |quic| async move {
        // Path 1 dies once 400 kB have reached it, with about 1 MB of the page's
        // images scheduled on it by round-robin.
        let relay = relay(quic, PATH_1.parse().unwrap(), 400_000).await;
        let client = Client::new(config).expect("client");
        let page = page(16, 120_000);
        let load = client
            .load_page_multipath(
                &format!("https://{}", relay.addr),
                &page,
                &mut RoundRobin::default(),
                &MultipathOptions::default(),
            )
            .await
            .expect("the page loads on the path that is left");
        assert!(relay.killed.load(Ordering::Acquire), "the relay killed path 1");
        assert_eq!(load.page.objects.len(), page.objects.len(), "no request is lost");
        for o in &load.page.objects {
            assert_eq!((o.status, o.record.bytes), (200, page.objects[o.id].size_bytes));
        }
        assert_eq!(
            load.paths_down.iter().map(|d| d.index).collect::<Vec<_>>(),
            [1],
            "path 1 is taken out: {:?}",
            load.paths_down
        );
        assert!(!load.failed_attempts.is_empty(), "requests were pending on path 1");
        for r in &load.failed_attempts {
            assert_eq!(r.path_index, Some(1));
            assert!(r.error.is_some());
        }
        let reissued: Vec<_> = load
            .page
            .objects
            .iter()
            .filter(|o| {
                o.record
                    .path_decision
                    .as_deref()
                    .is_some_and(|d| d.contains(";reissued-from=1"))
            })
            .collect();
        assert_eq!(
            reissued.len(),
            load.failed_attempts.len(),
            "each failed request was sent again"
        );
        assert!(reissued.iter().all(|o| o.record.path_index == Some(0)));
        let down_at = load.paths_down[0].at_ms;
        assert!(
            load.page
                .objects
                .iter()
                .any(|o| o.record.path_index == Some(1) && o.completed_ms < down_at),
            "path 1 carried objects before it died"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_workload_goes_on_the_path_the_scheduler_picks_for_each_request() {
    use gearbox_client::replay::{replay_requests, PathScheduling, RecordLog, RecordingGear, ReplayOptions};
    use gearbox_client::{StaticTransport, TransportPref};
    use gearbox_workload::{Limit, WorkloadSpec};

    let site = Site::new();
    let config = two_paths(&site);
    with_edge(&site, |quic| async move {
        let log = RecordLog::new();
        let gear = RecordingGear::new(StaticTransport::new(TransportPref::Quic), log.clone());
        let client = Client::with_gear(config, Box::new(gear)).expect("client");
        let requests = WorkloadSpec::builtin("app")
            .expect("app")
            .generate(3, Limit::Requests(12));
        let options = ReplayOptions {
            target: format!("https://{quic}"),
            transport: TransportPref::Quic,
            time_scale: 0.001,
            paths: 2,
            path_scheduler: Some(PathScheduling {
                name: "round-robin".into(),
                make: Arc::new(|| scheduler("round-robin").expect("round-robin")),
            }),
            page_version: None,
        };
        replay_requests(&client, &requests, &options).await.expect("replay");
        let records = log.take();
        assert_eq!(records.len(), requests.len());
        // `app` has one workload client: without a scheduler all would go on path 0.
        let mut per_path = [0usize; 2];
        for r in &records {
            assert!(r.error.is_none(), "{r:?}");
            assert_eq!(r.protocol, Protocol::H3);
            let path = r.path_index.expect("a scheduled request names its path");
            assert!(
                r.path_decision.as_deref().unwrap_or("").starts_with("round-robin:"),
                "{r:?}"
            );
            let local = if path == 0 { PATH_0 } else { PATH_1 };
            assert!(r.local_addr.starts_with(&format!("{local}:")), "{r:?}");
            per_path[path] += 1;
        }
        assert_eq!(per_path, [6, 6], "round robin alternates");
    })
    .await;
}
