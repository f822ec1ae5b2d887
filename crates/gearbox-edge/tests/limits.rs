//! The edge's limits and timeouts (docs/edge.md "Limits"), each hit over real
//! connections: TLS over the kernel's TCP with HTTP/1.1 (raw bytes), HTTP/2 (the `h2`
//! crate, and raw frames where a polite client cannot misbehave), and QUIC with
//! HTTP/3 (quinn + h3, and raw frames likewise). Every wait is bounded by
//! [`BOUND`], a liveness bound, not a performance check: each limit is set small so
//! that it fires long before.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

mod common;

use bytes::{Buf, Bytes};
use common::Running;
use gearbox_dataplane::tls::{self, Trust};
use gearbox_edge::EdgeConfig;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest any single wait in these tests may take before it counts as a hang.
const BOUND: Duration = Duration::from_secs(20);

/// What the limit tests ask of the shared edge beyond starting and stopping it.
trait Hits {
    async fn wait_hits(&self, limit: &str, n: u64);
    async fn hits(&self, limit: &str) -> u64;
}

impl Hits for Running {
    /// Waits until `limit` has been hit `n` times (counted as the edge closes, which
    /// may be just after the client saw the close).
    async fn wait_hits(&self, limit: &str, n: u64) {
        bounded("limit counted", async {
            while self.hits(limit).await < n {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert_eq!(self.hits(limit).await, n);
    }

    async fn hits(&self, limit: &str) -> u64 {
        let m = self.metrics().await;
        let key = format!("gearbox_limit_hits_total{{limit=\"{limit}\"}} ");
        m.lines()
            .find_map(|l| l.strip_prefix(&key))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {m}"))
    }
}

async fn bounded<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(BOUND, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no outcome within {BOUND:?}"))
}

/// Small limits, so each test reaches its own quickly.
fn small(c: &mut EdgeConfig) {
    let l = &mut c.limits;
    l.max_header_bytes = 8192;
    l.max_headers = 20;
    l.max_body_bytes = 100_000;
    l.max_buffered_body_bytes = 10_000;
    l.body_memory_bytes = 10_000;
    l.body_read_timeout_ms = 300;
    l.header_read_timeout_ms = 300;
    l.connection_idle_timeout_ms = 1500;
    l.keep_alive_timeout_ms = 1000;
    l.max_streams_per_connection = 2;
    c.handshake_timeout_ms = 300;
}

async fn start(tweak: impl FnOnce(&mut EdgeConfig)) -> Running {
    common::start(|c| {
        small(c);
        tweak(c);
    })
    .await
}

type Tls = tokio_rustls::client::TlsStream<TcpStream>;

async fn tls_connect(addr: SocketAddr, alpn: &[u8]) -> Tls {
    let cfg = tls::client_config(&Trust::InsecureAny, &[alpn]).unwrap();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    bounded(
        "TLS handshake",
        tokio_rustls::TlsConnector::from(Arc::new(cfg)).connect(name, tcp),
    )
    .await
    .expect("TLS handshake")
}

/// Reads until the peer closes (or errors); what arrived.
async fn read_to_close<R: tokio::io::AsyncRead + Unpin>(r: &mut R) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match bounded("peer closes", r.read(&mut buf)).await {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An HTTP/1.1 request over TLS, written whole; the response as text (the edge closes).
async fn h1_raw(edge: &Running, request: &[u8]) -> String {
    let mut s = tls_connect(edge.tcp, b"http/1.1").await;
    s.write_all(request).await.unwrap();
    read_to_close(&mut s).await
}

async fn h2_client(
    edge: &Running,
) -> (
    h2::client::SendRequest<Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let tls = tls_connect(edge.tcp, b"h2").await;
    // Windows large enough that responses read one after the other never stall each other.
    let (client, conn) = bounded(
        "h2 handshake",
        h2::client::Builder::new()
            .initial_window_size(4 << 20)
            .initial_connection_window_size(64 << 20)
            .handshake(tls),
    )
    .await
    .unwrap();
    (client, tokio::spawn(conn))
}

fn request(method: &str, path: &str) -> http::request::Builder {
    http::Request::builder()
        .method(method)
        .uri(format!("https://localhost{path}"))
}

/// Status and body of an HTTP/2 response.
async fn h2_response(resp: h2::client::ResponseFuture) -> (u16, String) {
    let resp = bounded("h2 response", resp).await.expect("h2 response");
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut out = Vec::new();
    while let Some(chunk) = bounded("h2 body", body.data()).await {
        match chunk {
            Ok(c) => {
                let _ = body.flow_control().release_capacity(c.len());
                out.extend_from_slice(&c);
            }
            Err(_) => break,
        }
    }
    (status, String::from_utf8_lossy(&out).into_owned())
}

struct H3 {
    quic: quinn::Connection,
    send: h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
    _endpoint: quinn::Endpoint,
}

async fn quic_connect(edge: &Running) -> (quinn::Endpoint, quinn::Connection) {
    let crypto = tls::client_config(&Trust::InsecureAny, &[tls::ALPN_H3]).unwrap();
    let qc = quinn::crypto::rustls::QuicClientConfig::try_from(crypto).unwrap();
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(qc)));
    let conn = bounded("QUIC handshake", endpoint.connect(edge.quic, "localhost").unwrap())
        .await
        .expect("QUIC handshake");
    (endpoint, conn)
}

async fn h3_client(edge: &Running) -> H3 {
    let (endpoint, quic) = quic_connect(edge).await;
    let (mut driver, send) = bounded("h3 setup", h3::client::new(h3_quinn::Connection::new(quic.clone())))
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = driver.wait_idle().await;
    });
    H3 {
        quic,
        send,
        _endpoint: endpoint,
    }
}

