//! The client against gearbox's own edge: the `/bytes/{n}` route that workloads use,
//! GET and POST, over HTTP/1.1, HTTP/2 and HTTP/3.

mod common;

use common::{bounded, Site};
use gearbox_client::{Bytes, Protocol, Request, TransportPref};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_edge_serves_synthetic_sizes_and_accepts_uploads_on_every_protocol() {
    let site = Site::new();
    let edge = site.default_edge().await;
    let (tcp, quic) = (edge.tcp_addr(), edge.quic_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(edge.serve(async {
        let _ = stopped.await;
    }));
    let client = site.client();
    bounded(async {
        for (transport, addr, protocol) in [
            (TransportPref::Tcp, tcp, Protocol::H2),
            (TransportPref::H1, tcp, Protocol::H1),
            (TransportPref::Quic, quic, Protocol::H3),
        ] {
            let url = format!("https://{addr}/bytes/100000");
            let get = client
                .request(Request::get(&url, transport))
                .await
                .expect("GET /bytes/100000");
            assert_eq!((get.status, get.record.protocol), (200, protocol));
            assert_eq!(get.body.len(), 100_000, "{protocol}");
            assert_eq!(get.record.bytes, 100_000);

            let upload = Bytes::from(vec![7u8; 50_000]);
            let post = client
                .request(Request::post(&url, upload, transport))
                .await
                .expect("POST with a body");
            assert_eq!(post.status, 200, "{protocol}: the edge accepts an upload on /bytes/n");
            assert_eq!(post.body.len(), 100_000);
            assert!(!post.record.new_connection, "{protocol}: reused");
        }
    })
    .await;
    // Closing the client's connections lets the edge's graceful shutdown finish at once.
    drop(client);
    let _ = stop.send(());
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), server).await;
}

/// Closing a client ends its QUIC connections at the edge at once (CONNECTION_CLOSE with
/// H3_NO_ERROR), not at an idle timeout: here both sides' idle timeouts are an hour, so
/// only the close can end the connection within the test's bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_client_ends_its_quic_connections_at_the_edge() {
    let site = Site::new();
    let mut config = gearbox_edge::EdgeConfig {
        listen: "127.0.0.1:0".parse().expect("address"),
        ..gearbox_edge::EdgeConfig::default()
    };
    config.limits.connection_idle_timeout_ms = 3_600_000;
    let edge = site.edge(config).await;
    let (quic, live) = (edge.quic_addr(), edge.live());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(edge.serve(async {
        let _ = stopped.await;
    }));
    let client = gearbox_client::Client::new(gearbox_client::ClientConfig {
        idle_timeout: std::time::Duration::from_secs(3600),
        ..site.config()
    })
    .expect("client");
    bounded(async {
        let url = format!("https://{quic}/bytes/1000");
        let got = client.request(Request::get(&url, TransportPref::Quic)).await;
        assert_eq!(got.expect("GET over HTTP/3").body.len(), 1000);
        assert_eq!(live.list().len(), 1, "one QUIC connection open at the edge");
        client.close_connections().await;
        while !live.list().is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    let _ = stop.send(());
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), server).await;
}

/// A counter of the kernel's MPTCP MIB (`/proc/net/netstat`, `MPTcpExt` lines).
fn mptcp_counter(name: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/net/netstat").expect("/proc/net/netstat");
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("MPTcpExt:")).collect();
    assert_eq!(lines.len(), 2, "this kernel has no MPTCP counters (is MPTCP built in?)");
    let names = lines[0].split_whitespace().skip(1);
    let values = lines[1].split_whitespace().skip(1);
    names
        .zip(values)
        .find(|(n, _)| *n == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or_else(|| panic!("no MPTCP counter {name}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mptcp_client_and_edge_agree_on_multipath_tcp_and_serve_http2() {
    let enabled = std::fs::read_to_string("/proc/sys/net/mptcp/enabled").unwrap_or_default();
    assert_eq!(
        enabled.trim(),
        "1",
        "MPTCP is off in this kernel: `sysctl -w net.mptcp.enabled=1` (the MPTCP peer needs it)"
    );
    let site = Site::new();
    let edge = site
        .edge(gearbox_edge::EdgeConfig {
            listen: "127.0.0.1:0".parse().expect("address"),
            mptcp: true,
            ..gearbox_edge::EdgeConfig::default()
        })
        .await;
    let tcp = edge.tcp_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(edge.serve(async {
        let _ = stopped.await;
    }));
    let client = gearbox_client::Client::new(gearbox_client::ClientConfig {
        mptcp: true,
        ..site.config()
    })
    .expect("client");
    let before = mptcp_counter("MPCapableSYNACKRX");
    bounded(async {
        let url = format!("https://{tcp}/bytes/200000");
        let got = client
            .request(Request::get(&url, TransportPref::Tcp))
            .await
            .expect("GET over MPTCP");
        assert_eq!(
            (got.status, got.record.protocol, got.body.len()),
            (200, Protocol::H2, 200_000)
        );
    })
    .await;
    // The client's SYN asked for MPTCP and the edge's SYN-ACK agreed (a kernel or
    // listener without MPTCP would have fallen back to TCP without it).
    assert!(
        mptcp_counter("MPCapableSYNACKRX") > before,
        "no MP_CAPABLE SYN-ACK was received"
    );
    drop(client);
    let _ = stop.send(());
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), server).await;
}

