//! Failures end in typed errors and telemetry records, in bounded time, never in a panic
//! or a hang. The peers here are small in-test servers, so these need no binaries.

mod common;

use std::net::{SocketAddr, TcpListener as StdTcpListener, UdpSocket};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::bounded;
use gearbox_client::{Client, ClientConfig, ClientError, ClientRecord, Request, TransportPref, Trust};
use gearbox_dataplane::telemetry::TelemetrySink;
use gearbox_dataplane::tls;

fn cert_pair(dir: &Path, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let cert = dir.join(format!("{name}-cert.pem"));
    let key = dir.join(format!("{name}-key.pem"));
    tls::write_self_signed(&["localhost".into(), "127.0.0.1".into()], &cert, &key).expect("certificate");
    (cert, key)
}

fn quick_config(trust: Trust) -> ClientConfig {
    ClientConfig {
        trust,
        connect_timeout: Duration::from_millis(1500),
        request_timeout: Duration::from_secs(5),
        ..ClientConfig::default()
    }
}

/// A port nothing listens on (TCP and UDP), found by binding and releasing it.
fn closed_port() -> u16 {
    common::free_port()
}

fn read_records(path: &Path) -> Vec<ClientRecord> {
    std::fs::read_to_string(path)
        .expect("telemetry file")
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is a ClientRecord"))
        .collect()
}

#[tokio::test]
async fn connecting_to_a_closed_port_is_a_connect_error_with_a_record() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("client.jsonl");
    let config = ClientConfig {
        telemetry: TelemetrySink::to_file(&file).unwrap(),
        ..quick_config(Trust::InsecureAny)
    };
    let client = Client::new(config).unwrap();
    let url = format!("https://127.0.0.1:{}/x", closed_port());
    bounded(async {
        for transport in [TransportPref::Tcp, TransportPref::H1] {
            let (result, record) = client.request_with_record(Request::get(&url, transport)).await;
            let err = result.expect_err("nothing listens there");
            assert!(matches!(err, ClientError::Connect { .. }), "{transport}: {err}");
            assert!(err.to_string().starts_with("TCP connect to 127.0.0.1:"), "{err}");
            assert_eq!(record.error.as_deref(), Some("connect"));
            assert!(record.rct_ms.is_none() && record.status.is_none());
        }
        client.flush_telemetry().await;
    })
    .await;
    let records = read_records(&file);
    assert_eq!(records.len(), 2, "one record per failed request");
    assert!(records
        .iter()
        .all(|r| r.error.as_deref() == Some("connect") && r.url == url));
}

/// A loopback listener with a TLS acceptor for `cert` (HTTP/1.1 and HTTP/2 by ALPN).
async fn tls_listener(cert: &Path, key: &Path) -> (tokio::net::TcpListener, tokio_rustls::TlsAcceptor, SocketAddr) {
    let cfg = tls::server_config(
        tls::load_certs(cert).unwrap(),
        tls::load_key(key).unwrap(),
        &tls::ALPN_TCP,
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, tokio_rustls::TlsAcceptor::from(Arc::new(cfg)), addr)
}

