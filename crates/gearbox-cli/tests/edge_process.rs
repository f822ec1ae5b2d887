//! `gearbox edge` as a real process, for what only a process shows: its resident memory
//! (`VmRSS` of `/proc/PID/status`) under clients that never read, against the bound its
//! `[limits]` configure (docs/edge.md "Memory"), and what a client sees when the process
//! is killed mid-response over HTTP/3.
//!
//! Every wait is bounded by a count of tries or by [`BOUND`], a liveness bound: none is a
//! performance check.

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use gearbox_client::{Client, ClientConfig, ClientError, Request, TransportPref};
use gearbox_dataplane::tls::{self, Trust};

/// Longest any single wait may take before it counts as a hang.
const BOUND: Duration = Duration::from_secs(60);

/// Connections per protocol and request streams on each, all held by clients that never
/// read.
const CONNECTIONS: usize = 8;
const STREAMS: usize = 4;
/// The file every stalled request asks for: far more than any buffer holds.
const FILE_BYTES: usize = 32 << 20;
/// What a file response holds besides the transport's buffers (docs/edge.md "Memory"):
/// the chunk waiting for the transport and the file's read buffer, 256 KiB each.
const PER_RESPONSE: u64 = 2 * (256 << 10);
/// What the edge may hold per connection besides the configured buffers: its TLS and
/// QUIC state and the h2/h3 state of its streams (the bench measures 28 KiB per idle
/// TLS connection and 60 KiB per idle QUIC one).
const PER_CONNECTION_SLACK: u64 = 128 << 10;
/// The allocator's and the runtime's own growth under the load, independent of the
/// count of connections.
const FIXED_SLACK: u64 = 8 << 20;

