//! HTTP/2: dialing, the origin's one multiplexed connection and sending.
//!
//! HTTP/2 multiplexes every request on one connection, so an origin's slot (per local
//! path) holds one connection. The slot is an async mutex held while a connection is
//! being opened, so requests that start together wait for that one handshake instead
//! of each opening their own (what browsers do, and what a page load on one connection
//! needs). TCP requests start here: TLS offers `h2` and `http/1.1`, and when the server
//! picks HTTP/1.1 the slot remembers it and TCP requests of the origin go to the
//! HTTP/1.1 pool (`crate::h1`) from then on. The exchange itself is the one HTTP/1.1
//! uses too (`crate::tcp::exchange`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::Version;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::client::{Client, ParsedUrl, Request};
use crate::conn::{lock, ConnInfo, Dial, Key, SnapshotSource};
use crate::error::ClientError;
use crate::exchange::{Exchanged, Failure, Progress};
use crate::h1::start_h1;
use crate::tcp::{exchange, open_tcp_tls, HyperBody, TcpTls};
use gearbox_dataplane::telemetry::Protocol;

/// An HTTP/2 connection: one multiplexed hyper connection.
pub(crate) struct H2Conn {
    pub info: ConnInfo,
    pub sender: http2::SendRequest<HyperBody>,
    pub fd: Arc<OwnedFd>,
    /// Set by the task driving the connection when it ends.
    pub closed: Arc<AtomicBool>,
    pub last_used: Mutex<Instant>,
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

/// The TCP slot of an origin: its HTTP/2 connection, or the knowledge that the server
/// only speaks HTTP/1.1 (it picked `http/1.1` in ALPN), so TCP requests go to the h1 pool.
#[derive(Default)]
pub(crate) struct H2Slot {
    pub h2: Option<Arc<H2Conn>>,
    pub h1_only: bool,
}

/// Every origin's TCP slot, by (origin, path).
#[derive(Default)]
pub(crate) struct Pool(Mutex<HashMap<Key, Arc<tokio::sync::Mutex<H2Slot>>>>);

impl Pool {
    /// The slot of `key`, made empty on first use.
    pub fn slot(&self, key: &Key) -> Arc<tokio::sync::Mutex<H2Slot>> {
        lock(&self.0).entry(key.clone()).or_default().clone()
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

impl Client {
    /// TCP: HTTP/2 on the origin's one connection, or HTTP/1.1 when the server chose it.
    pub(crate) async fn send_h2(
        &self,
        key: &Key,
        dial: &Dial<'_>,
        url: &ParsedUrl,
        req: &Request,
        p: &mut Progress,
    ) -> Result<Exchanged, Failure> {
        let cfg = &self.inner.cfg;
        let slot = self.inner.pools.h2.slot(key);
        let guard = slot.lock().await;
        if guard.h1_only {
            drop(guard);
            return self.send_h1(key, dial, url, req, None, p).await;
        }
        let pooled = match &guard.h2 {
            Some(c) if !req.force_new_connection && c.reusable(cfg.idle_timeout, Instant::now()) => Some(c.clone()),
            _ => None,
        };
        // The slot is held only to find or make the connection, never across an exchange:
        // HTTP/2's streams share the connection side by side.
        let (conn, new) = match pooled {
            Some(c) => {
                drop(guard);
                (c, false)
            }
            None => {
                // Requests that share the origin's connection dial under its slot and
                // take the one connection made; a request that asks for a connection of
                // its own (a `per_request` workload, TCP WISE's one window per connection)
                // dials without it, so such requests open theirs side by side instead of
                // one handshake after another.
                let held = if req.force_new_connection {
                    drop(guard);
                    None
                } else {
                    Some(guard)
                };
                let io = open_tcp_tls(dial, &self.inner.tls_tcp).await?;
                let id = self.next_id();
                let mut guard = match held {
                    Some(g) => g,
                    None => slot.lock().await,
                };
                if !io.is_h2() {
                    // The server picked http/1.1: remember it, and serve this request on
                    // the connection just made, which then joins the origin's h1 pool.
                    guard.h1_only = true;
                    drop(guard);
                    let conn = start_h1(io, id, dial.target.addr).await?;
                    return self.send_h1(key, dial, url, req, Some(conn), p).await;
                }
                let c = Arc::new(start_h2(io, id, dial.target.addr).await?);
                guard.h2 = Some(c.clone());
                drop(guard);
                (c, true)
            }
        };
        p.attach(&conn.info, new, SnapshotSource::Tcp(conn.fd.clone()), Protocol::H2);
        conn.touch();
        let mut sender = conn.sender.clone();
        let closed = &conn.closed;
        let out = exchange("h2", Version::HTTP_2, url, req, new, p, |request| async move {
            let sent = sender.send_request(request).await;
            if sent.is_err() && sender.is_closed() {
                closed.store(true, Ordering::Release);
            }
            sent
        })
        .await?;
        conn.touch();
        Ok(out)
    }
}
