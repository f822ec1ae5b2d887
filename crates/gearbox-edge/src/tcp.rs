//! The TCP side: TLS 1.3 accept, ALPN to HTTP/2 or HTTP/1.1 (hyper), per-socket
//! congestion control, and "last byte acknowledged" from `TCP_INFO`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gearbox_dataplane::telemetry::{unix_ms_now, EdgeRecord, Protocol, Side, SCHEMA_VERSION};
use gearbox_dataplane::transport;
use gearbox_gear_api::{AcceptedConnection, IwChoice, Transport};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio_util::sync::CancellationToken;

use crate::service::{respond, EdgeBody, RequestBody};
use crate::{Shared, SHUTDOWN_GRACE};

/// Longest wait for the client to acknowledge a response's last byte.
const ACK_WAIT_LIMIT: Duration = Duration::from_secs(10);
/// Longest wait for the client's FIN after the edge closed its side.
const LINGER_LIMIT: Duration = Duration::from_secs(5);

/// What every request of one TCP connection shares.
struct Conn {
    shared: Arc<Shared>,
    id: u64,
    peer: SocketAddr,
    protocol: Protocol,
    /// A duplicate of the connection's socket, to read `TCP_INFO` while hyper owns the stream.
    socket: Arc<socket2::Socket>,
    /// The initial window the kernel's TCP WISE program drew for it, if any.
    iw: Option<IwChoice>,
}

pub(crate) async fn accept_loop(shared: Arc<Shared>, listener: tokio::net::TcpListener, cancel: CancellationToken) {
    let graceful = GracefulShutdown::new();
    loop {
        let (stream, peer) = tokio::select! {
            _ = cancel.cancelled() => break,
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "TCP accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        let watcher = graceful.watcher();
        let shared2 = shared.clone();
        shared
            .tracker
            .spawn(async move { connection(shared2, stream, peer, watcher).await });
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await.is_err() {
        tracing::warn!("TCP connections still open after {SHUTDOWN_GRACE:?}");
    }
}

fn error_record(shared: &Shared, id: u64, peer: SocketAddr, error: &str) -> EdgeRecord {
    shared
        .metrics
        .handshake_failures_tcp
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    EdgeRecord {
        side: Side::Edge,
        schema: SCHEMA_VERSION,
        time_unix_ms: unix_ms_now(),
        conn_id: id,
        client_addr: peer.to_string(),
        protocol: None,
        method: String::new(),
        path: String::new(),
        status: None,
        bytes: 0,
        server_time_ms: None,
        server_time_source: None,
        transport: None,
        error: Some(error.to_string()),
        iw: None,
    }
}

async fn connection(
    shared: Arc<Shared>,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    watcher: hyper_util::server::graceful::Watcher,
) {
    let id = shared.conn_id();
    let sref = socket2::SockRef::from(&stream);
    let accepted = AcceptedConnection::new(id, peer, Transport::Tcp, unix_ms_now());
    if let Some(cc) = shared.gears.tcp(&accepted) {
        if let Err(e) = cc.apply(&sref) {
            tracing::warn!(cc = %cc, error = %e, "cannot set TCP congestion control; keeping the system default");
        }
    }
    let iw = shared
        .tcp_iw
        .as_ref()
        .and_then(|k| k.tcp_draw(&sref, accepted.cluster.hour));
    let _ = stream.set_nodelay(true);
    let socket = match sref.try_clone() {
        Ok(s) => Arc::new(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot duplicate socket");
            return;
        }
    };
    let _live = shared.live.register(
        id,
        peer,
        Transport::Tcp,
        crate::live::CcControl::Tcp(gearbox_cc::TcpCcHandle::from_socket(socket.clone())),
    );
    let handshake = Duration::from_millis(shared.config.handshake_timeout_ms);
    let tls = match tokio::time::timeout(handshake, shared.tls_tcp.accept(stream)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            shared
                .telemetry
                .write(&error_record(&shared, id, peer, "tls_handshake"));
            return;
        }
        Err(_) => {
            shared
                .telemetry
                .write(&error_record(&shared, id, peer, "tls_handshake_timeout"));
            return;
        }
    };
    let protocol = match tls.get_ref().1.alpn_protocol() {
        Some(b"h2") => Protocol::H2,
        _ => Protocol::H1,
    };
    let _open = shared.metrics.connection(protocol);
    let conn_socket = socket.clone();
    let conn = Arc::new(Conn {
        shared: shared.clone(),
        id,
        peer,
        protocol,
        socket,
        iw,
    });
    let svc = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let conn = conn.clone();
        async move { Ok::<_, std::convert::Infallible>(request(conn, req).await) }
    });
    let io = TokioIo::new(tls);
    let result = match protocol {
        Protocol::H2 => {
            let mut b = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
            b.timer(TokioTimer::new())
                .initial_stream_window_size(4 << 20)
                .initial_connection_window_size(16 << 20)
                .max_frame_size(64 << 10)
                .max_send_buf_size(1 << 20)
                .max_concurrent_streams(1024);
            watcher.watch(b.serve_connection(io, svc)).await
        }
        _ => {
            let mut b = hyper::server::conn::http1::Builder::new();
            b.timer(TokioTimer::new()).keep_alive(true);
            watcher.watch(b.serve_connection(io, svc)).await
        }
    };
    if let Err(e) = result {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
    linger(&conn_socket).await;
}

