//! Opening connections and the pools that keep them.
//!
//! Pools are keyed by (origin, local path) and kept per protocol, because the three
//! protocols share connections differently:
//! - HTTP/2 multiplexes every request on one connection, so its slot holds one
//!   connection. The slot is an async mutex held while a connection is being opened, so
//!   requests that start together wait for that one handshake instead of each opening
//!   their own (what browsers do, and what a page load on one connection needs).
//! - HTTP/1.1 carries one request at a time, so its slot is a list of idle keep-alive
//!   connections plus a semaphore that caps how many are open at once.
//! - HTTP/3 is like HTTP/2: one quinn connection and its h3 request sender.
//!
//! A connection is not reused when it is closed (peer close, GOAWAY, QUIC idle timeout)
//! or has been idle longer than the configured idle timeout; the request then opens a
//! new one. Rejected alternative: hyper-util's legacy pooled client, which hides the
//! socket (no `TCP_INFO`, no per-connection timing) and has no HTTP/3.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use gearbox_dataplane::telemetry::TransportSnapshot;
use gearbox_dataplane::transport::{quic_snapshot, tcp_snapshot};
use http_body_util::Full;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::client::TlsStream;

use crate::error::{from_quic, ClientError};
use crate::silence::SilenceWatch;

/// Request body type on hyper connections.
pub(crate) type HyperBody = Full<Bytes>;
/// The h3 request sender over quinn.
pub(crate) type H3Sender = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

/// Where a request goes: the URL's origin, resolved.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// Name checked against the server's certificate.
    pub server_name: ServerName<'static>,
    /// The same, as text (quinn takes a string).
    pub server_name_text: String,
    /// Resolved server address.
    pub addr: SocketAddr,
}

/// What every pooled connection knows about itself, for the records of its requests.
#[derive(Debug, Clone)]
pub(crate) struct ConnInfo {
    /// Client-local connection id.
    pub id: u64,
    /// Server address.
    pub server_addr: SocketAddr,
    /// Local socket address (which path).
    pub local_addr: String,
    /// Time the connection took to open (TCP connect + TLS, or QUIC handshake), ms.
    pub handshake_ms: f64,
}

/// How to read a connection's transport state after hyper or h3 owns it.
#[derive(Clone)]
pub(crate) enum SnapshotSource {
    /// A duplicate of the TCP socket's descriptor: `TCP_INFO` works on any descriptor of
    /// the socket, and the duplicate stays valid even after hyper has closed its own.
    /// (Borrowing hyper's raw descriptor number instead could read a reused number after
    /// hyper closed it.) The price: the socket is only fully closed when the pooled
    /// connection holding the duplicate is dropped, which happens when it is replaced or
    /// evicted, so at most one closed-by-peer socket per pool slot lingers.
    Tcp(Arc<OwnedFd>),
    /// The quinn connection and the name of its congestion controller.
    Quic(quinn::Connection, &'static str),
}

impl SnapshotSource {
    /// The connection's transport state now (None when the kernel refuses `TCP_INFO`).
    pub fn snapshot(&self) -> Option<TransportSnapshot> {
        match self {
            SnapshotSource::Tcp(fd) => tcp_snapshot(fd.as_ref()).ok(),
            SnapshotSource::Quic(conn, cc) => Some(quic_snapshot(conn, cc)),
        }
    }
}

/// An HTTP/2 connection: one multiplexed hyper connection.
pub(crate) struct H2Conn {
    pub info: ConnInfo,
    pub sender: http2::SendRequest<HyperBody>,
    pub fd: Arc<OwnedFd>,
    /// Set by the task driving the connection when it ends.
    pub closed: Arc<AtomicBool>,
    pub last_used: Mutex<Instant>,
}

/// An HTTP/1.1 keep-alive connection, used by one request at a time.
pub(crate) struct H1Conn {
    pub info: ConnInfo,
    pub sender: http1::SendRequest<HyperBody>,
    pub fd: Arc<OwnedFd>,
    pub last_used: Instant,
}

/// An HTTP/3 connection: a quinn connection and its h3 request sender.
pub(crate) struct H3Conn {
    pub info: ConnInfo,
    pub quic: quinn::Connection,
    pub sender: H3Sender,
    pub cc: &'static str,
    /// Set by the task driving the h3 connection when it ends.
    pub closed: Arc<AtomicBool>,
    pub last_used: Mutex<Instant>,
    /// Silent-path detection for this connection (`crate::silence`).
    pub watch: Arc<SilenceWatch>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl H2Conn {
    /// Open, not closed by the peer, and not idle for longer than `idle`.
    pub fn reusable(&self, idle: Duration, now: Instant) -> bool {
        !self.closed.load(Ordering::Acquire)
            && !self.sender.is_closed()
            && now.saturating_duration_since(*lock(&self.last_used)) < idle
    }

    pub fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }
}

impl H3Conn {
    /// Open (no close reason from quinn, h3 driver running) and not idle too long.
    pub fn reusable(&self, idle: Duration, now: Instant) -> bool {
        !self.closed.load(Ordering::Acquire)
            && self.quic.close_reason().is_none()
            && now.saturating_duration_since(*lock(&self.last_used)) < idle
    }