type H3Req = h3::client::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>;

async fn h3_response(stream: &mut H3Req) -> (u16, String) {
    let resp = bounded("h3 response", stream.recv_response())
        .await
        .expect("h3 response");
    let mut out = Vec::new();
    while let Ok(Some(mut chunk)) = bounded("h3 body", stream.recv_data()).await {
        out.extend_from_slice(&chunk.copy_to_bytes(chunk.remaining()));
    }
    (resp.status().as_u16(), String::from_utf8_lossy(&out).into_owned())
}

fn with_error<'a>(records: &'a [Value], error: &str) -> Vec<&'a Value> {
    records.iter().filter(|r| r["error"] == error).collect()
}

// ---- slowloris: headers dribbled, body dribbled, idle after the handshake ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_headers_dribbled_are_cut_at_the_header_timeout_while_others_are_served() {
    let edge = start(|_| {}).await;
    let mut slow = tls_connect(edge.tcp, b"http/1.1").await;
    slow.write_all(b"GET /bytes/10 HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    let dribble = async {
        for i in 0..1000 {
            if slow.write_all(format!("x-{i}: y\r\n").as_bytes()).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    bounded("the slow client is cut off", dribble).await;
    let text = h1_raw(&edge, b"GET /bytes/10 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let records = edge.stop().await;
    assert_eq!(with_error(&records, "header_read_timeout").len(), 1, "{records:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_client_that_never_starts_tls_is_closed_at_the_handshake_timeout() {
    let edge = start(|_| {}).await;
    let mut s = TcpStream::connect(edge.tcp).await.unwrap();
    assert_eq!(read_to_close(&mut s).await, "");
    let records = edge.stop().await;
    assert_eq!(with_error(&records, "tls_handshake_timeout").len(), 1, "{records:?}");
}

/// A client that opened a connection and never finished its handshake (a race's losing
/// dial, a client gone away) does not hold the edge's shutdown up until the handshake
/// timeout, here far longer than `stop`'s bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_in_progress_does_not_hold_up_the_shutdown() {
    let edge = start(|c| c.handshake_timeout_ms = 3_600_000).await;
    let _silent = TcpStream::connect(edge.tcp).await.unwrap();
    // The edge lists a TCP connection from accept, before its handshake.
    bounded("connection accepted", async {
        while !edge.connections().await.contains("\"tcp\"") {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let records = edge.stop().await;
    assert_eq!(with_error(&records, "shutdown_in_handshake").len(), 1, "{records:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_http2_connection_gets_goaway_at_the_idle_timeout() {
    let edge = start(|_| {}).await;
    let (_client, conn) = h2_client(&edge).await;
    bounded("idle HTTP/2 connection closes", conn)
        .await
        .unwrap()
        .expect("closed with GOAWAY(NO_ERROR), not an error");
    edge.wait_hits("idle_timeout", 1).await;
    let records = edge.stop().await;
    assert_eq!(with_error(&records, "idle_timeout").len(), 1, "{records:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_http3_connection_is_closed_at_the_idle_timeout() {
    let edge = start(|_| {}).await;
    let h3 = h3_client(&edge).await;
    let reason = bounded("idle HTTP/3 connection closes", h3.quic.closed()).await;
    assert!(
        matches!(&reason, quinn::ConnectionError::ApplicationClosed(c) if c.error_code.into_inner() == 0x100),
        "closed with H3_NO_ERROR: {reason:?}"
    );
    let records = edge.stop().await;
    assert_eq!(with_error(&records, "idle_timeout").len(), 1, "{records:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http3_headers_that_never_arrive_are_cut_at_the_header_timeout() {
    let edge = start(|_| {}).await;
    let (_ep, quic) = quic_connect(&edge).await;
    // A request stream with half an HTTP/3 HEADERS frame, then silence.
    let (mut send, mut recv) = quic.open_bi().await.unwrap();
    send.write_all(&[0x01, 0x40, 0x40, 0x00]).await.unwrap();
    // The edge drops the stream: reset, or ended with no response.
    let outcome = bounded("the stream ends", recv.read_to_end(1024)).await;
    assert!(outcome.as_ref().map_or(true, |b| b.is_empty()), "{outcome:?}");
    let records = edge.stop().await;
    assert_eq!(with_error(&records, "header_read_timeout").len(), 1, "{records:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dribbled_body_gets_408_on_every_protocol() {
    let edge = start(|_| {}).await;
    // HTTP/1.1: 5 of 50 promised bytes, then nothing.
    let mut s = tls_connect(edge.tcp, b"http/1.1").await;
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\nhello")
        .await
        .unwrap();
    let text = read_to_close(&mut s).await;
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    // HTTP/2.
    let (mut client, _conn) = h2_client(&edge).await;
    let (resp, mut body) = client
        .send_request(request("POST", "/bytes/10").body(()).unwrap(), false)
        .unwrap();
    body.send_data(Bytes::from_static(b"hello"), false).unwrap();
    let (status, text) = h2_response(resp).await;
    assert_eq!(status, 408, "{text}");
    assert!(text.contains("body_read_timeout_ms"), "{text}");
    // HTTP/3.
    let mut h3 = h3_client(&edge).await;
    let mut stream = h3
        .send
        .send_request(request("POST", "/echo").body(()).unwrap())
        .await
        .unwrap();
    stream.send_data(Bytes::from_static(b"hello")).await.unwrap();
    let (status, _) = h3_response(&mut stream).await;
    assert_eq!(status, 408);
    let records = edge.stop().await;
    let timed_out = with_error(&records, "body_read_timeout");
    let protocols: Vec<&str> = timed_out.iter().filter_map(|r| r["protocol"].as_str()).collect();
    assert_eq!(protocols.len(), 3, "{records:?}");
    for p in ["h1", "h2", "h3"] {
        assert!(protocols.contains(&p), "{p} in {protocols:?}");
    }
    assert!(timed_out.iter().all(|r| r["status"] == 408));
}

/// An HTTP/2 HEADERS block for `GET /bytes/10` begun, never ended: `:method GET` (2),
/// `:scheme https` (7), `:path` literal (index 4), `:authority` literal (index 1).
fn h2_open_headers() -> Vec<u8> {
    let mut block = vec![0x82, 0x87, 0x04, 9];
    block.extend_from_slice(b"/bytes/10");
    block.extend_from_slice(&[0x01, 1, b'x']);
    block
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_headers_dribbled_in_continuation_frames_are_cut_at_the_idle_timeout() {
    let edge = start(|_| {}).await;
    // A HEADERS frame without END_HEADERS, then one CONTINUATION every 500 ms: fewer
    // than h2's cap of five, so only the edge's clock can end it. No request exists
    // until the header block ends, so the connection is idle from its start.
    let mut s = tls_connect(edge.tcp, b"h2").await;
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(h2_frame(0x4, 0, 0, &[]));
    out.extend(h2_frame(0x1, 0x0, 1, &h2_open_headers()));
    s.write_all(&out).await.unwrap();
    let (rd, mut wr) = tokio::io::split(s);
    let dribble = tokio::spawn(async move {
        for i in 0..4u8 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            // A literal field without indexing, new name: "x-i: y".
            let field = [0x00, 3, b'x', b'-', b'0' + i, 1, b'y'];
            if wr.write_all(&h2_frame(0x9, 0x0, 1, &field)).await.is_err() {
                break;
            }
        }
        wr
    });
    let mut tls = rd;
    let code = goaway_code_from(&mut tls).await;
    assert_eq!(code, Some(0), "GOAWAY(NO_ERROR) at the idle timeout");
    let _ = read_to_close(&mut tls).await;
    let _ = bounded("dribbler ends", dribble).await;
    edge.wait_hits("idle_timeout", 1).await;
    // Past h2's cap of CONTINUATION frames the connection ends at once, with an error.
    let mut s = tls_connect(edge.tcp, b"h2").await;
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(h2_frame(0x4, 0, 0, &[]));
    out.extend(h2_frame(0x1, 0x0, 1, &h2_open_headers()));
    for i in 0..20u8 {
        out.extend(h2_frame(0x9, 0x0, 1, &[0x00, 3, b'y', b'-', b'a' + i, 1, b'z']));
    }
    let _ = s.write_all(&out).await;
    let code = goaway_code(&mut s).await;
    assert!(matches!(code, Some(c) if c != 0), "GOAWAY with an error code: {code:?}");
    still_serves(&edge).await;
    let records = edge.stop().await;
    assert_eq!(with_error(&records, "idle_timeout").len(), 1, "{records:?}");
}

// ---- a client that stops reading ----

/// Reads until the peer closes or errors; how many bytes came.
async fn count_to_close<R: tokio::io::AsyncRead + Unpin>(r: &mut R) -> u64 {
    let mut n = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match bounded("peer closes", r.read(&mut buf)).await {
            Ok(0) | Err(_) => return n,
            Ok(k) => n += k as u64,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_cut_at_the_send_timeout_on_every_protocol() {
    const BIG: u64 = 200_000_000;
    let edge = start(|c| {
        c.limits.send_timeout_ms = 300;
        c.limits.connection_idle_timeout_ms = 10_000;
    })
    .await;
    let path = format!("/bytes/{BIG}");
    // HTTP/1.1: the request, then no read until the edge has given up; the socket
    // buffers hold a few MB of the response at most.
    let mut h1 = tls_connect(edge.tcp, b"http/1.1").await;
    h1.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    edge.wait_hits("send_timeout", 1).await;
    let got = count_to_close(&mut h1).await;
    assert!(got < BIG, "HTTP/1.1 response cut short: {got} bytes");
    // HTTP/2: h2's default 64 KiB stream window, never released.
    let tls = tls_connect(edge.tcp, b"h2").await;
    let (mut client, conn) = bounded("h2 handshake", h2::client::handshake(tls)).await.unwrap();
    let conn = tokio::spawn(conn);
    let (resp, _) = client
        .send_request(request("GET", &path).body(()).unwrap(), true)
        .unwrap();
    let resp = bounded("h2 response head", resp).await.unwrap();
    assert_eq!(resp.status(), 200);
    edge.wait_hits("send_timeout", 2).await;
    let _ = bounded("the edge drops the HTTP/2 connection", conn).await;
    drop(resp);
    // HTTP/3: the response stream is never read, so its QUIC credit runs out.
    let mut h3 = h3_client(&edge).await;
    let mut stream = h3
        .send
        .send_request(request("GET", &path).body(()).unwrap())
        .await
        .unwrap();
    let _ = stream.finish().await;
    let head = bounded("h3 response head", stream.recv_response()).await.unwrap();
    assert_eq!(head.status(), 200);
    edge.wait_hits("send_timeout", 3).await;
    // The stream was reset: reading it now ends in an error before BIG bytes.
    let mut got = 0u64;
    let read = async {
        loop {
            match stream.recv_data().await {
                Ok(Some(mut chunk)) => got += chunk.copy_to_bytes(chunk.remaining()).len() as u64,
                Ok(None) => return false,
                Err(_) => return true,
            }
        }
    };
    assert!(
        bounded("h3 stream ends", read).await,
        "HTTP/3 stream reset, not ended ({got} bytes)"
    );
    assert!(got < BIG);
    still_serves(&edge).await;
    let records = edge.stop().await;
    let cut = with_error(&records, "send_timeout");
    let mut protocols: Vec<&str> = cut.iter().filter_map(|r| r["protocol"].as_str()).collect();
    protocols.sort_unstable();
    assert_eq!(protocols, ["h1", "h2", "h3"], "{records:?}");
    assert!(
        cut.iter()
            .all(|r| r["status"] == 200 && r["bytes"].as_u64() < Some(BIG)),
        "{cut:?}"
    );
}

// ---- oversize headers ----

fn many_headers(n: usize) -> String {
    (0..n).map(|i| format!("x-h{i}: v\r\n")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_or_too_large_headers_get_431_on_every_protocol() {
    let edge = start(|_| {}).await;
    // HTTP/1.1: hyper answers both, and the connection's record says so.
    let text = h1_raw(
        &edge,
        format!("GET /bytes/1 HTTP/1.1\r\nHost: x\r\n{}\r\n", many_headers(40)).as_bytes(),
    )
    .await;
    assert!(text.starts_with("HTTP/1.1 431"), "{text}");
    let big = "v".repeat(10_000);
    let text = h1_raw(
        &edge,
        format!("GET /bytes/1 HTTP/1.1\r\nHost: x\r\nx-big: {big}\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(text.starts_with("HTTP/1.1 431"), "{text}");
    // HTTP/2: the count here, the size in h2 (SETTINGS_MAX_HEADER_LIST_SIZE).
    let (mut client, _conn) = h2_client(&edge).await;
    let mut req = request("GET", "/bytes/1");
    for i in 0..40 {
        req = req.header(format!("x-h{i}"), "v");
    }
    let (resp, _) = client.send_request(req.body(()).unwrap(), true).unwrap();
    assert_eq!(h2_response(resp).await.0, 431);
    let req = request("GET", "/bytes/1")
        .header("x-big", big.as_str())
        .body(())
        .unwrap();
    let (resp, _) = client.send_request(req, true).unwrap();
    assert_eq!(h2_response(resp).await.0, 431);
    // HTTP/3: the count through h3's client.
    let mut h3 = h3_client(&edge).await;
    let mut req = request("GET", "/bytes/1");
    for i in 0..40 {
        req = req.header(format!("x-h{i}"), "v");
    }
    let mut stream = h3.send.send_request(req.body(()).unwrap()).await.unwrap();
    // The edge may answer, and stop the request side (H3_NO_ERROR), before this.
    let _ = stream.finish().await;
    assert_eq!(h3_response(&mut stream).await.0, 431);
    // HTTP/3 size: h3's client would refuse to send it, so the frame is written raw.
    let (_ep, quic) = quic_connect(&edge).await;
    let status = h3_raw_status(&quic, &[("x-big", &big)]).await;
    assert_eq!(status, Some(431));
    let records = edge.stop().await;
    let hits = with_error(&records, "header_limit");
    assert!(hits.iter().all(|r| r["status"] == 431), "{hits:?}");
    let by = |p: &str| hits.iter().filter(|r| r["protocol"] == p).count();
    assert_eq!((by("h1"), by("h3")), (2, 2), "{records:?}");
    // h2 answers an oversize list itself without a record; the count reaches us.
    assert_eq!(by("h2"), 1, "{records:?}");
}

/// An HPACK/QPACK prefixed integer (RFC 7541 §5.1).
fn prefixed_int(out: &mut Vec<u8>, first: u8, prefix_bits: u8, mut v: usize) {
    let max = (1usize << prefix_bits) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

fn quic_varint(out: &mut Vec<u8>, v: u64) {
    match v {
        0..=63 => out.push(v as u8),
        64..=16383 => out.extend_from_slice(&(0x4000 | v as u16).to_be_bytes()),
        _ => out.extend_from_slice(&(0x8000_0000 | v as u32).to_be_bytes()),
    }
}

/// Sends a GET of `/bytes/1` with `extra` fields as a raw HTTP/3 HEADERS frame (QPACK
/// with the static table only, RFC 9204 §4.5) and returns the response status.
async fn h3_raw_status(quic: &quinn::Connection, extra: &[(&str, &str)]) -> Option<u16> {
    // The client's control stream with an empty SETTINGS frame (RFC 9114 §6.2.1).
    let mut control = quic.open_uni().await.unwrap();
    control.write_all(&[0x00, 0x04, 0x00]).await.unwrap();
    let mut block = vec![0x00, 0x00];
    // :method GET (static 17), :scheme https (23), :path with literal value (1).
    block.extend_from_slice(&[0xd1, 0xd7]);
    prefixed_int(&mut block, 0x50, 4, 1);
    prefixed_int(&mut block, 0x00, 7, "/bytes/1".len());
    block.extend_from_slice(b"/bytes/1");
    prefixed_int(&mut block, 0x50, 4, 0);
    prefixed_int(&mut block, 0x00, 7, "localhost".len());
    block.extend_from_slice(b"localhost");
    for (k, v) in extra {
        prefixed_int(&mut block, 0x20, 3, k.len());
        block.extend_from_slice(k.as_bytes());
        prefixed_int(&mut block, 0x00, 7, v.len());
        block.extend_from_slice(v.as_bytes());
    }
    let mut frame = vec![0x01];
    quic_varint(&mut frame, block.len() as u64);
    frame.extend_from_slice(&block);
    let (mut send, mut recv) = quic.open_bi().await.unwrap();
    send.write_all(&frame).await.unwrap();
    send.finish().unwrap();
    let resp = bounded("raw h3 response", recv.read_to_end(1 << 20)).await.ok()?;
    // The response HEADERS frame: type 1, length, then QPACK's two-byte prefix; the
    // status is a static-table index or a literal with the :status name (RFC 9204
    // Appendix A).
    let mut at = 0;
    let mut varint = || {
        let first = *resp.get(at)?;
        let len = 1usize << (first >> 6);
        let mut v = u64::from(first & 0x3f);
        for b in resp.get(at + 1..at + len)? {
            v = (v << 8) | u64::from(*b);
        }
        at += len;
        Some(v)
    };
    let (kind, _len) = (varint()?, varint()?);
    assert_eq!(kind, 1, "the response starts with HEADERS");
    let block = resp.get(at + 2..)?;
    let index_to_status = [(24u8, 103u16), (25, 200), (26, 304), (27, 404), (28, 503), (63, 100)];
    match block.first()? {
        b if b & 0xc0 == 0xc0 => index_to_status.iter().find(|(i, _)| *i == b & 0x3f).map(|(_, s)| *s),
        b if b & 0xf0 == 0x50 => {
            // Literal with a name reference: three digits, plain or Huffman-coded.
            let (len_byte, value) = (*block.get(2)?, block.get(3..)?);
            let digits = if len_byte & 0x80 == 0 {
                std::str::from_utf8(value.get(..3)?).ok()?.to_string()
            } else {
                huffman_digits(value.get(..(len_byte & 0x7f) as usize)?, 3)?
            };
            digits.parse().ok()
        }
        _ => None,
    }
}

/// Decodes `n` digits from HPACK's Huffman code (RFC 7541 Appendix B): '0'-'2' are
/// the 5-bit codes 0-2, '3'-'9' the 6-bit codes 25-31.
fn huffman_digits(bytes: &[u8], n: usize) -> Option<String> {
    let bit = |i: usize| -> Option<u32> { Some(u32::from(bytes.get(i / 8)? >> (7 - i % 8) & 1)) };
    let (mut at, mut out) = (0, String::new());
    while out.len() < n {
        let five = (0..5).try_fold(0, |v, k| Some(v << 1 | bit(at + k)?))?;
        if five <= 2 {
            out.push(char::from(b'0' + five as u8));
            at += 5;
            continue;
        }
        let six = five << 1 | bit(at + 5)?;
        if !(25..=31).contains(&six) {
            return None;
        }
        out.push(char::from(b'3' + (six - 25) as u8));
        at += 6;
    }
    Some(out)
}

// ---- oversize bodies ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_body_gets_413_on_every_protocol_declared_or_not() {
    let edge = start(|_| {}).await;
    let chunk = Bytes::from(vec![b'u'; 20_000]);
    // HTTP/1.1, declared.
    let text = h1_raw(
        &edge,
        b"POST /bytes/1 HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n",
    )
    .await;
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    // HTTP/1.1, chunked: counted as it arrives.
    let mut s = tls_connect(edge.tcp, b"http/1.1").await;
    s.write_all(b"POST /bytes/1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        .await
        .unwrap();
    let send_chunks = async {
        for _ in 0..10 {
            let mut c = format!("{:x}\r\n", chunk.len()).into_bytes();
            c.extend_from_slice(&chunk);
            c.extend_from_slice(b"\r\n");
            if s.write_all(&c).await.is_err() {
                break;
            }
        }
    };
    bounded("upload", send_chunks).await;
    let text = read_to_close(&mut s).await;
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    // HTTP/2, undeclared, into the buffered /echo (its own smaller limit).
    let (mut client, _conn) = h2_client(&edge).await;
    let (resp, mut body) = client
        .send_request(request("POST", "/echo").body(()).unwrap(), false)
        .unwrap();
    body.send_data(chunk.clone(), false).unwrap();
    let (status, text) = h2_response(resp).await;
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("max_buffered_body_bytes"), "{text}");
    // HTTP/3: an answer, not a stream reset.
    let mut h3 = h3_client(&edge).await;
    let mut stream = h3
        .send
        .send_request(request("POST", "/bytes/1").body(()).unwrap())
        .await
        .unwrap();
    for _ in 0..6 {
        if stream.send_data(chunk.clone()).await.is_err() {
            break;
        }
    }
    let _ = stream.finish().await;
    let (status, text) = h3_response(&mut stream).await;
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("max_body_bytes"), "{text}");
    let records = edge.stop().await;
    let hits = with_error(&records, "body_limit");
    assert_eq!(hits.len(), 4, "{records:?}");
    assert!(hits.iter().all(|r| r["status"] == 413));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_held_whole_share_one_memory_budget_and_the_extra_one_gets_503() {
    let edge = start(|c| {
        c.limits.body_memory_bytes = 10_000;
        c.limits.max_buffered_body_bytes = 8_000;
        c.limits.body_read_timeout_ms = 5_000;
    })
    .await;
    let (mut client, _conn) = h2_client(&edge).await;
    // The first /echo holds 6000 bytes and waits for more.
    let (first, mut first_body) = client
        .send_request(request("POST", "/echo").body(()).unwrap(), false)
        .unwrap();
    first_body.send_data(Bytes::from(vec![b'a'; 6000]), false).unwrap();
    // Let the edge take the first body's bytes before the second asks.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (mut client2, _conn2) = h2_client(&edge).await;
    let (second, mut second_body) = client2
        .send_request(request("POST", "/echo").body(()).unwrap(), false)
        .unwrap();
    second_body.send_data(Bytes::from(vec![b'b'; 6000]), true).unwrap();
    let (status, text) = h2_response(second).await;
    assert_eq!(status, 503, "{text}");
    // The first completes, and its memory comes back: a third fits.
    first_body.send_data(Bytes::from_static(b"!"), true).unwrap();
    let (status, text) = h2_response(first).await;
    assert_eq!((status, text.len()), (200, 6001));
    // The first's budget returns when its response body is dropped, just after the
    // last byte is handed over: ask until it is back (bounded).
    let third = async {
        loop {
            let (third, mut third_body) = client2
                .send_request(request("POST", "/echo").body(()).unwrap(), false)
                .unwrap();
            third_body.send_data(Bytes::from(vec![b'c'; 6000]), true).unwrap();
            match h2_response(third).await.0 {
                503 => tokio::time::sleep(Duration::from_millis(20)).await,
                s => return s,
            }
        }
    };
    assert_eq!(bounded("a third body fits", third).await, 200);
    let records = edge.stop().await;
    assert!(!with_error(&records, "body_memory").is_empty(), "{records:?}");
}

// ---- streams and connections ----

/// An HTTP/2 frame header (RFC 9113 §4.1).
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[kind, flags]);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_streams_past_the_limit_are_refused() {
    let edge = start(|_| {}).await;
    let mut s = tls_connect(edge.tcp, b"h2").await;
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(h2_frame(0x4, 0, 0, &[]));
    // Four POSTs to /echo whose bodies never end (HEADERS without END_STREAM), ignoring
    // the edge's SETTINGS_MAX_CONCURRENT_STREAMS = 2. HPACK: :method POST (3),
    // :scheme https (7), :path literal (index 4), :authority literal (index 1).
    let mut block = vec![0x83, 0x87, 0x04, 5];
    block.extend_from_slice(b"/echo");
    block.extend_from_slice(&[0x01, 1, b'x']);
    for id in [1u32, 3, 5, 7] {
        out.extend(h2_frame(0x1, 0x4, id, &block));
    }
    s.write_all(&out).await.unwrap();
    // Read frames until RST_STREAMs for streams 5 and 7 arrive.
    let mut buf = Vec::new();
    let mut refused = Vec::new();
    let read = async {
        let mut chunk = [0u8; 4096];
        while !(refused.iter().any(|r: &(u32, u32)| r.0 == 5) && refused.iter().any(|r| r.0 == 7)) {
            let n = s.read(&mut chunk).await.unwrap();
            assert!(n > 0, "closed before refusing: {refused:?}");
            buf.extend_from_slice(&chunk[..n]);
            while buf.len() >= 9 {
                let len = u32::from_be_bytes([0, buf[0], buf[1], buf[2]]) as usize;
                if buf.len() < 9 + len {
                    break;
                }
                let kind = buf[3];
                let id = u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) & 0x7fff_ffff;
                if kind == 0x3 {
                    let code = u32::from_be_bytes([buf[9], buf[10], buf[11], buf[12]]);
                    refused.push((id, code));
                }
                buf.drain(..9 + len);
            }
        }
    };
    bounded("refusals", read).await;
    // REFUSED_STREAM = 0x7 (RFC 9113 §7); streams 1 and 3 were taken.
    refused.retain(|r| r.0 == 5 || r.0 == 7);
    assert_eq!(refused, [(5, 0x7), (7, 0x7)]);
    edge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_gives_no_credit_for_more_streams_than_the_limit() {
    let edge = start(|c| {
        c.limits.body_read_timeout_ms = 10_000;
        c.limits.header_read_timeout_ms = 10_000;
        c.limits.connection_idle_timeout_ms = 10_000;
    })
    .await;
    let (_ep, quic) = quic_connect(&edge).await;
    let (mut a, _ra) = quic.open_bi().await.unwrap();
    let (_b, _rb) = quic.open_bi().await.unwrap();
    a.write_all(&[0x01]).await.unwrap();
    let third = quic.open_bi();
    tokio::pin!(third);
    assert!(
        tokio::time::timeout(Duration::from_millis(200), &mut third)
            .await
            .is_err(),
        "a third stream opened with a limit of 2"
    );
    // When one ends, the edge grants one more.
    a.reset(0u32.into()).unwrap();
    bounded("credit for a new stream", third).await.unwrap();
    edge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_per_address_cap_are_refused_on_tcp_and_quic() {
    let edge = start(|c| {
        c.limits.max_connections_per_ip = 2;
        c.limits.connection_idle_timeout_ms = 10_000;
    })
    .await;
    let _one = tls_connect(edge.tcp, b"h2").await;
    let (_ep, _two) = quic_connect(&edge).await;
    // The third, over TCP: closed before TLS.
    let tcp = TcpStream::connect(edge.tcp).await.unwrap();
    let cfg = tls::client_config(&Trust::InsecureAny, &[b"h2"]).unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let r = bounded(
        "refused TLS",
        tokio_rustls::TlsConnector::from(Arc::new(cfg)).connect(name, tcp),
    )
    .await;
    assert!(r.is_err(), "a third TCP connection was served");
    // And over QUIC.
    let crypto = tls::client_config(&Trust::InsecureAny, &[tls::ALPN_H3]).unwrap();
    let qc = quinn::crypto::rustls::QuicClientConfig::try_from(crypto).unwrap();
    let mut ep = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    ep.set_default_client_config(quinn::ClientConfig::new(Arc::new(qc)));
    let r = bounded("refused QUIC", ep.connect(edge.quic, "localhost").unwrap()).await;
    assert!(matches!(r, Err(quinn::ConnectionError::ConnectionClosed(_))), "{r:?}");
    edge.wait_hits("connection_limit_per_ip", 2).await;
    let records = edge.stop().await;
    assert_eq!(with_error(&records, "connection_limit_per_ip").len(), 2, "{records:?}");
}

// ---- proxy ----

/// An origin that answers every request with the request's header names (one per
/// line) and a few hop-by-hop fields of its own.
async fn echo_headers_origin() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|req: http::Request<hyper::body::Incoming>| async move {
                    let names: String = req.headers().keys().map(|k| format!("{k}\n")).collect();
                    let resp = http::Response::builder()
                        .header("connection", "x-origin-private")
                        .header("x-origin-private", "1")
                        .header("keep-alive", "timeout=5")
                        .header("x-origin-public", "1")
                        .body(http_body_util::Full::new(Bytes::from(names)))
                        .unwrap();
                    Ok::<_, std::convert::Infallible>(resp)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_drops_hop_by_hop_fields_both_ways() {
    let origin = echo_headers_origin().await;
    let edge = start(|c| c.upstream = Some(format!("http://{origin}"))).await;
    let text = h1_raw(
        &edge,
        b"GET /page HTTP/1.1\r\nHost: x\r\nConnection: close, x-client-private\r\n\
          x-client-private: 1\r\nKeep-Alive: timeout=9\r\nTE: trailers\r\nx-client-public: 1\r\n\r\n",
    )
    .await
    .to_lowercase();
    assert!(text.starts_with("http/1.1 200"), "{text}");
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(body.contains("x-client-public"), "{body}");
    for f in ["x-client-private", "keep-alive", "te\n", "connection"] {
        assert!(!body.contains(f), "{f} reached the origin: {body}");
    }
    assert!(head.contains("x-origin-public"), "{head}");
    assert!(
        !head.contains("x-origin-private") && !head.contains("keep-alive"),
        "{head}"
    );
    edge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_upstream_gets_504_and_a_closed_one_502_each_with_a_record() {
    // An origin that accepts and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let _hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    let edge = start(|c| {
        c.upstream = Some(format!("http://{silent_addr}"));
        c.limits.proxy_response_timeout_ms = 300;
    })
    .await;
    let text = h1_raw(&edge, b"GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
    assert!(text.starts_with("HTTP/1.1 504"), "{text}");
    let records = edge.stop().await;
    let r = with_error(&records, "upstream_timeout");
    assert_eq!(r.len(), 1, "{records:?}");
    assert_eq!(r[0]["status"], 504);

    // A port with nobody listening.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_addr = closed.local_addr().unwrap();
    drop(closed);
    let edge = start(|c| c.upstream = Some(format!("http://{closed_addr}"))).await;
    let mut h3 = h3_client(&edge).await;
    let mut stream = h3
        .send
        .send_request(request("GET", "/x").body(()).unwrap())
        .await
        .unwrap();
    // The edge may answer, and stop the request side (H3_NO_ERROR), before this.
    let _ = stream.finish().await;
    let (status, text) = h3_response(&mut stream).await;
    assert_eq!(status, 502, "{text}");
    let records = edge.stop().await;
    let r = with_error(&records, "upstream_failed");
    assert_eq!(r.len(), 1, "{records:?}");
    assert_eq!(r[0]["protocol"], "h3");
}

// ---- admin ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_port_closes_a_request_head_that_never_ends() {
    let edge = start(|c| c.limits.admin_header_timeout_ms = 300).await;
    let mut s = TcpStream::connect(edge.admin).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: a\r\n").await.unwrap();
    let text = read_to_close(&mut s).await;
    assert!(!text.contains("200 OK"), "{text}");
    edge.stop().await;
}

// ---- malformed input: the edge answers or closes, never crashes, and serves others ----

/// A GET of `/bytes/10` over HTTP/1.1 succeeds: the edge is still serving.
async fn still_serves(edge: &Running) {
    let text = h1_raw(edge, b"GET /bytes/10 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let mut h3 = h3_client(edge).await;
    let mut stream = h3
        .send
        .send_request(request("GET", "/bytes/10").body(()).unwrap())
        .await
        .unwrap();
    // The edge may answer, and stop the request side (H3_NO_ERROR), before this.
    let _ = stream.finish().await;
    assert_eq!(h3_response(&mut stream).await, (200, "g".repeat(10)));
}

/// A fixed pseudo-random byte stream (xorshift), so a failure replays.
fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_after_tls_and_malformed_http1_are_answered_or_closed() {
    let edge = start(|_| {}).await;
    for (i, alpn) in [b"h2".as_slice(), b"http/1.1"].into_iter().enumerate() {
        let mut s = tls_connect(edge.tcp, alpn).await;
        let _ = s.write_all(&noise(i as u64 + 1, 64 * 1024)).await;
        let _ = read_to_close(&mut s).await;
    }
    let text = h1_raw(&edge, b"BLAH BLAH\r\n\r\n").await;
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    let text = h1_raw(
        &edge,
        b"GET /bytes/1 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
    )
    .await;
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    still_serves(&edge).await;
    edge.stop().await;
}

/// The error code of the first GOAWAY frame the peer sends (RFC 9113 §6.8), if any.
async fn goaway_code(s: &mut Tls) -> Option<u32> {
    goaway_code_from(s).await
}

/// [`goaway_code`] on any reader (the read half of a split connection).
async fn goaway_code_from<R: tokio::io::AsyncRead + Unpin>(s: &mut R) -> Option<u32> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        while buf.len() >= 9 {
            let len = u32::from_be_bytes([0, buf[0], buf[1], buf[2]]) as usize;
            if buf.len() < 9 + len {
                break;
            }
            if buf[3] == 0x7 && len >= 8 {
                return Some(u32::from_be_bytes([buf[13], buf[14], buf[15], buf[16]]));
            }
            buf.drain(..9 + len);
        }
        match bounded("GOAWAY", s.read(&mut chunk)).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_http2_frames_end_the_connection_with_goaway_and_the_edge_serves_on() {
    let edge = start(|_| {}).await;
    let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    let cases: [Vec<u8>; 5] = [
        // SETTINGS whose length is not a multiple of 6.
        h2_frame(0x4, 0, 0, &[0, 3, 0, 0, 0]),
        // DATA on stream 0.
        h2_frame(0x0, 0, 0, b"x"),
        // HEADERS on stream 0.
        h2_frame(0x1, 0x4, 0, &[0x82]),
        // A PING of 7 bytes.
        h2_frame(0x6, 0, 0, &[0; 7]),
        // A HEADERS block that is not HPACK (an index past both tables).
        h2_frame(0x1, 0x5, 1, &[0xff, 0xff, 0xff, 0x7f]),
    ];
    for frame in cases {
        let mut s = tls_connect(edge.tcp, b"h2").await;
        let mut out = preface.clone();
        out.extend(h2_frame(0x4, 0, 0, &[]));
        out.extend(frame.clone());
        s.write_all(&out).await.unwrap();
        let code = goaway_code(&mut s).await;
        // Any error code but NO_ERROR (RFC 9113 §7): the stack names the fault.
        assert!(matches!(code, Some(c) if c != 0), "{frame:?}: {code:?}");
    }
    still_serves(&edge).await;
    edge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_quic_packets_are_dropped_and_the_edge_serves_on() {
    let edge = start(|_| {}).await;
    let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    for i in 0..2000u64 {
        let len = [1usize, 20, 1200, 1500][(i % 4) as usize];
        let mut d = noise(i + 7, len);
        // Every fourth looks like a long-header Initial of version 1 (RFC 9000 §17.2).
        if i % 4 == 2 {
            d[0] = 0xc0 | (d[0] & 0x0f);
            d[1..5].copy_from_slice(&1u32.to_be_bytes());
        }
        udp.send_to(&d, edge.quic).await.unwrap();
    }
    still_serves(&edge).await;
    edge.stop().await;
}

// ---- graceful shutdown under load ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_under_load_completes_every_accepted_request_and_records_it() {
    let edge = start(|c| {
        c.limits.max_streams_per_connection = 64;
        c.limits.connection_idle_timeout_ms = 10_000;
    })
    .await;
    const EACH: usize = 20;
    const SIZE: usize = 300_000;
    let (mut h2, _conn) = h2_client(&edge).await;
    let mut h2_heads = Vec::new();
    for _ in 0..EACH {
        let (resp, _) = h2
            .send_request(request("GET", &format!("/bytes/{SIZE}")).body(()).unwrap(), true)
            .unwrap();
        h2_heads.push(resp);
    }
    let h3 = h3_client(&edge).await;
    let mut h3_streams = Vec::new();
    for _ in 0..EACH {
        let mut send = h3.send.clone();
        let mut s = send
            .send_request(request("GET", &format!("/bytes/{SIZE}")).body(()).unwrap())
            .await
            .unwrap();
        let _ = s.finish().await;
        h3_streams.push(s);
    }
    // Every request has its response head: each was accepted before the signal.
    let mut h2_resps = Vec::new();
    for r in h2_heads {
        h2_resps.push(bounded("h2 head", r).await.unwrap());
    }
    for s in &mut h3_streams {
        bounded("h3 head", s.recv_response()).await.unwrap();
    }
    let Running {
        dir, mut stop, task, ..
    } = edge;
    let _ = stop.take().unwrap().send(());
    let mut received = Vec::new();
    for r in h2_resps {
        let mut body = r.into_body();
        let mut n = 0;
        while let Some(c) = bounded("h2 body", body.data()).await {
            let c = c.expect("no reset during shutdown");
            let _ = body.flow_control().release_capacity(c.len());
            n += c.len();
        }
        received.push(n);
    }
    for s in &mut h3_streams {
        let mut n = 0;
        while let Some(mut c) = bounded("h3 body", s.recv_data())
            .await
            .expect("no reset during shutdown")
        {
            n += c.copy_to_bytes(c.remaining()).len();
        }
        received.push(n);
    }
    assert_eq!(received, vec![SIZE; 2 * EACH]);
    bounded("edge stops", task).await.unwrap();
    let records: Vec<Value> = std::fs::read_to_string(dir.path().join("edge.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let served: Vec<_> = records
        .iter()
        .filter(|r| r["bytes"] == SIZE as u64 && r["status"] == 200 && r["error"].is_null())
        .collect();
    assert_eq!(served.len(), 2 * EACH, "{records:?}");
}
