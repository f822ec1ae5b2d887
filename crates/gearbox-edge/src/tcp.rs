//! The TCP side: TLS 1.3 accept, ALPN to HTTP/2 or HTTP/1.1 (hyper), per-socket
//! congestion control, and "last byte acknowledged" from `TCP_INFO`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gearbox_dataplane::telemetry::{unix_ms_now, EdgeRecord, Protocol};
use gearbox_dataplane::transport;
use gearbox_gear_api::{AcceptedConnection, IwChoice, Transport};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulConnection;
use tokio_util::sync::CancellationToken;

use crate::limits::{Activity, Hit};
use crate::service::{respond, EdgeBody, RequestBody};
use crate::{bounded_handshake, Handshake, Shared, GOAWAY_LINGER};

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
    /// The connection's socket, to read `TCP_INFO` while hyper drives the stream.
    socket: Arc<socket2::Socket>,
    /// The initial window the kernel's TCP WISE program drew for it, if any.
    iw: Option<IwChoice>,
    /// Its requests in progress, for the idle timeout.
    activity: Arc<Activity>,
}

pub(crate) async fn accept_loop(shared: Arc<Shared>, listener: tokio::net::TcpListener, cancel: CancellationToken) {
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
        let admission = match shared.connections.admit(peer.ip()) {
            Ok(a) => a,
            Err(hit) => {
                // Closed before TLS: a refused client costs no handshake.
                shared.metrics.limit_hits.count(hit);
                let id = shared.conn_id();
                shared.telemetry.write(&refusal_record(id, peer, hit));
                drop(stream);
                continue;
            }
        };
        let shared2 = shared.clone();
        let cancel2 = cancel.clone();
        shared.tracker.spawn(async move {
            connection(shared2, stream, peer, cancel2).await;
            drop(admission);
        });
    }
}