    pub fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }
}

/// Pool key: origin (`host:port`) and local path index.
pub(crate) type Key = (String, usize);

/// The TCP slot of an origin: its HTTP/2 connection, or the knowledge that the server
/// only speaks HTTP/1.1 (it picked `http/1.1` in ALPN), so TCP requests go to the h1 pool.
#[derive(Default)]
pub(crate) struct TcpSlot {
    pub h2: Option<Arc<H2Conn>>,
    pub h1_only: bool,
}

/// The HTTP/1.1 slot of an origin: idle connections and the cap on open ones.
///
/// The semaphore caps connections in use; the idle list is capped at the same number,
/// so requests that force new connections (a workload's `new_connection`) do not pile up
/// open sockets: the least recently used idle connection is closed instead.
pub(crate) struct H1Slot {
    pub permits: Arc<Semaphore>,
    pub idle: Mutex<Vec<H1Conn>>,
    pub max: usize,
}

impl H1Slot {
    /// Takes the most recently used idle connection that is still usable.
    pub fn take_idle(&self, idle_timeout: Duration) -> Option<H1Conn> {
        let mut idle = lock(&self.idle);
        let now = Instant::now();
        while let Some(conn) = idle.pop() {
            if !conn.sender.is_closed() && now.saturating_duration_since(conn.last_used) < idle_timeout {
                return Some(conn);
            }
        }
        None
    }

    /// Gives a connection back after its response was read to the end.
    pub fn put_back(&self, mut conn: H1Conn) {
        if !conn.sender.is_closed() {
            conn.last_used = Instant::now();
            let mut idle = lock(&self.idle);
            idle.push(conn);
            if idle.len() > self.max {
                idle.remove(0);
            }
        }
    }
}

/// The HTTP/3 slot of an origin: its one connection, locked while one is being opened.
pub(crate) type H3Slot = tokio::sync::Mutex<H3SlotState>;

/// What an HTTP/3 slot holds.
#[derive(Default)]
pub(crate) struct H3SlotState {
    /// The origin's connection.
    pub conn: Option<Arc<H3Conn>>,
    /// When the last handshake attempt failed, and why. Requests that were waiting
    /// for that attempt (they started before it failed) fail with it instead of each
    /// trying a handshake of its own one after another: on a blackholed path a burst of
    /// requests would otherwise wait one handshake grace each.
    pub failed: Option<(Instant, ClientError)>,
}

/// A leased HTTP/1.1 connection: the connection plus the permit that counts it.
pub(crate) struct H1Lease {
    pub conn: H1Conn,
    pub slot: Arc<H1Slot>,
    pub _permit: OwnedSemaphorePermit,
}

/// Every pool of a client.
#[derive(Default)]
pub(crate) struct Pools {
    pub tcp: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<TcpSlot>>>>,
    pub h1: Mutex<HashMap<Key, Arc<H1Slot>>>,
    pub h3: Mutex<HashMap<Key, Arc<H3Slot>>>,
    /// One UDP endpoint per (local address, IPv6?): QUIC connections of a path share it.
    pub endpoints: Mutex<HashMap<(Option<IpAddr>, bool), quinn::Endpoint>>,
}

impl Pools {
    pub fn tcp_slot(&self, key: &Key) -> Arc<tokio::sync::Mutex<TcpSlot>> {
        lock(&self.tcp).entry(key.clone()).or_default().clone()
    }

    pub fn h1_slot(&self, key: &Key, max: usize) -> Arc<H1Slot> {
        lock(&self.h1)
            .entry(key.clone())
            .or_insert_with(|| {
                let max = max.max(1);
                Arc::new(H1Slot {
                    permits: Arc::new(Semaphore::new(max)),
                    idle: Mutex::new(Vec::new()),
                    max,
                })
            })
            .clone()
    }

