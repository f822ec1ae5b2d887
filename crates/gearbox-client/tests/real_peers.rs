//! The client against independent servers: caddy (HTTP/2, HTTP/3 via quic-go) and nginx
//! (HTTP/2, HTTP/1.1). These need /usr/bin/caddy and /usr/sbin/nginx and fail, saying so,
//! when they are missing.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{bounded, caddy, nginx, Site, BIG_BYTES, HELLO};
use gearbox_client::{
    Client, ClientConfig, ClientRecord, Decision, DecisionId, PageLoadOptions, Protocol, Request, TransportChoice,
    TransportGear, TransportPref,
};
use gearbox_workload::{ObjectKind, Page, PageObject};

fn assert_timed(record: &ClientRecord) {
    let rct = record.rct_ms.expect("a successful request has an RCT");
    let ttfb = record.ttfb_ms.expect("a successful request has a TTFB");
    assert!(ttfb > 0.0 && ttfb <= rct, "TTFB {ttfb} must be within RCT {rct}");
    assert!(record.error.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caddy_serves_a_file_over_http2_with_timing_and_tcp_info() {
    let site = Site::new();
    let server = caddy(&site);
    let client = site.client();
    bounded(async {
        let url = format!("{}/hello.txt", server.origin());
        let resp = client
            .request(Request::get(&url, TransportPref::Tcp))
            .await
            .expect("GET over h2");
        assert_eq!(resp.status, 200);
        assert_eq!(resp.body, HELLO.as_bytes());
        let r = &resp.record;
        assert_eq!(r.protocol, Protocol::H2);
        assert!(r.new_connection);
        assert!(r.handshake_ms.is_some_and(|h| h > 0.0 && h <= r.rct_ms.unwrap()));
        assert_eq!(r.bytes, HELLO.len() as u64);
        assert_eq!(r.decision.as_deref(), Some("fixed:tcp"));
        assert_eq!(r.server_addr, format!("127.0.0.1:{}", server.port));
        let t = r.transport.as_ref().expect("TCP_INFO snapshot");
        assert!(!t.cc.is_empty() && t.rtt_ms >= 0.0 && t.cwnd_bytes > 0, "{t:?}");
        assert_timed(r);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caddy_serves_files_over_http3_with_quic_stats() {
    let site = Site::new();
    let server = caddy(&site);
    let client = site.client();
    bounded(async {
        let url = format!("{}/hello.txt", server.origin());
        let resp = client
            .request(Request::get(&url, TransportPref::Quic))
            .await
            .expect("GET over h3");
        assert_eq!(resp.status, 200);
        assert_eq!(resp.body, HELLO.as_bytes());
        assert_eq!(resp.record.protocol, Protocol::H3);
        assert!(resp.record.new_connection && resp.record.handshake_ms.is_some());
        let t = resp.record.transport.as_ref().expect("quinn stats snapshot");
        assert_eq!(t.cc, "cubic");
        assert!(t.congestion_events.is_some() && t.sent_packets > 0);
        assert_timed(&resp.record);

        let big = client
            .request(Request::get(
                format!("{}/big.bin", server.origin()),
                TransportPref::Quic,
            ))
            .await
            .expect("big file over h3");
        assert_eq!(big.body.len(), BIG_BYTES);
        assert!(
            big.body.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8),
            "body arrived intact"
        );
        assert!(!big.record.new_connection, "second request reuses the QUIC connection");
        assert_eq!(big.record.conn_id, resp.record.conn_id);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_request_reuses_the_pooled_connection_on_each_protocol() {
    let site = Site::new();
    let server = caddy(&site);
    let client = site.client();
    bounded(async {
        for transport in [TransportPref::Tcp, TransportPref::H1, TransportPref::Quic] {
            let url = format!("{}/hello.txt", server.origin());
            let first = client
                .request(Request::get(&url, transport))
                .await
                .unwrap_or_else(|e| panic!("{transport}: first request: {e}"))
                .record;
            let second = client
                .request(Request::get(&url, transport))
                .await
                .expect("second")
                .record;
            assert!(first.new_connection, "{transport}: first request opens a connection");
            assert!(!second.new_connection, "{transport}: second request reuses it");
            assert_eq!(first.conn_id, second.conn_id, "{transport}");
            assert!(
                second.handshake_ms.is_none(),
                "{transport}: no handshake on a reused connection"
            );

            let mut fresh = Request::get(&url, transport);
            fresh.force_new_connection = true;
            let third = client.request(fresh).await.expect("forced new").record;
            assert!(third.new_connection, "{transport}: force_new_connection opens one");
            assert_ne!(third.conn_id, first.conn_id, "{transport}");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_serves_http2_and_http1() {
    let site = Site::new();
    let server = nginx(&site, true, 60);
    let client = site.client();
    bounded(async {
        let url = format!("{}/hello.txt", server.origin());
        let h2 = client
            .request(Request::get(&url, TransportPref::Tcp))
            .await
            .expect("h2 from nginx");
        assert_eq!((h2.status, h2.record.protocol), (200, Protocol::H2));
        assert_eq!(h2.body, HELLO.as_bytes());
        assert_timed(&h2.record);
        let h1 = client
            .request(Request::get(&url, TransportPref::H1))
            .await
            .expect("h1 from nginx");
        assert_eq!((h1.status, h1.record.protocol), (200, Protocol::H1));
        assert_eq!(h1.body, HELLO.as_bytes());
        assert_ne!(
            h1.record.conn_id, h2.record.conn_id,
            "h1 and h2 use separate connections"
        );
        let big = client
            .request(Request::get(format!("{}/big.bin", server.origin()), TransportPref::H1))
            .await
            .expect("big file over h1");
        assert_eq!(big.body.len(), BIG_BYTES);
        assert!(!big.record.new_connection, "keep-alive connection reused");
        let missing = client
            .request(Request::get(format!("{}/nope", server.origin()), TransportPref::Tcp))
            .await
            .expect("a 404 is a response, not an error");
        assert_eq!(missing.status, 404);
        assert_eq!(missing.record.status, Some(404));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_falls_back_to_http1_when_the_server_does_not_speak_http2() {
    let site = Site::new();
    let server = nginx(&site, false, 60);
    let client = site.client();
    bounded(async {
        let url = format!("{}/hello.txt", server.origin());
        let first = client
            .request(Request::get(&url, TransportPref::Tcp))
            .await
            .expect("tcp to an h1-only server");
        assert_eq!(first.record.protocol, Protocol::H1);
        assert_eq!(first.body, HELLO.as_bytes());
        let second = client
            .request(Request::get(&url, TransportPref::Tcp))
            .await
            .expect("again");
        assert_eq!(second.record.protocol, Protocol::H1);
        assert!(
            !second.record.new_connection,
            "the fallback connection joined the h1 pool"
        );
        assert_eq!(second.record.conn_id, first.record.conn_id);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_pool_never_opens_more_connections_than_its_limit() {
    let site = Site::new();
    let server = nginx(&site, true, 60);
    let client = Client::new(ClientConfig {
        max_h1_connections_per_origin: 2,
        ..site.config()
    })
    .expect("client");
    bounded(async {
        let url = format!("{}/big.bin", server.origin());
        let requests = (0..8).map(|_| client.request(Request::get(&url, TransportPref::H1)));
        let results = futures::future::join_all(requests).await;
        let mut conns: Vec<u64> = results
            .into_iter()
            .map(|r| r.expect("h1 request").record.conn_id)
            .collect();
        conns.sort_unstable();
        conns.dedup();
        assert!(!conns.is_empty() && conns.len() <= 2, "used connections {conns:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_the_server_closed_is_replaced_transparently() {
    let site = Site::new();
    let server = nginx(&site, true, 1);
    let client = site.client();
    bounded(async {
        let url = format!("{}/hello.txt", server.origin());
        for transport in [TransportPref::Tcp, TransportPref::H1] {
            let first = client
                .request(Request::get(&url, transport))
                .await
                .unwrap_or_else(|e| panic!("{transport}: first request: {e}"))
                .record;
            // nginx closes idle keep-alive connections after 1 s.
            tokio::time::sleep(Duration::from_millis(2500)).await;
            let second = client
                .request(Request::get(&url, transport))
                .await
                .unwrap_or_else(|e| panic!("{transport}: after the server closed: {e}"));
            assert_eq!(second.status, 200, "{transport}");
            assert!(
                second.record.new_connection,
                "{transport}: a new connection replaced the closed one"
            );
            assert_ne!(second.record.conn_id, first.conn_id, "{transport}");
        }
    })
    .await;
}

/// (protocol, decision, decision id) of each observed record.
type Seen = Arc<Mutex<Vec<(String, Option<String>, Option<DecisionId>)>>>;

/// A gear that picks TCP, tags its decision and remembers what it was told.
struct RecordingGear {
    seen: Seen,
}

impl TransportGear for RecordingGear {
    fn choose(&mut self, origin: &str, _now: Instant) -> Decision<TransportChoice> {
        Decision::new(TransportChoice::Tcp, format!("test gear for {origin}")).with_id(DecisionId(41))
    }

    fn observe(&mut self, record: &ClientRecord, _now: Instant) {
        self.seen
            .lock()
            .unwrap()
            .push((record.protocol.to_string(), record.decision.clone(), record.decision_id));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_requests_ask_the_gear_and_every_request_is_observed() {
    let site = Site::new();
    let server = nginx(&site, true, 60);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let client =
        Client::with_gear(site.config(), Box::new(RecordingGear { seen: seen.clone() })).expect("client with gear");
    bounded(async {
        let url = format!("{}/hello.txt", server.origin());
        let auto = client
            .request(Request::get(&url, TransportPref::Auto))
            .await
            .expect("auto");
        assert_eq!(auto.record.protocol, Protocol::H2);
        let expected = format!("test gear for 127.0.0.1:{}", server.port);
        assert_eq!(auto.record.decision.as_deref(), Some(expected.as_str()));
        assert_eq!(auto.record.decision_id, Some(DecisionId(41)), "the gear's id is echoed");
        client
            .request(Request::get(&url, TransportPref::Tcp))
            .await
            .expect("fixed");
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            vec![
                ("h2".into(), Some(expected), Some(DecisionId(41))),
                ("h2".into(), Some("fixed:tcp".into()), None)
            ]
        );
    })
    .await;
}

/// A page whose objects are all the site's hello.txt (the query tells them apart):
/// 0 <- {1, 2}, 1 <- 3, {2, 3} <- 4.
fn small_page() -> Page {
    let obj = |id: usize, kind, priority, depends_on: Vec<usize>| PageObject {
        id,
        path: format!("/hello.txt?object={id}"),
        kind,
        size_bytes: HELLO.len() as u64,
        priority,
        depends_on,
    };
    Page {
        objects: vec![
            obj(0, ObjectKind::Html, 0, vec![]),
            obj(1, ObjectKind::Css, 1, vec![0]),
            obj(2, ObjectKind::Js, 2, vec![0]),
            obj(3, ObjectKind::Image, 5, vec![1]),
            obj(4, ObjectKind::Font, 4, vec![2, 3]),
        ],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_loads_follow_dependencies_over_one_connection_on_h2_and_h3() {
    let site = Site::new();
    let server = caddy(&site);
    let client = site.client();
    let page = small_page();
    bounded(async {
        for (transport, protocol) in [(TransportPref::Tcp, Protocol::H2), (TransportPref::Quic, Protocol::H3)] {
            let load = client
                .load_page(&server.origin(), &page, transport)
                .await
                .expect("page load");
            assert_eq!(load.protocol, protocol);
            assert_eq!(load.objects.len(), page.objects.len());
            let conn = load.objects[0].record.conn_id;
            assert!(
                load.objects[0].record.new_connection,
                "a page load starts on a new connection"
            );
            for o in &load.objects {
                assert_eq!(o.status, 200);
                assert_eq!(
                    o.record.conn_id, conn,
                    "{protocol}: object {} on the page's one connection",
                    o.id
                );
                assert_eq!(o.record.protocol, protocol);
                for &d in &page.objects[o.id].depends_on {
                    assert!(
                        o.started_ms >= load.objects[d].completed_ms,
                        "object {} started at {} before its dependency {d} completed at {}",
                        o.id,
                        o.started_ms,
                        load.objects[d].completed_ms
                    );
                }
            }
            let last = load.objects.iter().map(|o| o.completed_ms).fold(0.0, f64::max);
            assert_eq!(load.page_load_ms, last);
        }
        // A second visit can reuse the connection.
        let options = PageLoadOptions {
            transport: TransportPref::Quic,
            fresh_connection: false,
            ..Default::default()
        };
        let again = client
            .load_page_with(&server.origin(), &page, &options)
            .await
            .expect("second visit");
        assert!(again.objects.iter().all(|o| !o.record.new_connection));
    })
    .await;
}

#[test]
fn the_blocking_client_fetches_without_an_async_runtime_and_writes_records() {
    let site = Site::new();
    let server = caddy(&site);
    let file = site.path().join("records.jsonl");
    let client = gearbox_client::BlockingClient::with_telemetry_file(site.config(), &file).expect("blocking client");
    let url = format!("{}/hello.txt", server.origin());
    for transport in [TransportPref::Tcp, TransportPref::Quic] {
        let resp = client.get(&url, transport).expect("blocking GET");
        assert_eq!(resp.body, HELLO.as_bytes());
    }
    let err = client
        .get("http://127.0.0.1/", TransportPref::Tcp)
        .expect_err("not https");
    assert_eq!(err.kind(), "bad_url");
    drop(client); // flushes telemetry
    let lines = std::fs::read_to_string(&file).expect("records file");
    let records: Vec<ClientRecord> = lines
        .lines()
        .map(|l| serde_json::from_str(l).expect("record"))
        .collect();
    let protocols: Vec<_> = records.iter().map(|r| (r.protocol, r.error.clone())).collect();
    assert_eq!(
        protocols,
        vec![
            (Protocol::H2, None),
            (Protocol::H3, None),
            (Protocol::H2, Some("bad_url".to_string()))
        ]
    );
}