/// Requests that each ask for a connection of their own (a `per_request` workload, TCP
/// WISE's one window per connection) open them side by side: no handshake waits for
/// another's. A relay in front of the edge holds back the edge's first bytes on every
/// connection for 300 ms, so no TLS handshake can finish before then; every one of the
/// four connections must have reached the relay before the first byte came back (when
/// dials waited for each other, the second came only after the first handshake).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_that_want_their_own_connections_dial_them_side_by_side() {
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let site = Site::new();
    let edge = site.default_edge().await;
    let tcp = edge.tcp_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(edge.serve(async {
        let _ = stopped.await;
    }));
    // What the relay saw, in order: "accept" per connection, "reply" at the first byte
    // it passes back.
    let events = Arc::new(Mutex::new(Vec::<&'static str>::new()));
    let relay = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relay_addr = relay.local_addr().unwrap();
    let seen = events.clone();
    tokio::spawn(async move {
        while let Ok((mut client_side, _)) = relay.accept().await {
            seen.lock().unwrap().push("accept");
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut edge_side = tokio::net::TcpStream::connect(tcp).await.unwrap();
                let (mut cr, mut cw) = client_side.split();
                let (mut er, mut ew) = edge_side.split();
                let up = tokio::io::copy(&mut cr, &mut ew);
                let down = async {
                    let mut buf = vec![0u8; 64 * 1024];
                    let mut first = true;
                    loop {
                        let n = er.read(&mut buf).await?;
                        if n == 0 {
                            return Ok::<_, std::io::Error>(());
                        }
                        if first {
                            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                            seen.lock().unwrap().push("reply");
                            first = false;
                        }
                        cw.write_all(&buf[..n]).await?;
                    }
                };
                let _ = tokio::join!(up, down);
            });
        }
    });
    let client = site.client();
    let url = format!("https://127.0.0.1:{}/bytes/1000", relay_addr.port());
    bounded(async {
        let requests = (0..4).map(|_| {
            let mut r = Request::get(&url, TransportPref::Tcp);
            r.force_new_connection = true;
            client.request(r)
        });
        for r in futures::future::join_all(requests).await {
            let r = r.expect("a request on its own connection");
            assert_eq!((r.status, r.record.new_connection), (200, true));
        }
    })
    .await;
    let events = events.lock().unwrap().clone();
    let first_reply = events.iter().position(|e| *e == "reply").unwrap();
    assert_eq!(
        events[..first_reply].iter().filter(|e| **e == "accept").count(),
        4,
        "every connection should be dialed before any handshake ends: {events:?}"
    );
    let _ = stop.send(());
    let _ = server.await;
}

/// Requests on the origin's one HTTP/2 connection run side by side: its slot in the pool
/// is held to find or make the connection, not across an exchange. The edge holds every
/// TCP request for 1 s before answering; four requests sent at once on the warm
/// connection must then come back together, within less than that second of each other
/// (when each request held the slot through its exchange, they came back a second apart:
/// our page loader fetched one object per round trip).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_share_the_http2_connection_side_by_side() {
    const HELD_MS: u64 = 1000;
    let site = Site::new();
    let edge = site
        .edge(gearbox_edge::EdgeConfig {
            listen: "127.0.0.1:0".parse().expect("address"),
            tcp_processing_ms: HELD_MS,
            ..gearbox_edge::EdgeConfig::default()
        })
        .await;
    let port = edge.tcp_addr().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(edge.serve(async {
        let _ = stopped.await;
    }));
    let client = site.client();
    let url = format!("https://127.0.0.1:{port}/bytes/1000");
    bounded(async {
        let warm = client
            .request(Request::get(&url, TransportPref::Tcp))
            .await
            .expect("first request");
        assert_eq!(warm.record.protocol, Protocol::H2);
        let requests = (0..4).map(|_| async {
            let r = client.request(Request::get(&url, TransportPref::Tcp)).await;
            (r, std::time::Instant::now())
        });
        let done = futures::future::join_all(requests).await;
        for (r, _) in &done {
            let r = r.as_ref().expect("a request on the pooled connection");
            assert_eq!((r.status, r.record.new_connection), (200, false));
        }
        let first = done.iter().map(|(_, at)| *at).min().unwrap();
        let last = done.iter().map(|(_, at)| *at).max().unwrap();
        assert!(
            last - first < std::time::Duration::from_millis(HELD_MS),
            "four requests on one HTTP/2 connection came back {:?} apart: they waited for each other",
            last - first
        );
    })
    .await;
    let _ = stop.send(());
    let _ = server.await;
}