    pub fn h3_slot(&self, key: &Key) -> Arc<H3Slot> {
        lock(&self.h3).entry(key.clone()).or_default().clone()
    }

    /// The QUIC endpoint for a local address and address family, bound on first use.
    pub fn endpoint(&self, local: Option<IpAddr>, v6: bool) -> std::io::Result<quinn::Endpoint> {
        let mut eps = lock(&self.endpoints);
        if let Some(ep) = eps.get(&(local, v6)) {
            return Ok(ep.clone());
        }
        let ip = local.unwrap_or(if v6 {
            IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
        } else {
            IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
        });
        let ep = gearbox_dataplane::transport::quic_endpoint(SocketAddr::new(ip, 0), None)?;
        eps.insert((local, v6), ep.clone());
        Ok(ep)
    }
}

/// A TLS-over-TCP connection fresh from its handshake.
pub(crate) struct TcpTls {
    pub stream: TlsStream<TcpStream>,
    pub fd: Arc<OwnedFd>,
    pub local_addr: String,
    pub handshake_ms: f64,
    /// The ALPN id the server picked (None: it picked nothing).
    pub alpn: Option<Vec<u8>>,
}

impl TcpTls {
    /// Whether the server agreed to HTTP/2.
    pub fn is_h2(&self) -> bool {
        self.alpn.as_deref() == Some(b"h2".as_slice())
    }
}

/// Settings that opening a connection needs.
pub(crate) struct Dial<'a> {
    pub target: &'a Target,
    pub local: Option<IpAddr>,
    pub tcp_cc: Option<gearbox_cc::TcpCc>,
    pub connect_timeout: Duration,
}

/// TCP connect (bound to the path's local address, with the chosen kernel congestion
/// controller set before the SYN so it governs the whole connection) and TLS handshake,
/// bounded by the connect timeout.
pub(crate) async fn open_tcp_tls(dial: &Dial<'_>, tls: &tokio_rustls::TlsConnector) -> Result<TcpTls, ClientError> {
    let addr = dial.target.addr;
    let started = Instant::now();
    let connect_err = |source: std::io::Error| ClientError::Connect {
        addr: addr.to_string(),
        source,
    };
    let work = async {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        }
        .map_err(connect_err)?;
        if let Some(ip) = dial.local {
            socket.bind(SocketAddr::new(ip, 0)).map_err(|e| {
                connect_err(std::io::Error::new(
                    e.kind(),
                    format!("cannot bind local address {ip}: {e}"),
                ))
            })?;
        }
        if let Some(cc) = dial.tcp_cc {
            cc.apply(&socket2::SockRef::from(&socket))
                .map_err(|e| ClientError::Config(format!("cannot set TCP congestion control {cc}: {e}")))?;
        }
        // Requests are small writes that must not wait for Nagle's timer.
        socket.set_nodelay(true).map_err(connect_err)?;
        let stream = socket.connect(addr).await.map_err(connect_err)?;
        let fd = Arc::new(stream.as_fd().try_clone_to_owned().map_err(connect_err)?);
        let local_addr = stream.local_addr().map(|a| a.to_string()).unwrap_or_default();
        let stream = tls
            .connect(dial.target.server_name.clone(), stream)
            .await
            .map_err(|e| ClientError::Tls {
                addr: addr.to_string(),
                reason: e.to_string(),
            })?;
        let alpn = stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
        Ok(TcpTls {
            stream,
            fd,
            local_addr,
            handshake_ms: ms_since(started),
            alpn,
        })
    };
    match tokio::time::timeout(dial.connect_timeout, work).await {
        Ok(res) => res,
        Err(_) => Err(ClientError::Timeout {
            what: "TCP+TLS handshake",
            addr: addr.to_string(),
            after: dial.connect_timeout,
        }),
    }
}

/// HTTP/2 over a fresh TLS connection; the connection is driven by its own task.
pub(crate) async fn start_h2(io: TcpTls, id: u64, server_addr: SocketAddr) -> Result<H2Conn, ClientError> {
    let (sender, conn) = http2::Builder::new(TokioExecutor::new())
        .handshake::<_, HyperBody>(TokioIo::new(io.stream))
        .await
        .map_err(|e| ClientError::Http {
            protocol: "h2",
            url: server_addr.to_string(),
            reason: e.to_string(),
        })?;
    let closed = Arc::new(AtomicBool::new(false));
    let flag = closed.clone();
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(conn_id = id, error = %e, "h2 connection ended with an error");
        }
        flag.store(true, Ordering::Release);
    });
    Ok(H2Conn {
        info: ConnInfo {
            id,
            server_addr,
            local_addr: io.local_addr,
            handshake_ms: io.handshake_ms,
        },
        sender,
        fd: io.fd,
        closed,
        last_used: Mutex::new(Instant::now()),
    })
}

