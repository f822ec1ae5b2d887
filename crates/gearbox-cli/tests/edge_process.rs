//! `gearbox edge` as a real process, for what only a process shows: its resident memory
//! (`VmRSS` of `/proc/PID/status`) under clients that never read, against the bound its
//! `[limits]` imply and it prints at start (docs/edge.md "Memory"), and what a client
//! sees when the process is killed mid-response, on each protocol.
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

/// Request streams on each stalled HTTP/2 and QUIC connection, all held by clients that
/// never read.
const STREAMS: usize = 4;
/// The file every stalled request asks for: far more than any buffer holds.
const FILE_BYTES: usize = 32 << 20;
/// The allocator's and the runtimes' own growth under the load, independent of the
/// count of connections: glibc keeps freed memory in an arena per thread, and the edge's
/// main runtime, its QUIC runtime and its file-reading threads each allocate (growth
/// of 35 to 47 MiB against a printed bound of 44 MiB in five runs of the HTTP/2 + HTTP/3
/// test).
const FIXED_SLACK: u64 = 16 << 20;

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

    /// The bound on buffered memory the edge printed at start, bytes.
    fn printed_bound(&self) -> u64 {
        let mut log = String::new();
        // The line comes right after the listeners are bound, which is when start returns.
        for _ in 0..200 {
            log = std::fs::read_to_string(self._dir.path().join("edge.log")).unwrap_or_default();
            let kib = log
                .lines()
                .find_map(|l| l.split("buffered memory bounded at ").nth(1))
                .and_then(|rest| rest.split(" KiB").next())
                .and_then(|kib| kib.parse::<u64>().ok());
            if let Some(kib) = kib {
                return kib * 1024;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("no 'buffered memory bounded at N KiB' line in the edge's log after 200 tries: {log}")
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
#[derive(Default)]
struct Stalled {
    h1: Vec<Deaf<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>>,
    h2: Vec<(h2::client::SendRequest<Bytes>, Vec<http::Response<h2::RecvStream>>)>,
    h3: Vec<(quinn::Endpoint, quinn::Connection, Vec<H3Req>)>,
}

type H3Req = h3::client::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>;

/// How many connections of each protocol a test stalls.
#[derive(Debug, Clone, Copy)]
struct Mix {
    h1: usize,
    h2: usize,
    h3: usize,
}

impl Mix {
    fn connections(self) -> usize {
        self.h1 + self.h2 + self.h3
    }
}

async fn tls_to(edge: &EdgeProcess, alpn: &[&[u8]]) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let tls_cfg = Arc::new(tls::client_config(&Trust::InsecureAny, alpn).unwrap());
    let tcp = tokio::net::TcpStream::connect(edge.addr()).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    bounded("TLS", tokio_rustls::TlsConnector::from(tls_cfg).connect(name, tcp))
        .await
        .unwrap()
}

/// Opens `mix.h1` HTTP/1.1 connections, each asking for the big file and then reading
/// nothing past the response head; `mix.h2` HTTP/2 connections with `streams` requests
/// for the big file each, granting the largest windows HTTP/2 allows and then reading
/// nothing more once every response head has arrived; and `mix.h3` QUIC connections with
/// as many HTTP/3 requests, granting credit for the whole file and then hearing nothing
/// more (a relay drops what the edge sends), so that what the edge sent stays
/// unacknowledged. Returns once every response has started.
async fn stall(edge: &EdgeProcess, mix: Mix, streams: usize) -> Stalled {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let url = format!("https://localhost:{}/big.bin", edge.port);
    let mut stalled = Stalled::default();
    for _ in 0..mix.h1 {
        let mut tls = tls_to(edge, &[b"http/1.1"]).await;
        tls.write_all(b"GET /big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .unwrap();
        // Byte by byte up to the end of the head, so nothing of the body is taken.
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut b = [0u8; 1];
            let n = bounded("HTTP/1.1 response head", tls.read(&mut b)).await.unwrap();
            assert_eq!(
                n,
                1,
                "the edge closed before its response head: {:?}",
                String::from_utf8_lossy(&head)
            );
            head.push(b[0]);
        }
        assert!(head.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&head));
        stalled.h1.push(Deaf {
            inner: tls,
            deaf: Arc::new(AtomicBool::new(true)),
        });
    }
    for _ in 0..mix.h2 {
        let tls = tls_to(edge, &[b"h2"]).await;
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
        for _ in 0..streams {
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
        stalled.h2.push((send, held));
    }
    for _ in 0..mix.h3 {
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
        let mut reqs = Vec::new();
        for _ in 0..streams {
            let req = http::Request::get(&url).body(()).unwrap();
            let mut s = bounded("h3 request", send.send_request(req)).await.unwrap();
            bounded("h3 finish", s.finish()).await.unwrap();
            let resp = bounded("h3 response head", s.recv_response()).await.unwrap();
            assert_eq!(resp.status(), 200);
            reqs.push(s);
        }
        deaf.store(true, Ordering::Release);
        stalled.h3.push((endpoint, quic, reqs));
    }
    stalled
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

/// Grows the edge's memory with stalled clients; returns (growth, the bound the edge
/// printed for its limits). `limits` are the `[limits]` lines besides the ones every
/// stall needs; `max_connections` is the stalled connections plus two, for the
/// warm-up's connections the edge may not have seen close yet.
async fn growth_under_stall(mix: Mix, streams: usize, limits: &str) -> (u64, u64) {
    // The QUIC idle timeout outlasts the run: the deaf clients' connections stay open.
    let edge = EdgeProcess::start(
        "idle_timeout_ms = 600000",
        &format!(
            "max_streams_per_connection = {streams}\nmax_connections = {conns}\nmax_connections_per_ip = {conns}\n\
             send_timeout_ms = 600000\nconnection_idle_timeout_ms = 600000\n\
             keep_alive_interval_ms = 600000\nkeep_alive_timeout_ms = 600000\n\
             header_read_timeout_ms = 600000\n{limits}",
            conns = mix.connections() + 2,
        ),
    );
    let bound = edge.printed_bound();
    // One request on each protocol first, so that what is allocated once (runtime, TLS
    // and QUIC configuration, the first file read) is in the baseline.
    let client = Client::new(ClientConfig {
        trust: Trust::InsecureAny,
        ..ClientConfig::default()
    })
    .unwrap();
    for pref in [TransportPref::H1, TransportPref::Tcp, TransportPref::Quic] {
        let mut req = Request::get(format!("https://127.0.0.1:{}/big.bin", edge.port), pref);
        req.discard_body = true;
        let resp = bounded("warm-up request", client.request(req)).await.unwrap();
        assert_eq!(resp.record.bytes, FILE_BYTES as u64);
    }
    drop(client);
    let before = settled_rss(&edge).await;
    let stalled = stall(&edge, mix, streams).await;
    let peak = settled_rss(&edge).await;
    drop(stalled);
    (peak.saturating_sub(before), bound)
}

/// `[limits]` lines that keep every connection's buffers small, whatever its protocol:
/// the bound takes the largest connection of any protocol.
const SMALL: &str = "quic_send_window_bytes = 262144\nquic_stream_receive_window_bytes = 32768\n\
    quic_receive_window_bytes = 65536\nh2_send_buffer_bytes = 65536\nh2_stream_window_bytes = 65535\n\
    h2_connection_window_bytes = 65535\nh1_buffer_bytes = 32768\nbody_memory_bytes = 65536\n\
    max_buffered_body_bytes = 65536\n";

/// Checks the small limits' growth against the printed bound and the larger ones'
/// growth past it.
fn check(what: &str, (growth, bound): (u64, u64), big_growth: u64) {
    let allowed = bound + FIXED_SLACK;
    eprintln!(
        "{what}: RSS grew {} KiB against the printed bound {} KiB (+{} KiB allocator slack); \
         with the larger buffers {} KiB",
        growth >> 10,
        bound >> 10,
        FIXED_SLACK >> 10,
        big_growth >> 10
    );
    assert!(
        growth <= allowed,
        "{what}: the edge grew {growth} bytes with stalled readers, over the {bound} it printed as its bound \
         (+{FIXED_SLACK} slack)"
    );
    assert!(
        big_growth > allowed,
        "{what}: with larger buffers the edge grew only {big_growth} bytes, within the small bound {allowed}: \
         the stalled clients do not reach the buffers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_holds_no_more_for_stalled_readers_than_its_limits_allow() {
    // 8 HTTP/2 and 8 QUIC connections of 4 streams each; 256 KiB per QUIC connection
    // and 64 KiB per HTTP/2 stream.
    let mix = Mix { h1: 0, h2: 8, h3: 8 };
    let small = growth_under_stall(mix, STREAMS, SMALL).await;
    // The same clients against send buffers 32 times larger: the edge fills them, so
    // the stalled clients do reach the buffers, and the bound above is the limits' doing.
    let (big, _) = growth_under_stall(
        mix,
        STREAMS,
        &SMALL
            .replace("quic_send_window_bytes = 262144", "quic_send_window_bytes = 8388608")
            .replace("h2_send_buffer_bytes = 65536", "h2_send_buffer_bytes = 2097152"),
    )
    .await;
    check("HTTP/2 + HTTP/3", small, big);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_holds_no_more_for_stalled_http1_readers_than_its_limits_allow() {
    // 16 HTTP/1.1 connections, one response each, 32 KiB of hyper's buffer each way; one
    // stream per connection and a 64 KiB QUIC send window, so that no other protocol's
    // connection is larger in the bound than an HTTP/1.1 one by much.
    let mix = Mix { h1: 16, h2: 0, h3: 0 };
    let small_limits = SMALL.replace("quic_send_window_bytes = 262144", "quic_send_window_bytes = 65536");
    let small = growth_under_stall(mix, 1, &small_limits).await;
    // hyper's buffer 256 times larger (8 MiB): it queues up to 16 of the file's
    // 256 KiB pieces per connection.
    let (big, _) = growth_under_stall(
        mix,
        1,
        &small_limits.replace("h1_buffer_bytes = 32768", "h1_buffer_bytes = 8388608"),
    )
    .await;
    check("HTTP/1.1", small, big);
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

/// A TCP relay in front of the edge for one connection: copies both ways, wakes `passed`
/// once the edge has sent `budget` bytes, and when the edge's side ends (the process
/// killed: the kernel closes its sockets) closes the client's side. A second connection
/// is refused, so a client cannot hide the failure behind a retry.
async fn tcp_relay(server: SocketAddr, budget: usize, passed: Arc<tokio::sync::Notify>) -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let Ok((client, _)) = listener.accept().await else {
            return;
        };
        drop(listener);
        let Ok(upstream) = tokio::net::TcpStream::connect(server).await else {
            return;
        };
        let (mut cr, mut cw) = client.into_split();
        let (mut ur, mut uw) = upstream.into_split();
        let up = tokio::spawn(async move {
            let _ = tokio::io::copy(&mut cr, &mut uw).await;
        });
        let mut buf = vec![0u8; 65_536];
        let mut sent = 0usize;
        loop {
            match ur.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if cw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                    sent += n;
                    if sent >= budget && sent - n < budget {
                        passed.notify_one();
                    }
                }
            }
        }
        up.abort();
        let _ = cw.shutdown().await;
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_killed_mid_response_over_http1_and_http2_is_a_typed_error_not_a_hang() {
    for (transport, protocol) in [(TransportPref::H1, "h1"), (TransportPref::Tcp, "h2")] {
        let mut edge = EdgeProcess::start("", "");
        let passed = Arc::new(tokio::sync::Notify::new());
        let relay = tcp_relay(edge.addr(), 2 << 20, passed.clone()).await;
        let client = Client::new(ClientConfig {
            trust: Trust::InsecureAny,
            ..ClientConfig::default()
        })
        .unwrap();
        let mut req = Request::get(format!("https://{relay}/big.bin"), transport);
        req.discard_body = true;
        let request = tokio::spawn(async move { client.request_with_record(req).await });
        bounded("2 MB of the response through the relay", passed.notified()).await;
        edge.child.kill().unwrap();
        edge.child.wait().unwrap();
        let (result, record) = bounded("the client's answer after the kill", request).await.unwrap();
        let err = result.expect_err("the edge was killed mid-response");
        eprintln!(
            "{protocol} after the kill: {err} (record: error {:?}, {} bytes)",
            record.error, record.bytes
        );
        assert!(
            matches!(&err, ClientError::Http { protocol: p, .. } if *p == protocol),
            "a killed {protocol} server is an {protocol} error, got: {err}"
        );
        assert!(
            record.error.is_some(),
            "{protocol}: the record names the failure: {record:?}"
        );
        assert!(
            record.rct_ms.is_none(),
            "{protocol}: no completion time for a cut response"
        );
    }
}

/// Uploads per stream: far more than any window.
const UPLOAD_BYTES: usize = 16 << 20;

/// An upstream that accepts connections and never reads from them, so that the edge's
/// proxy cannot pass request bodies on and the clients' uploads stop in the edge's
/// receive windows. Returns its address and the accepted sockets' holder.
fn deaf_upstream() -> (SocketAddr, Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let held: Arc<std::sync::Mutex<Vec<std::net::TcpStream>>> = Arc::default();
    let h = held.clone();
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            h.lock().unwrap().push(s);
        }
    });
    (addr, held)
}

/// Opens `conns` HTTP/2 and `conns` QUIC connections to a proxying edge, each with
/// `streams` `POST /upload` requests whose bodies ([`UPLOAD_BYTES`]) the clients push as
/// fast as the edge's windows let them; returns what keeps them open.
async fn upload_stall(edge: &EdgeProcess, conns: usize, streams: usize) -> Vec<Box<dyn std::any::Any + Send>> {
    let url = format!("https://localhost:{}/upload", edge.port);
    let body = Bytes::from(vec![b'u'; UPLOAD_BYTES]);
    let mut held: Vec<Box<dyn std::any::Any + Send>> = Vec::new();
    for _ in 0..conns {
        let tls = tls_to(edge, &[b"h2"]).await;
        let (mut send, conn) = bounded("h2 handshake", h2::client::handshake(tls)).await.unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        for _ in 0..streams {
            let req = http::Request::post(&url).body(()).unwrap();
            send = bounded("h2 stream credit", send.ready()).await.unwrap();
            let (resp, mut stream) = send.send_request(req, false).unwrap();
            // h2 queues the body in the client and sends it as the edge's windows allow.
            stream.send_data(body.clone(), true).unwrap();
            held.push(Box::new((resp, stream)));
        }
        held.push(Box::new(send));
    }
    for _ in 0..conns {
        let crypto = tls::client_config(&Trust::InsecureAny, &[tls::ALPN_H3]).unwrap();
        let qc = quinn::crypto::rustls::QuicClientConfig::try_from(crypto).unwrap();
        let mut transport = quinn::TransportConfig::default();
        transport.max_idle_timeout(Some(quinn::IdleTimeout::from(quinn::VarInt::from_u32(600_000))));
        let mut cfg = quinn::ClientConfig::new(Arc::new(qc));
        cfg.transport_config(Arc::new(transport));
        let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        endpoint.set_default_client_config(cfg);
        let quic = bounded("QUIC handshake", endpoint.connect(edge.addr(), "localhost").unwrap())
            .await
            .unwrap();
        let (mut driver, mut send) = bounded("h3 setup", h3::client::new(h3_quinn::Connection::new(quic.clone())))
            .await
            .unwrap();
        tokio::spawn(async move {
            let _ = driver.wait_idle().await;
        });
        for _ in 0..streams {
            let req = http::Request::post(&url).body(()).unwrap();
            let mut s = bounded("h3 request", send.send_request(req)).await.unwrap();
            let body = body.clone();
            // Blocks once the edge's credit is used up; held open until the test ends.
            held.push(Box::new(tokio::spawn(async move {
                let _ = s.send_data(body).await;
                std::future::pending::<()>().await;
                drop(s);
            })));
        }
        held.push(Box::new((endpoint, quic, send)));
    }
    held
}

/// Grows the edge's memory with uploads it cannot pass on; returns the growth.
async fn growth_under_uploads(conns: usize, streams: usize, windows: &str) -> u64 {
    let (upstream, _upstream_held) = deaf_upstream();
    let edge = EdgeProcess::start(
        &format!("idle_timeout_ms = 600000\nupstream = \"http://{upstream}\""),
        &format!(
            "max_streams_per_connection = {streams}\nsend_timeout_ms = 600000\n\
             connection_idle_timeout_ms = 600000\nkeep_alive_interval_ms = 600000\n\
             keep_alive_timeout_ms = 600000\nbody_read_timeout_ms = 600000\n\
             proxy_response_timeout_ms = 600000\n{windows}"
        ),
    );
    // One upload on each protocol first, through the proxy to a deaf upstream it cannot
    // finish: the baseline then holds the proxy's and each stack's one-time allocations.
    let warm = upload_stall(&edge, 1, 1).await;
    let before = settled_rss(&edge).await;
    let held = upload_stall(&edge, conns, streams).await;
    let peak = settled_rss(&edge).await;
    drop(held);
    drop(warm);
    peak.saturating_sub(before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_bodies_the_edge_cannot_pass_on_stay_within_its_receive_windows() {
    const CONNS: usize = 4;
    const STREAMS_UP: usize = 2;
    // Windows of 64 KiB per connection (the least HTTP/2 allows) on both protocols.
    let small = "h2_stream_window_bytes = 65535\nh2_connection_window_bytes = 65535\n\
                 quic_stream_receive_window_bytes = 32768\nquic_receive_window_bytes = 65536\n";
    let growth = growth_under_uploads(CONNS, STREAMS_UP, small).await;
    // Per connection: its window and state; per upload in progress: the proxy's buffer
    // toward the upstream and the piece waiting for it (the bound's per-response share).
    let connections = 2 * CONNS as u64;
    let uploads = connections * STREAMS_UP as u64;
    let allowed = connections * (64 << 10)
        + connections * gearbox_edge::limits::CONNECTION_STATE_BYTES
        + uploads * gearbox_edge::limits::RESPONSE_BYTES
        + FIXED_SLACK;
    // The same uploads against windows of 4 MiB per stream, 8 MiB per connection.
    let big = "h2_stream_window_bytes = 4194304\nh2_connection_window_bytes = 8388608\n\
               quic_stream_receive_window_bytes = 4194304\nquic_receive_window_bytes = 8388608\n";
    let big_growth = growth_under_uploads(CONNS, STREAMS_UP, big).await;
    eprintln!(
        "uploads: RSS grew {} KiB with 64 KiB windows (allowed {} KiB), {} KiB with 8 MiB windows",
        growth >> 10,
        allowed >> 10,
        big_growth >> 10
    );
    assert!(
        growth <= allowed,
        "uploads the edge cannot pass on grew it by {growth} bytes, over the {allowed} its receive windows allow"
    );
    assert!(
        big_growth > allowed,
        "with 8 MiB windows the uploads grew the edge by only {big_growth} bytes, within {allowed}: \
         they do not reach the windows"
    );
}