/// Closes the connection without losing data still on its way to the client.
///
/// hyper drops the stream once HTTP is done; closing a socket that still holds unread
/// bytes from the peer (e.g. HTTP/2 WINDOW_UPDATEs) makes the kernel send RST and
/// discard the unsent response tail. Our duplicate fd keeps the socket open: send FIN,
/// then read until the client's FIN (bounded), so the close is orderly.
async fn linger(socket: &socket2::Socket) {
    let _ = socket.shutdown(std::net::Shutdown::Write);
    let deadline = Instant::now() + LINGER_LIMIT;
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
    while Instant::now() < deadline {
        match socket.recv(&mut buf) {
            Ok(0) => return,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => tokio::time::sleep(Duration::from_millis(5)).await,
            Err(_) => return,
        }
    }
}

async fn request(conn: Arc<Conn>, req: http::Request<hyper::body::Incoming>) -> http::Response<EdgeBody> {
    let time_unix_ms = unix_ms_now();
    let (parts, body) = req.into_parts();
    let method = parts.method.to_string();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    crate::service::added_processing(conn.shared.config.tcp_processing_ms).await;
    let mut resp = respond(&conn.shared, parts, RequestBody::Hyper(body)).await;
    if let Some(v) = &conn.shared.alt_svc {
        resp.headers_mut().insert(http::header::ALT_SVC, v.clone());
    }
    let status = resp.status().as_u16();
    // The headers are the first response bytes: they are written once we return.
    let first_byte = Instant::now();
    let c = conn.clone();
    resp.body_mut().on_end(Box::new(move |complete, bytes| {
        let tracker = c.shared.tracker.clone();
        tracker.spawn(async move {
            let mut rec = EdgeRecord {
                side: Side::Edge,
                schema: SCHEMA_VERSION,
                time_unix_ms,
                conn_id: c.id,
                client_addr: c.peer.to_string(),
                protocol: Some(c.protocol),
                method,
                path,
                status: Some(status),
                bytes,
                server_time_ms: None,
                server_time_source: None,
                transport: None,
                error: (!complete).then(|| "reset".to_string()),
                iw: c.iw.clone(),
            };
            if complete {
                let (at, source) = match wait_acked(&c.socket).await {
                    Some(at) => (at, "tcp_unacked_zero"),
                    None => (Instant::now(), "written"),
                };
                rec.server_time_ms = Some(at.saturating_duration_since(first_byte).as_secs_f64() * 1e3);
                rec.server_time_source = Some(source.into());
            }
            rec.transport = transport::tcp_snapshot(&*c.socket).ok();
            c.shared.telemetry.write(&rec);
            c.shared.metrics.request(c.protocol, bytes);
        });
    }));
    resp
}

/// Waits until the peer has acknowledged every byte written to the socket so far.
///
/// The target is what the application had handed to the kernel when we first look
/// (`bytes_sent - bytes_retrans + notsent_bytes`), so responses written later on the
/// same connection (HTTP/2 multiplexing, HTTP/1.1 keep-alive) do not delay this one.
/// Polled with a period of a quarter of the smoothed RTT (0.2 to 5 ms): the kernel
/// offers no ack notification to user space.
async fn wait_acked(socket: &socket2::Socket) -> Option<Instant> {
    let deadline = Instant::now() + ACK_WAIT_LIMIT;
    tokio::task::yield_now().await;
    let first = transport::tcp_info(socket).ok()?;
    let target = first
        .tcpi_bytes_sent
        .saturating_sub(first.tcpi_bytes_retrans)
        .saturating_add(u64::from(first.tcpi_notsent_bytes));
    let period = Duration::from_micros(u64::from(first.tcpi_rtt / 4).clamp(200, 5_000));
    let mut info = first;
    loop {
        if info.tcpi_bytes_acked >= target {
            return Some(Instant::now());
        }
        // Linux tcp_states.h: 7 = CLOSE (reset or fully closed: nothing more will be acknowledged).
        if Instant::now() >= deadline || info.tcpi_state == 7 {
            return None;
        }
        tokio::time::sleep(period).await;
        info = transport::tcp_info(socket).ok()?;
    }
}
