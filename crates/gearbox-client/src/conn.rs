//! What every connection of the client shares, whatever its protocol: where it goes
//! ([`Target`]), what it knows about itself ([`ConnInfo`]), how its transport state is
//! read ([`SnapshotSource`]), what opening it needs ([`Dial`]), and the key of the
//! pools that keep it.
//!
//! Pools are keyed by (origin, local path) and kept per protocol, because the three
//! protocols share connections differently; each protocol module owns its own pool,
//! its dialing and its sending (`crate::h1`, `crate::h2`, `crate::h3`), and `crate::tcp`
//! the TCP+TLS dialing and the hyper exchange that HTTP/1.1 and HTTP/2 share. A
//! connection is not reused when it is closed (peer close, GOAWAY, QUIC idle timeout)
//! or has been idle longer than the configured idle timeout; the request then opens a
//! new one. Rejected alternative: hyper-util's legacy pooled client, which hides the
//! socket (no `TCP_INFO`, no per-connection timing) and has no HTTP/3.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gearbox_dataplane::telemetry::TransportSnapshot;
use gearbox_dataplane::transport::{quic_snapshot, tcp_snapshot};
use rustls::pki_types::ServerName;

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

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Pool key: origin (`host:port`) and local path index.
pub(crate) type Key = (String, usize);

/// Every pool of a client, one per protocol; each protocol module owns its pool's
/// shape and rules (`crate::h1`, `crate::h2`, `crate::h3`).
#[derive(Default)]
pub(crate) struct Pools {
    pub h1: crate::h1::Pool,
    pub h2: crate::h2::Pool,
    pub h3: crate::h3::Pool,
}

/// Settings that opening a connection needs.
pub(crate) struct Dial<'a> {
    pub target: &'a Target,
    pub local: Option<IpAddr>,
    pub tcp_cc: Option<gearbox_cc::TcpCc>,
    pub connect_timeout: Duration,
}

/// Milliseconds since `t`.
pub(crate) fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}