/// A TLS 1.3 server (rustls) with its own certificate that answers nothing after the
/// handshake.
async fn tls_server(cert: &Path, key: &Path) -> SocketAddr {
    let (listener, acceptor, addr) = tls_listener(cert, key).await;
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(stream) = acceptor.accept(tcp).await {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    drop(stream);
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_server_certificate_outside_the_trusted_roots_is_a_tls_error() {
    let dir = tempfile::tempdir().unwrap();
    let (server_cert, server_key) = cert_pair(dir.path(), "server");
    let (other_cert, _) = cert_pair(dir.path(), "other");
    let addr = tls_server(&server_cert, &server_key).await;
    let client = Client::new(quick_config(Trust::Roots(vec![other_cert]))).unwrap();
    bounded(async {
        let (result, record) = client
            .request_with_record(Request::get(format!("https://{addr}/"), TransportPref::Tcp))
            .await;
        let err = result.expect_err("untrusted certificate");
        assert!(matches!(err, ClientError::Tls { .. }), "{err}");
        assert!(
            err.to_string()
                .starts_with(&format!("TLS handshake with {addr} failed")),
            "{err}"
        );
        assert_eq!(record.error.as_deref(), Some("tls"));
    })
    .await;
}

#[tokio::test]
async fn a_tls_server_that_never_finishes_the_handshake_times_out() {
    // Accepts TCP, never speaks TLS.
    let listener = StdTcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let client = Client::new(quick_config(Trust::InsecureAny)).unwrap();
    bounded(async {
        let started = Instant::now();
        let (result, record) = client
            .request_with_record(Request::get(format!("https://{addr}/"), TransportPref::Tcp))
            .await;
        let err = result.expect_err("no handshake");
        assert!(
            matches!(
                err,
                ClientError::Timeout {
                    what: "TCP+TLS handshake",
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(record.error.as_deref(), Some("timeout"));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "bounded by the connect timeout"
        );
    })
    .await;
    drop(listener);
}

#[tokio::test]
async fn quic_to_a_port_with_nothing_listening_fails_in_bounded_time() {
    // Hold the UDP port so nothing else takes it, and never answer.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let client = Client::new(quick_config(Trust::InsecureAny)).unwrap();
    bounded(async {
        for url in [
            format!("https://127.0.0.1:{port}/"),
            format!("https://127.0.0.1:{}/", closed_port()),
        ] {
            let started = Instant::now();
            let (result, record) = client
                .request_with_record(Request::get(&url, TransportPref::Quic))
                .await;
            let err = result.expect_err("no QUIC server");
            assert!(
                matches!(err, ClientError::Timeout { .. } | ClientError::Quic { .. }),
                "{err}"
            );
            assert!(matches!(record.error.as_deref(), Some("timeout" | "quic")));
            assert_eq!(record.protocol, gearbox_client::Protocol::H3);
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "took {:?}",
                started.elapsed()
            );
        }
    })
    .await;
}

#[tokio::test]
async fn an_untrusted_certificate_over_quic_is_a_tls_error() {
    let dir = tempfile::tempdir().unwrap();
    let (server_cert, server_key) = cert_pair(dir.path(), "server");
    let (other_cert, _) = cert_pair(dir.path(), "other");
    let server_tls = tls::server_config(
        tls::load_certs(&server_cert).unwrap(),
        tls::load_key(&server_key).unwrap(),
        &[tls::ALPN_H3],
    )
    .unwrap();
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(server_tls).unwrap();
    let endpoint = quinn::Endpoint::server(
        quinn::ServerConfig::with_crypto(Arc::new(crypto)),
        "127.0.0.1:0".parse().unwrap(),
    )
    .unwrap();
    let addr = endpoint.local_addr().unwrap();
    let ep = endpoint.clone();
    tokio::spawn(async move {
        while let Some(incoming) = ep.accept().await {
            tokio::spawn(async move {
                let _ = incoming.await;
            });
        }
    });
    let client = Client::new(quick_config(Trust::Roots(vec![other_cert]))).unwrap();
    bounded(async {
        let (result, record) = client
            .request_with_record(Request::get(format!("https://{addr}/"), TransportPref::Quic))
            .await;
        let err = result.expect_err("untrusted certificate");
        assert!(matches!(err, ClientError::Tls { .. }), "{err}");
        assert_eq!(record.error.as_deref(), Some("tls"));
    })
    .await;
    endpoint.close(0u32.into(), b"done");
}

#[tokio::test]
async fn bad_urls_and_unknown_paths_are_typed_errors_not_panics() {
    let client = Client::new(quick_config(Trust::InsecureAny)).unwrap();
    bounded(async {
        for url in [
            "http://127.0.0.1/",
            "",
            "https://",
            "ftp://x/y",
            "https://exa mple.org/",
            "/relative",
        ] {
            let (result, record) = client.request_with_record(Request::get(url, TransportPref::Tcp)).await;
            assert!(matches!(result, Err(ClientError::BadUrl { .. })), "{url:?}: {result:?}");
            assert_eq!(record.error.as_deref(), Some("bad_url"));
        }
        let mut req = Request::get("https://127.0.0.1:1/", TransportPref::Tcp);
        req.path_index = 3;
        let err = client.request(req).await.expect_err("no path 3");
        assert!(matches!(err, ClientError::Path { index: 3, available: 1 }), "{err}");
    })
    .await;
}

#[tokio::test]
async fn a_request_that_outlives_its_timeout_is_cut_off_with_a_record() {
    let dir = tempfile::tempdir().unwrap();
    let (server_cert, server_key) = cert_pair(dir.path(), "server");
    // Completes the TLS handshake, then never answers the request.
    let addr = tls_server(&server_cert, &server_key).await;
    let config = ClientConfig {
        request_timeout: Duration::from_millis(800),
        ..quick_config(Trust::InsecureAny)
    };
    let client = Client::new(config).unwrap();
    bounded(async {
        for transport in [TransportPref::Tcp, TransportPref::H1] {
            let started = Instant::now();
            let (result, record) = client
                .request_with_record(Request::get(format!("https://{addr}/"), transport))
                .await;
            let err = result.expect_err("server never answers");
            assert!(
                matches!(err, ClientError::Timeout { what: "request", .. }),
                "{transport}: {err}"
            );
            assert!(started.elapsed() < Duration::from_secs(3));
            assert_eq!(record.error.as_deref(), Some("timeout"));
            assert!(
                record.conn_id > 0 && record.new_connection,
                "the record names the connection it got to"
            );
        }
    })
    .await;
}

/// A TLS server (HTTP/1.1 and HTTP/2 by ALPN, hyper) whose every response promises
/// 2 MB, sends 100 kB, and then dies: its socket is closed with `SO_LINGER` 0, so the
/// client gets a reset with no orderly end, as when the process is killed.
async fn dying_server(cert: &Path, key: &Path) -> SocketAddr {
    let (listener, acceptor, addr) = tls_listener(cert, key).await;
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _ = socket2::SockRef::from(&tcp).set_linger(Some(Duration::ZERO));
                let Ok(stream) = acceptor.accept(tcp).await else { return };
                let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
                let killed = Arc::new(tokio::sync::Notify::new());
                let kill = killed.clone();
                let svc = hyper::service::service_fn(move |_req| {
                    let kill = kill.clone();
                    async move {
                        let frames = futures::stream::unfold(0u8, move |step| {
                            let kill = kill.clone();
                            async move {
                                if step == 0 {
                                    let chunk = bytes::Bytes::from(vec![b'k'; 100_000]);
                                    return Some((Ok::<_, std::io::Error>(hyper::body::Frame::data(chunk)), 1));
                                }
                                kill.notify_one();
                                std::future::pending::<()>().await;
                                None
                            }
                        });
                        let body = http_body_util::StreamBody::new(frames);
                        let resp = http::Response::builder()
                            .header("content-length", "2000000")
                            .body(body)
                            .unwrap();
                        Ok::<_, std::convert::Infallible>(resp)
                    }
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                let served = async {
                    if h2 {
                        let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                            .serve_connection(io, svc)
                            .await;
                    } else {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(io, svc)
                            .await;
                    }
                };
                tokio::select! {
                    _ = served => {}
                    _ = killed.notified() => {
                        // Let the first 100 kB leave, then die.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_server_killed_mid_response_is_an_http_error_with_a_record_over_h1_and_h2() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = cert_pair(dir.path(), "server");
    let addr = dying_server(&cert, &key).await;
    let client = Client::new(quick_config(Trust::InsecureAny)).unwrap();
    bounded(async {
        for (transport, protocol) in [(TransportPref::Tcp, "h2"), (TransportPref::H1, "h1")] {
            let (result, record) = client
                .request_with_record(Request::get(format!("https://{addr}/big"), transport))
                .await;
            let err = result.expect_err("the server died mid-response");
            assert!(
                matches!(&err, ClientError::Http { protocol: p, .. } if *p == protocol),
                "{transport}: {err}"
            );
            assert!(record.error.is_some(), "{transport}: the record names the failure");
            assert!(
                record.rct_ms.is_none(),
                "{transport}: no completion time for a cut response"
            );
        }
    })
    .await;
}

/// A UDP relay between the client and a QUIC server that forwards both ways until the
/// server has sent `budget` bytes, then drops every datagram: a path blackholed
/// mid-transfer. Returns the address the client dials.
async fn blackholing_relay(server: SocketAddr, budget: usize) -> SocketAddr {
    let front = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let back = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    back.connect(server).await.unwrap();
    let addr = front.local_addr().unwrap();
    tokio::spawn(async move {
        let mut client = None;
        let mut forwarded = 0usize;
        let (mut up, mut down) = (vec![0u8; 65536], vec![0u8; 65536]);
        loop {
            tokio::select! {
                r = front.recv_from(&mut up) => {
                    let Ok((n, from)) = r else { return };
                    client = Some(from);
                    if forwarded < budget {
                        let _ = back.send(&up[..n]).await;
                    }
                }
                r = back.recv(&mut down) => {
                    let Ok(n) = r else { return };
                    if forwarded < budget {
                        forwarded += n;
                        if let Some(c) = client {
                            let _ = front.send_to(&down[..n], c).await;
                        }
                    }
                }
            }
        }
    });
    addr
}

#[tokio::test]
async fn a_quic_path_blackholed_mid_response_ends_in_a_typed_error_with_a_record() {
    let site = common::Site::new();
    let edge = site.default_edge().await;
    let quic = edge.quic_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(edge.serve(async move {
        let _ = stopped.await;
    }));
    let relay = blackholing_relay(quic, 300_000).await;
    let client = Client::new(ClientConfig {
        request_timeout: Duration::from_secs(20),
        ..quick_config(Trust::InsecureAny)
    })
    .unwrap();
    bounded(async {
        let (result, record) = client
            .request_with_record(Request::get(
                format!("https://127.0.0.1:{}/bytes/20000000", relay.port()),
                TransportPref::Quic,
            ))
            .await;
        let err = result.expect_err("the path went dark mid-response");
        assert!(
            matches!(
                err,
                ClientError::QuicSilent { .. } | ClientError::Http { protocol: "h3", .. }
            ),
            "{err}"
        );
        assert!(record.error.is_some(), "the record names the failure: {record:?}");
        assert!(record.rct_ms.is_none());
    })
    .await;
    let _ = stop.send(());
    let _ = bounded(serving).await;
}

/// A front for our edge whose UDP side drops every datagram from the client until `hold`
/// has passed since the first one (the client's Initials are lost, as on a lossy path,
/// and only quinn's later probes get through) and forwards everything else both ways; its
/// TCP side, on the same port number, forwards connections to the edge's TCP listener,
/// so a request that falls back to TCP finds the edge. Returns the port the client dials
/// and the count of the client's datagrams dropped.
async fn late_handshake_front(
    edge_quic: SocketAddr,
    edge_tcp: SocketAddr,
    hold: Duration,
) -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let front = common::udp_front_with_tcp_to(edge_tcp).await;
    let port = front.local_addr().unwrap().port();
    let back = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    back.connect(edge_quic).await.unwrap();
    let dropped = Arc::new(AtomicUsize::new(0));
    let counted = dropped.clone();
    tokio::spawn(async move {
        let mut client = None;
        let mut first_at: Option<Instant> = None;
        let (mut up, mut down) = (vec![0u8; 65536], vec![0u8; 65536]);
        loop {
            tokio::select! {
                r = front.recv_from(&mut up) => {
                    let Ok((n, from)) = r else { return };
                    client = Some(from);
                    let first = *first_at.get_or_insert_with(Instant::now);
                    if first.elapsed() < hold {
                        counted.fetch_add(1, Ordering::Relaxed);
                    } else {
                        let _ = back.send(&up[..n]).await;
                    }
                }
                r = back.recv(&mut down) => {
                    let Ok(n) = r else { return };
                    if let Some(c) = client {
                        let _ = front.send_to(&down[..n], c).await;
                    }
                }
            }
        }
    });
    (port, dropped)
}

/// How long the front drops the client's first datagrams: past the 2 s bound on a first
/// handshake with a fallback (`silence::HANDSHAKE_GRACE_FLOOR`), short of quinn's second
/// probe (about 3 s after its first Initial: PTOs of 1 s, then 2 s).
const INITIALS_LOST_FOR: Duration = Duration::from_millis(2_500);

#[tokio::test]
async fn a_quic_only_request_waits_out_a_handshake_whose_first_initials_are_lost() {
    let site = common::Site::new();
    let edge = site.default_edge().await;
    let (quic, tcp) = (edge.quic_addr(), edge.tcp_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(edge.serve(async move {
        let _ = stopped.await;
    }));
    let (port, dropped) = late_handshake_front(quic, tcp, INITIALS_LOST_FOR).await;
    // The default connect timeout (10 s): the only bound then is the client's own.
    let client = Client::new(ClientConfig {
        trust: Trust::Roots(vec![site.cert()]),
        ..ClientConfig::default()
    })
    .unwrap();
    bounded(async {
        let (result, record) = client
            .request_with_record(Request::get(
                format!("https://127.0.0.1:{port}/bytes/1000"),
                TransportPref::Quic,
            ))
            .await;
        // The 2 s bound of a request with a fallback gave this one up with a `timeout`;
        // without a fallback it waits for quinn's probe that gets through.
        let response = result.expect("QUIC is all this request has: it waits for the handshake");
        assert_eq!(response.status, 200);
        assert_eq!(response.body.len(), 1000);
        assert!(
            dropped.load(std::sync::atomic::Ordering::Relaxed) > 0,
            "the front dropped no Initial"
        );
        assert_eq!(record.error, None);
        assert_eq!(record.protocol, gearbox_client::Protocol::H3);
        assert!(record.new_connection);
        assert_eq!(record.retried_from, None);
        assert_eq!(record.decision.as_deref(), Some("fixed:quic"));
        // Nothing reached the edge before the hold ended, so the handshake outlasted it.
        let handshake = record.handshake_ms.expect("a new connection has its handshake time");
        assert!(
            handshake >= INITIALS_LOST_FOR.as_secs_f64() * 1e3,
            "handshake of {handshake} ms while the front held the Initials"
        );
    })
    .await;
    client.close_connections().await;
    let _ = stop.send(());
    let _ = bounded(serving).await;
}

#[tokio::test]
async fn with_a_tcp_fallback_the_same_late_handshake_is_given_up_for_tcp() {
    let site = common::Site::new();
    let edge = site.default_edge().await;
    let (quic, tcp) = (edge.quic_addr(), edge.tcp_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(edge.serve(async move {
        let _ = stopped.await;
    }));
    let (port, _) = late_handshake_front(quic, tcp, INITIALS_LOST_FOR).await;
    // `auto` with a gear that picks QUIC: TCP is the fallback.
    let client = Client::with_gear(
        ClientConfig {
            trust: Trust::Roots(vec![site.cert()]),
            ..ClientConfig::default()
        },
        Box::new(gearbox_client::StaticTransport::new(TransportPref::Quic)),
    )
    .unwrap();
    let origin = format!("127.0.0.1:{port}");
    bounded(async {
        let (result, record) = client
            .request_with_record(Request::get(
                format!("https://{origin}/bytes/1000"),
                TransportPref::Auto,
            ))
            .await;
        let response = result.expect("the request falls back to TCP");
        assert_eq!(response.status, 200);
        // The handshake was given up (2 s, before any Initial got through) and the
        // request went over TCP: today's bound for a request with a fallback.
        assert_eq!(record.error, None);
        assert_eq!(record.retried_from, Some(gearbox_client::Protocol::H3));
        assert_ne!(record.protocol, gearbox_client::Protocol::H3);
        assert!(
            record
                .decision
                .as_deref()
                .is_some_and(|d| d.ends_with(";fallback=tcp-retry")),
            "{:?}",
            record.decision
        );
        assert!(client.quic_broken_for(&origin).is_some(), "QUIC marked broken");
    })
    .await;
    client.close_connections().await;
    let _ = stop.send(());
    let _ = bounded(serving).await;
}