/// Sets `TCP_NOTSENT_LOWAT` (tcp(7)): the socket reports writable only while less than `bytes`
/// of its data is not yet sent, so the HTTP/2 layer, not the kernel's FIFO, holds the queue.
fn set_notsent_lowat(stream: &impl std::os::fd::AsRawFd, bytes: u32) -> std::io::Result<()> {
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: setsockopt(2) on a socket we own, with a pointer to a c_int and its size.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            std::ptr::from_ref(&value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn refusal_record(id: u64, peer: SocketAddr, hit: Hit) -> EdgeRecord {
    EdgeRecord {
        error: Some(hit.name().to_string()),
        ..EdgeRecord::for_connection(id, peer, None, unix_ms_now())
    }
}

fn error_record(shared: &Shared, id: u64, peer: SocketAddr, error: &str) -> EdgeRecord {
    shared
        .metrics
        .handshake_failures_tcp
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    EdgeRecord {
        error: Some(error.to_string()),
        ..EdgeRecord::for_connection(id, peer, None, unix_ms_now())
    }
}

async fn connection(shared: Arc<Shared>, stream: tokio::net::TcpStream, peer: SocketAddr, cancel: CancellationToken) {
    let id = shared.conn_id();
    // One descriptor per connection, shared by hyper's I/O and the edge's own readers of
    // TCP_INFO and its orderly close ([`SharedSocket`]).
    let socket = match stream.into_std() {
        Ok(s) => Arc::new(socket2::Socket::from(s)),
        Err(e) => {
            tracing::warn!(error = %e, "cannot take over the accepted socket");
            return;
        }
    };
    let sref = socket2::SockRef::from(&*socket);
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
    let _ = socket.set_tcp_nodelay(true);
    if let Some(lowat) = shared.config.tcp_notsent_lowat_bytes.filter(|&b| b > 0) {
        if let Err(e) = set_notsent_lowat(&*socket, lowat) {
            tracing::warn!(lowat, error = %e, "cannot set TCP_NOTSENT_LOWAT; keeping the system's");
        }
    }
    let stream = match SharedSocket::new(socket.clone()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot register the socket with the runtime");
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
    let tls = match bounded_handshake(shared.tls_tcp.accept(stream), handshake, &cancel).await {
        Handshake::Done(Ok(tls)) => tls,
        Handshake::Done(Err(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            shared
                .telemetry
                .write(&error_record(&shared, id, peer, "tls_handshake"));
            return;
        }
        Handshake::TimedOut => {
            shared
                .telemetry
                .write(&error_record(&shared, id, peer, "tls_handshake_timeout"));
            return;
        }
        Handshake::ShutDown => {
            shared
                .telemetry
                .write(&error_record(&shared, id, peer, "shutdown_in_handshake"));
            return;
        }
    };
    let protocol = match tls.get_ref().1.alpn_protocol() {
        Some(b"h2") => Protocol::H2,
        _ => Protocol::H1,
    };
    let _open = shared.metrics.connection(protocol);
    let conn_socket = socket.clone();
    let activity = Activity::new();
    let conn = Arc::new(Conn {
        shared: shared.clone(),
        id,
        peer,
        protocol,
        socket,
        iw,
        activity: activity.clone(),
    });
    let svc = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let conn = conn.clone();
        async move { Ok::<_, std::convert::Infallible>(request(conn, req).await) }
    });
    let io = TokioIo::new(tls);
    let limits = &shared.config.limits;
    let idle = Duration::from_millis(limits.connection_idle_timeout_ms);
    let grace = Duration::from_millis(limits.keep_alive_timeout_ms);
    let send = Duration::from_millis(limits.send_timeout_ms);
    let (result, idle_closed) = match protocol {
        Protocol::H2 => {
            let mut b = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
            b.timer(TokioTimer::new())
                .initial_stream_window_size(limits.h2_stream_window_bytes)
                .initial_connection_window_size(limits.h2_connection_window_bytes)
                .max_frame_size(64 << 10)
                // Validated at start to fit a u32.
                .max_send_buf_size(usize::try_from(limits.h2_send_buffer_bytes).unwrap_or(usize::MAX))
                .max_concurrent_streams(limits.max_streams_per_connection)
                .max_header_list_size(limits.max_header_bytes)
                .keep_alive_interval(Duration::from_millis(limits.keep_alive_interval_ms))
                .keep_alive_timeout(Duration::from_millis(limits.keep_alive_timeout_ms));
            drive(b.serve_connection(io, svc), &cancel, &activity, [idle, grace, send]).await
        }
        _ => {
            let mut b = hyper::server::conn::http1::Builder::new();
            b.timer(TokioTimer::new())
                .keep_alive(true)
                // Validated at start: 8,192 to 2^32 - 1.
                .max_buf_size(usize::try_from(limits.h1_buffer_bytes).unwrap_or(usize::MAX))
                .max_headers(limits.max_headers as usize)
                .max_header_size(limits.max_header_bytes as usize)
                .header_read_timeout(Duration::from_millis(limits.header_read_timeout_ms));
            drive(b.serve_connection(io, svc), &cancel, &activity, [idle, grace, send]).await
        }
    };
    // A connection that served requests and then went quiet is closed as a matter of
    // course (counted only); one that never completed a request leaves a record.
    let served = activity.requests() > 0;
    match idle_closed {
        // The request's own record names it.
        Some(Hit::SendTimeout) => shared.metrics.limit_hits.count(Hit::SendTimeout),
        Some(hit) => closed_by(&shared, id, peer, protocol, hit, None, !served),
        None => {}
    }
    match result {
        Ok(()) => {}
        Err(e) => {
            tracing::debug!(%peer, error = %e, "connection ended with an error");
            // hyper answers 431 to an oversize HTTP/1.1 head and closes at the header
            // timeout without calling us: the connection's record says so.
            if e.is_parse_too_large() {
                closed_by(&shared, id, peer, protocol, Hit::Headers, Some(431), true);
            } else if e.is_timeout() && idle_closed.is_none() {
                let hit = if served { Hit::Idle } else { Hit::HeaderTimeout };
                closed_by(&shared, id, peer, protocol, hit, None, !served);
            }
        }
    }
    linger(&conn_socket).await;
    tracing::debug!(%peer, "TCP connection closed");
}

/// Counts and records a connection that a limit ended without a request record.
fn closed_by(
    shared: &Shared,
    id: u64,
    peer: SocketAddr,
    protocol: Protocol,
    hit: Hit,
    status: Option<u16>,
    write: bool,
) {
    shared.metrics.limit_hits.count(hit);
    if !write {
        return;
    }
    let mut rec = refusal_record(id, peer, hit);
    rec.protocol = Some(protocol);
    rec.status = status;
    shared.telemetry.write(&rec);
}

/// Runs a hyper connection until it ends, closing it gracefully (HTTP/2 GOAWAY, or
/// HTTP/1.1 close after the request in progress) on shutdown or once it has had no
/// request in progress for `idle`. A connection told to close that still has nothing
/// in progress `grace` later ([`GOAWAY_LINGER`] at shutdown) is dropped: a peer that
/// never answers the GOAWAY's PING, or never sent its preface, cannot hold it open. A connection whose responses have
/// all waited `send` for the client to take their next piece is dropped at once (the
/// client stopped reading; nothing graceful can reach it). Says which limit, if any,
/// closed it.
async fn drive<C>(
    conn: C,
    cancel: &CancellationToken,
    activity: &Activity,
    [idle, grace, send]: [Duration; 3],
) -> (Result<(), C::Error>, Option<Hit>)
where
    C: GracefulConnection,
{
    let mut conn = std::pin::pin!(conn);
    let mut closed_by = None;
    let mut closing = None;
    // After GOAWAY at the idle timeout the client gets `grace` to end the connection
    // itself; at shutdown only requests already on their way are waited for.
    let mut linger = grace;
    loop {
        tokio::select! {
            r = conn.as_mut() => return (r, closed_by),
            _ = cancel.cancelled(), if closing.is_none() => {
                closing = Some(tokio::time::Instant::now());
                linger = GOAWAY_LINGER;
                conn.as_mut().graceful_shutdown();
            }
            _ = activity.idle_for(idle), if closing.is_none() => {
                closing = Some(tokio::time::Instant::now());
                closed_by = Some(Hit::Idle);
                conn.as_mut().graceful_shutdown();
            }
            _ = activity.quiet_after(closing.unwrap_or_else(tokio::time::Instant::now), linger), if closing.is_some() => {
                return (Ok(()), closed_by);
            }
            _ = activity.send_stalled(send) => {
                activity.mark_send_timeout();
                return (Ok(()), Some(Hit::SendTimeout));
            }
        }
    }
}

/// Closes the connection without losing data still on its way to the client.
///
/// hyper drops the stream once HTTP is done; closing a socket that still holds unread
/// bytes from the peer (e.g. HTTP/2 WINDOW_UPDATEs) makes the kernel send RST and
/// discard the unsent response tail. The edge's share of the socket keeps it open: send
/// FIN, then read until the client's FIN (bounded), so the close is orderly.
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
    let active = conn.activity.start();
    let (parts, body) = req.into_parts();
    let method = parts.method.to_string();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    crate::service::added_processing(conn.shared.config.tcp_processing_ms).await;
    let mut resp = respond(&conn.shared, parts, RequestBody::Hyper(body)).await;
    if let Some(v) = &conn.shared.alt_svc {
        resp.headers_mut().insert(http::header::ALT_SVC, v.clone());
    }
    resp.body_mut().keep(active);
    resp.body_mut().watch_send(conn.activity.clone());
    let status = resp.status().as_u16();
    let hit = crate::service::hit_of(&resp);
    // The headers are the first response bytes: they are written once we return.
    let first_byte = Instant::now();
    let c = conn.clone();
    resp.body_mut().on_end(Box::new(move |complete, bytes| {
        let tracker = c.shared.tracker.clone();
        tracker.spawn(async move {
            let mut rec = EdgeRecord {
                method,
                path,
                status: Some(status),
                bytes,
                error: hit.map(|h| h.name().to_string()).or_else(|| {
                    (!complete).then(|| {
                        let cut = if c.activity.send_timed_out() {
                            Hit::SendTimeout.name()
                        } else {
                            "reset"
                        };
                        cut.to_string()
                    })
                }),
                iw: c.iw.clone(),
                ..EdgeRecord::for_connection(c.id, c.peer, Some(c.protocol), time_unix_ms)
            };
            if complete {
                let written = Instant::now();
                let (at, source) = match wait_acked(&c.socket).await {
                    Some(at) => (at, "tcp_unacked_zero"),
                    None => (written, "written"),
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

/// The connection's one socket as hyper and rustls see it. The descriptor is shared (an
/// `Arc`) with the edge's readers of `TCP_INFO`, the live connection's congestion
/// control handle and the orderly close after hyper is done, so it stays open until all
/// are done with it. The rejected alternative, a `dup` of tokio's `TcpStream`, cost a
/// second descriptor per connection: 20,000 for the 10,000 connections of
/// `limits.max_connections`, which is the whole `RLIMIT_NOFILE` of many hosts.
struct SharedSocket(tokio::io::unix::AsyncFd<Arc<socket2::Socket>>);

impl SharedSocket {
    /// Registers `socket` (non-blocking) with the runtime.
    fn new(socket: Arc<socket2::Socket>) -> std::io::Result<Self> {
        socket.set_nonblocking(true)?;
        // SAFETY: the AsyncFd owns one of the `Arc`s of the socket, so its descriptor
        // stays open, and names the same socket, for as long as the AsyncFd lives.
        let fd = unsafe { tokio::io::unix::AsyncFd::register(socket) }.map_err(std::io::Error::from)?;
        Ok(SharedSocket(fd))
    }
}

impl tokio::io::AsyncRead for SharedSocket {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        loop {
            let mut guard = std::task::ready!(self.0.poll_read_ready(cx))?;
            // SAFETY: recv writes only initialised bytes to the front of the unfilled part
            // and says how many; exactly those are marked initialised and filled.
            let unfilled = unsafe { buf.unfilled_mut() };
            match guard.try_io(|s| s.get_ref().recv(unfilled)) {
                Ok(Ok(n)) => {
                    unsafe { buf.assume_init(n) };
                    buf.advance(n);
                    return std::task::Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return std::task::Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl tokio::io::AsyncWrite for SharedSocket {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        loop {
            let mut guard = std::task::ready!(self.0.poll_write_ready(cx))?;
            // MSG_NOSIGNAL: a peer gone is EPIPE, never SIGPIPE, whatever the host program does.
            match guard.try_io(|s| s.get_ref().send_with_flags(buf, libc::MSG_NOSIGNAL)) {
                Ok(r) => return std::task::Poll::Ready(r),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        loop {
            let mut guard = std::task::ready!(self.0.poll_write_ready(cx))?;
            match guard.try_io(|s| s.get_ref().send_vectored_with_flags(bufs, libc::MSG_NOSIGNAL)) {
                Ok(r) => return std::task::Poll::Ready(r),
                Err(_would_block) => continue,
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(self.0.get_ref().shutdown(std::net::Shutdown::Write))
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd as _;

    use super::set_notsent_lowat;

    fn notsent_lowat(stream: &tokio::net::TcpStream) -> libc::c_int {
        let mut value: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt(2) into a c_int we own, with its size.
        let rc = unsafe {
            libc::getsockopt(
                stream.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_NOTSENT_LOWAT,
                std::ptr::from_mut(&mut value).cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0, "getsockopt: {}", std::io::Error::last_os_error());
        value
    }

    #[tokio::test]
    async fn an_accepted_connection_gets_the_configured_unsent_limit() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        set_notsent_lowat(&accepted, 16 * 1024).unwrap();
        assert_eq!(notsent_lowat(&accepted), 16 * 1024);
        set_notsent_lowat(&accepted, u32::MAX).unwrap();
        assert_eq!(notsent_lowat(&accepted), libc::c_int::MAX);
    }
}
