//! Chromium-style racing (`TransportPref::Race`) against our own edge: QUIC wins when it
//! works; when UDP gets no answer, TCP wins after the head start, QUIC is marked broken
//! and the next request goes straight to TCP.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{bounded, Site};
use gearbox_client::{Protocol, Request, TransportPref};
use gearbox_edge::EdgeConfig;

/// An edge on loopback; `quic_elsewhere` puts its QUIC listener on another port, so
/// UDP sent to the TCP port reaches nothing (as when a network drops UDP).
async fn edge(
    site: &Site,
    quic_elsewhere: bool,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let edge = site
        .edge(EdgeConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            quic_listen: quic_elsewhere.then(|| "127.0.0.1:0".parse().unwrap()),
            ..EdgeConfig::default()
        })
        .await;
    let tcp = edge.tcp_addr();
    if quic_elsewhere {
        assert_ne!(edge.quic_addr().port(), tcp.port(), "QUIC must listen elsewhere");
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let _ = edge
            .serve(async {
                let _ = stopped.await;
            })
            .await;
    });
    (tcp, stop, server)
}

fn race_outcome(decision: &Option<String>) -> &str {
    decision
        .as_deref()
        .and_then(|d| d.split(';').find_map(|kv| kv.strip_prefix("race=")))
        .unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn race_uses_quic_when_it_connects_first_and_reuses_it() {
    let site = Site::new();
    let (addr, stop, server) = edge(&site, false).await;
    let client = site.client();
    bounded(async {
        let url = format!("https://{addr}/bytes/20000");
        let first = client
            .request(Request::get(&url, TransportPref::Race))
            .await
            .expect("raced request");
        assert_eq!(first.record.protocol, Protocol::H3);
        assert_eq!(race_outcome(&first.record.decision), "quic");
        assert!(first.record.new_connection);
        assert_eq!(first.body.len(), 20_000);
        let second = client
            .request(Request::get(&url, TransportPref::Race))
            .await
            .expect("second raced request");
        assert_eq!(second.record.protocol, Protocol::H3);
        assert_eq!(race_outcome(&second.record.decision), "reuse-quic");
        assert!(!second.record.new_connection);
        assert_eq!(client.quic_broken_for(&addr.to_string()), None);
    })
    .await;
    drop(client);
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn race_falls_back_to_tcp_after_the_delay_when_udp_gets_no_answer_and_then_skips_quic() {
    let site = Site::new();
    let (addr, stop, server) = edge(&site, true).await;
    let client = site.client();
    bounded(async {
        let url = format!("https://{addr}/bytes/20000");
        let first = client
            .request(Request::get(&url, TransportPref::Race))
            .await
            .expect("TCP carries the raced request");
        assert_eq!(first.record.protocol, Protocol::H2);
        assert!(
            matches!(race_outcome(&first.record.decision), "tcp-won" | "tcp-quic-failed"),
            "{:?}",
            first.record.decision
        );
        let rct = first.record.rct_ms.expect("rct");
        assert!(rct >= 300.0, "TCP waited for QUIC's 300 ms head start, rct {rct} ms");
        let broken = client
            .quic_broken_for(&addr.to_string())
            .expect("QUIC marked broken for the origin");
        assert!(broken > Duration::from_secs(290) && broken <= Duration::from_secs(300));

        // A new connection no longer waits for QUIC.
        let mut fresh = Request::get(&url, TransportPref::Race);
        fresh.force_new_connection = true;
        let second = client.request(fresh).await.expect("straight to TCP");
        assert_eq!(second.record.protocol, Protocol::H2);
        assert_eq!(race_outcome(&second.record.decision), "tcp-broken");
        assert!(second.record.new_connection);
        let rct = second.record.rct_ms.expect("rct");
        assert!(rct < 300.0, "no head start for broken QUIC, rct {rct} ms");
    })
    .await;
    drop(client);
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
}