/// A `gearbox edge` child process, killed when dropped.
struct EdgeProcess {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for EdgeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl EdgeProcess {
    /// Starts the edge with `top` (TOML lines of its top-level fields) and `limits` (of its
    /// `[limits]` table), serving a directory that holds `big.bin` of [`FILE_BYTES`].
    fn start(top: &str, limits: &str) -> EdgeProcess {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        tls::write_self_signed(&["localhost".into(), "127.0.0.1".into()], &cert, &key).unwrap();
        let www = dir.path().join("www");
        std::fs::create_dir_all(&www).unwrap();
        // Not all zero, so nothing along the way could shortcut it.
        let mut f = std::fs::File::create(www.join("big.bin")).unwrap();
        let block: Vec<u8> = (0..1 << 20)
            .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        for _ in 0..FILE_BYTES >> 20 {
            f.write_all(&block).unwrap();
        }
        drop(f);
        let port = free_port();
        let config = dir.path().join("edge.toml");
        std::fs::write(
            &config,
            format!(
                "listen = \"127.0.0.1:{port}\"\ncert = {cert:?}\nkey = {key:?}\nstatic_dir = {www:?}\n{top}\n[limits]\n{limits}\n",
                cert = path_text(&cert),
                key = path_text(&key),
                www = path_text(&www),
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("edge.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_gearbox"))
            .arg("edge")
            .arg("--config")
            .arg(&config)
            .env("GEARBOX_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("gearbox edge starts");
        let mut edge = EdgeProcess { child, port, _dir: dir };
        for _ in 0..600 {
            if let Some(status) = edge.child.try_wait().unwrap() {
                let log = std::fs::read_to_string(edge._dir.path().join("edge.log")).unwrap_or_default();
                panic!("gearbox edge exited ({status}) before serving: {log}");
            }
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return edge;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("gearbox edge did not listen on {port} after 600 tries");
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Resident memory now, bytes.
    fn rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .expect("VmRSS in /proc/PID/status")
            * 1024
    }
}

fn path_text(p: &Path) -> String {
    p.display().to_string()
}

/// A loopback port free on both TCP and UDP.
fn free_port() -> u16 {
    for _ in 0..50 {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = tcp.local_addr().unwrap().port();
        if std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no loopback port free on both TCP and UDP");
}

async fn bounded<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(BOUND, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no outcome within {BOUND:?}"))
}

/// A TLS stream that, once `deaf` is set, never reads again: a client that stops taking
/// the response while its flow-control credit is still open, so the edge's buffers, not
/// the credit, are what hold the response back.
struct Deaf<S> {
    inner: S,
    deaf: Arc<AtomicBool>,
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Deaf<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.deaf.load(Ordering::Acquire) {
            return Poll::Pending;
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Deaf<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// What the stalled clients hold open; dropping it closes their connections.
#[allow(dead_code)] // held only to keep the connections open
struct Stalled {
    h2: Vec<(h2::client::SendRequest<Bytes>, Vec<http::Response<h2::RecvStream>>)>,
    h3: Vec<(quinn::Endpoint, quinn::Connection, Vec<H3Req>)>,
}

type H3Req = h3::client::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>;

/// Opens [`CONNECTIONS`] HTTP/2 connections with [`STREAMS`] requests for the big file
/// each, granting the largest windows HTTP/2 allows and then reading nothing more once
/// every response head has arrived; and as many QUIC connections with as many HTTP/3
/// requests, granting credit for the whole file and then hearing nothing more (a relay
/// drops what the edge sends), so that what the edge sent stays unacknowledged. Returns
/// once every response has started.
async fn stall(edge: &EdgeProcess) -> Stalled {
    let url = format!("https://localhost:{}/big.bin", edge.port);
    let tls_cfg = Arc::new(tls::client_config(&Trust::InsecureAny, &[b"h2"]).unwrap());
    let mut h2s = Vec::new();
    for _ in 0..CONNECTIONS {
        let tcp = tokio::net::TcpStream::connect(edge.addr()).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let tls = bounded(
            "TLS",
            tokio_rustls::TlsConnector::from(tls_cfg.clone()).connect(name, tcp),
        )
        .await
        .unwrap();
        let deaf = Arc::new(AtomicBool::new(false));
        let io = Deaf {
            inner: tls,
            deaf: deaf.clone(),
        };
        let (mut send, conn) = bounded(
            "h2 handshake",
            h2::client::Builder::new()
                .initial_window_size((1 << 31) - 1)
                .initial_connection_window_size((1 << 31) - 1)
                .handshake::<_, Bytes>(io),
        )
        .await
        .unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut pending = Vec::new();
        for _ in 0..STREAMS {
            let req = http::Request::get(&url).body(()).unwrap();
            send = bounded("h2 stream credit", send.ready()).await.unwrap();
            let (resp, _) = send.send_request(req, true).unwrap();
            pending.push(resp);
        }
        let mut held = Vec::new();
        for resp in pending {
            let resp = bounded("h2 response head", resp).await.unwrap();
            assert_eq!(resp.status(), 200);
            // The body is never read (dropping it would cancel the stream).
            held.push(resp);
        }
        deaf.store(true, Ordering::Release);
        h2s.push((send, held));
    }
    let mut h3s = Vec::new();
    for _ in 0..CONNECTIONS {
        let crypto = tls::client_config(&Trust::InsecureAny, &[tls::ALPN_H3]).unwrap();
        let qc = quinn::crypto::rustls::QuicClientConfig::try_from(crypto).unwrap();
        let mut transport = quinn::TransportConfig::default();
        // Credit for every byte: flow control never holds the edge back, its send window does.
        transport.stream_receive_window(quinn::VarInt::from_u32(FILE_BYTES as u32));
        transport.receive_window(quinn::VarInt::MAX);
        transport.max_idle_timeout(Some(quinn::IdleTimeout::from(quinn::VarInt::from_u32(600_000))));
        let mut cfg = quinn::ClientConfig::new(Arc::new(qc));
        cfg.transport_config(Arc::new(transport));
        let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        endpoint.set_default_client_config(cfg);
        let deaf = Arc::new(AtomicBool::new(false));
        let relay = relay(edge.addr(), deaf.clone(), None).await;
        let quic = bounded("QUIC handshake", endpoint.connect(relay, "localhost").unwrap())
            .await
            .unwrap();
        let (mut driver, mut send) = bounded("h3 setup", h3::client::new(h3_quinn::Connection::new(quic.clone())))
            .await
            .unwrap();
        tokio::spawn(async move {
            let _ = driver.wait_idle().await;
        });
        let mut streams = Vec::new();
        for _ in 0..STREAMS {
            let req = http::Request::get(&url).body(()).unwrap();
            let mut s = bounded("h3 request", send.send_request(req)).await.unwrap();
            bounded("h3 finish", s.finish()).await.unwrap();
            let resp = bounded("h3 response head", s.recv_response()).await.unwrap();
            assert_eq!(resp.status(), 200);
            streams.push(s);
        }
        deaf.store(true, Ordering::Release);
        h3s.push((endpoint, quic, streams));
    }
    Stalled { h2: h2s, h3: h3s }
}

/// The edge's resident memory once it stops growing: sampled until eight samples in a
/// row add less than 1 MiB, at most 400 samples. Returns the largest sample.
async fn settled_rss(edge: &EdgeProcess) -> u64 {
    let mut peak = edge.rss();
    let mut last = peak;
    let mut calm = 0;
    for _ in 0..400 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = edge.rss();
        peak = peak.max(now);
        if now < last + (1 << 20) {
            calm += 1;
            if calm >= 8 {
                break;
            }
        } else {
            calm = 0;
            last = now;
        }
    }
    peak
}

/// Grows the edge's memory with stalled clients; returns (growth, the bound its limits
/// imply).
async fn growth_under_stall(quic_send_window: u64, h2_send_buffer: u64) -> (u64, u64) {
    // The QUIC idle timeout outlasts the run: the deaf clients' connections stay open.
    let edge = EdgeProcess::start(
        "idle_timeout_ms = 600000",
        &format!(
            "max_streams_per_connection = {STREAMS}\nquic_send_window_bytes = {quic_send_window}\n\
         h2_send_buffer_bytes = {h2_send_buffer}\n\
         send_timeout_ms = 600000\nconnection_idle_timeout_ms = 600000\n\
         keep_alive_interval_ms = 600000\nkeep_alive_timeout_ms = 600000\n"
        ),
    );
    // One request on each protocol first, so that what is allocated once (runtime, TLS
    // and QUIC configuration, the first file read) is in the baseline.
    let client = Client::new(ClientConfig {
        trust: Trust::InsecureAny,
        ..ClientConfig::default()
    })
    .unwrap();
    for pref in [TransportPref::Tcp, TransportPref::Quic] {
        let mut req = Request::get(format!("https://127.0.0.1:{}/big.bin", edge.port), pref);
        req.discard_body = true;
        let resp = bounded("warm-up request", client.request(req)).await.unwrap();
        assert_eq!(resp.record.bytes, FILE_BYTES as u64);
    }
    drop(client);
    let before = settled_rss(&edge).await;
    let stalled = stall(&edge).await;
    let peak = settled_rss(&edge).await;
    drop(stalled);
    let conns = CONNECTIONS as u64;
    let responses = 2 * conns * STREAMS as u64;
    let configured = conns * quic_send_window + conns * STREAMS as u64 * h2_send_buffer;
    let bound = configured + responses * PER_RESPONSE + 2 * conns * PER_CONNECTION_SLACK + FIXED_SLACK;
    (peak.saturating_sub(before), bound)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_holds_no_more_for_stalled_readers_than_its_limits_allow() {
    // Small buffers: 256 KiB per QUIC connection, 64 KiB per HTTP/2 stream.
    let (growth, bound) = growth_under_stall(256 << 10, 64 << 10).await;
    eprintln!("small limits: RSS grew {} KiB, bound {} KiB", growth >> 10, bound >> 10);
    assert!(
        growth <= bound,
        "the edge grew {growth} bytes with stalled readers, over the {bound} its limits imply"
    );
    // The same clients against larger buffers (32x): the edge fills them, so the stalled
    // clients do reach the buffers, and the bound above is the limits' doing.
    let (big_growth, _) = growth_under_stall(8 << 20, 2 << 20).await;
    eprintln!("32x limits: RSS grew {} KiB", big_growth >> 10);
    assert!(
        big_growth > bound,
        "with 32x the buffers the edge grew only {big_growth} bytes, under the small bound {bound}: \
         the stalled clients do not reach the buffers"
    );
}

/// A UDP relay in front of the edge: forwards both ways, drops what the edge sends once
/// `deaf` is set, and wakes the `Notify` of `budget` once the edge has sent its count of
/// bytes.
async fn relay(
    server: SocketAddr,
    deaf: Arc<AtomicBool>,
    budget: Option<(usize, Arc<tokio::sync::Notify>)>,
) -> SocketAddr {
    let front = Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let back = Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap());
    back.connect(server).await.unwrap();
    let addr = front.local_addr().unwrap();
    let client: Arc<std::sync::Mutex<Option<SocketAddr>>> = Arc::default();
    let (f, b, c) = (front.clone(), back.clone(), client.clone());
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        while let Ok((n, from)) = f.recv_from(&mut buf).await {
            *c.lock().unwrap() = Some(from);
            let _ = b.send(&buf[..n]).await;
        }
    });
    let sent = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        loop {
            // A killed server's port answers with ICMP unreachable: keep relaying nothing.
            let n = match back.recv(&mut buf).await {
                Ok(n) => n,
                Err(_) => continue,
            };
            if deaf.load(Ordering::Acquire) {
                continue;
            }
            let to = *client.lock().unwrap();
            if let Some(to) = to {
                let _ = front.send_to(&buf[..n], to).await;
            }
            if let Some((budget, passed)) = &budget {
                if sent.fetch_add(n, Ordering::Relaxed) + n >= *budget {
                    passed.notify_one();
                }
            }
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_killed_mid_response_over_http3_is_a_typed_error_not_a_hang() {
    let mut edge = EdgeProcess::start("", "");
    let passed = Arc::new(tokio::sync::Notify::new());
    let relay = relay(edge.addr(), Arc::default(), Some((2 << 20, passed.clone()))).await;
    let client = Client::new(ClientConfig {
        trust: Trust::InsecureAny,
        ..ClientConfig::default()
    })
    .unwrap();
    let mut req = Request::get(format!("https://{relay}/big.bin"), TransportPref::Quic);
    req.discard_body = true;
    let request = tokio::spawn(async move { client.request_with_record(req).await });
    bounded("2 MB of the response through the relay", passed.notified()).await;
    edge.child.kill().unwrap();
    edge.child.wait().unwrap();
    let (result, record) = bounded("the client's answer after the kill", request).await.unwrap();
    let err = result.expect_err("the edge was killed mid-response");
    eprintln!("after the kill: {err}");
    assert!(
        matches!(
            &err,
            ClientError::QuicSilent { .. } | ClientError::Quic { .. } | ClientError::Http { protocol: "h3", .. }
        ),
        "a killed HTTP/3 server is a QUIC or HTTP/3 error, got: {err}"
    );
    assert!(record.error.is_some(), "the record names the failure: {record:?}");
    assert!(record.rct_ms.is_none(), "no completion time for a cut response");
}