/// HTTP/1.1 over a fresh TLS connection; the connection is driven by its own task.
pub(crate) async fn start_h1(io: TcpTls, id: u64, server_addr: SocketAddr) -> Result<H1Conn, ClientError> {
    let (sender, conn) = http1::handshake::<_, HyperBody>(TokioIo::new(io.stream))
        .await
        .map_err(|e| ClientError::Http {
            protocol: "h1",
            url: server_addr.to_string(),
            reason: e.to_string(),
        })?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(conn_id = id, error = %e, "h1 connection ended with an error");
        }
    });
    Ok(H1Conn {
        info: ConnInfo {
            id,
            server_addr,
            local_addr: io.local_addr,
            handshake_ms: io.handshake_ms,
        },
        sender,
        fd: io.fd,
        last_used: Instant::now(),
    })
}

/// A QUIC connection and HTTP/3 on it, bounded by the connect timeout; `idle`: the
/// pool's idle timeout, after which the silence watch closes the connection unused.
pub(crate) async fn open_h3(
    dial: &Dial<'_>,
    endpoint: &quinn::Endpoint,
    config: quinn::ClientConfig,
    cc: &'static str,
    id: u64,
    idle: Duration,
) -> Result<H3Conn, ClientError> {
    let addr = dial.target.addr;
    let started = Instant::now();
    let work = async {
        let connecting = endpoint
            .connect_with(config, addr, &dial.target.server_name_text)
            .map_err(|e| ClientError::Quic {
                addr: addr.to_string(),
                reason: e.to_string(),
            })?;
        let quic = connecting
            .await
            .map_err(|e| from_quic(&addr.to_string(), &e, dial.connect_timeout))?;
        let handshake_ms = ms_since(started);
        let (driver, sender) = h3::client::new(h3_quinn::Connection::new(quic.clone()))
            .await
            .map_err(|e| ClientError::Quic {
                addr: addr.to_string(),
                reason: e.to_string(),
            })?;
        Ok((quic, sender, handshake_ms, driver))
    };
    let (quic, sender, handshake_ms, mut driver) = match tokio::time::timeout(dial.connect_timeout, work).await {
        Ok(res) => res?,
        Err(_) => {
            return Err(ClientError::Timeout {
                what: "QUIC handshake",
                addr: addr.to_string(),
                after: dial.connect_timeout,
            })
        }
    };
    let closed = Arc::new(AtomicBool::new(false));
    let flag = closed.clone();
    tokio::spawn(async move {
        let e = driver.wait_idle().await;
        if !e.is_h3_no_error() {
            tracing::debug!(conn_id = id, error = %e, "h3 connection ended with an error");
        }
        flag.store(true, Ordering::Release);
    });
    let local_port = endpoint.local_addr().map(|a| a.port()).unwrap_or(0);
    let local_ip = quic.local_ip().or(dial.local).or_else(|| route_source(addr));
    let local_addr = match local_ip {
        Some(ip) => SocketAddr::new(ip, local_port).to_string(),
        None => endpoint.local_addr().map(|a| a.to_string()).unwrap_or_default(),
    };
    Ok(H3Conn {
        info: ConnInfo {
            id,
            server_addr: addr,
            local_addr,
            handshake_ms,
        },
        watch: SilenceWatch::spawn(quic.clone(), idle),
        quic,
        sender,
        cc,
        closed,
        last_used: Mutex::new(Instant::now()),
    })
}

/// The source address the kernel routes to `server` from, for records of QUIC
/// connections on an unbound endpoint (quinn knows its local IP only when the socket
/// reports packet info). Connecting a UDP socket sends nothing.
fn route_source(server: SocketAddr) -> Option<IpAddr> {
    let any: SocketAddr = if server.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let probe = std::net::UdpSocket::bind(any).ok()?;
    probe.connect(server).ok()?;
    probe.local_addr().ok().map(|a| a.ip())
}

/// Milliseconds since `t`.
pub(crate) fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}
