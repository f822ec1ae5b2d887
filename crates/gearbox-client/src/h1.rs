//! HTTP/1.1: dialing, the keep-alive pool and sending.
//!
//! HTTP/1.1 carries one request at a time, so an origin's slot (per local path) is a
//! list of idle keep-alive connections plus a semaphore that caps how many are open at
//! once (`max_h1_connections_per_origin`, 6 as browsers). A request takes the most
//! recently used idle connection, or opens one (TCP+TLS offering only `http/1.1`), and
//! gives it back once its response was read to the end. The exchange itself is the one
//! HTTP/2 uses too (`crate::tcp::exchange`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::Version;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::client::{Client, ParsedUrl, Request};
use crate::conn::{lock, ConnInfo, Dial, Key, SnapshotSource};
use crate::error::ClientError;
use crate::exchange::{Exchanged, Failure, Progress};
use crate::tcp::{exchange, open_tcp_tls, HyperBody, TcpTls};
use gearbox_dataplane::telemetry::Protocol;

/// An HTTP/1.1 keep-alive connection, used by one request at a time.
pub(crate) struct H1Conn {
    pub info: ConnInfo,
    pub sender: http1::SendRequest<HyperBody>,
    pub fd: Arc<OwnedFd>,
    pub last_used: Instant,
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

/// A leased HTTP/1.1 connection: the connection plus the permit that counts it.
pub(crate) struct H1Lease {
    pub conn: H1Conn,
    pub slot: Arc<H1Slot>,
    pub _permit: OwnedSemaphorePermit,
}

/// Every origin's HTTP/1.1 slot, by (origin, path).
#[derive(Default)]
pub(crate) struct Pool(Mutex<HashMap<Key, Arc<H1Slot>>>);

impl Pool {
    /// The slot of `key`, made on first use with room for `max` connections.
    pub fn slot(&self, key: &Key, max: usize) -> Arc<H1Slot> {
        lock(&self.0)
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

impl Client {
    /// HTTP/1.1 from the origin's keep-alive pool (`preopened`: a connection the TCP path
    /// just opened and found to speak HTTP/1.1).
    pub(crate) async fn send_h1(
        &self,
        key: &Key,
        dial: &Dial<'_>,
        url: &ParsedUrl,
        req: &Request,
        preopened: Option<H1Conn>,
        p: &mut Progress,
    ) -> Result<Exchanged, Failure> {
        let cfg = &self.inner.cfg;
        let slot = self.inner.pools.h1.slot(key, cfg.max_h1_connections_per_origin);
        let permit = slot
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ClientError::Http {
                protocol: "h1",
                url: req.url.clone(),
                reason: "connection pool closed".into(),
            })?;
        let reused = match preopened {
            Some(_) => None,
            None if req.force_new_connection => None,
            None => slot.take_idle(cfg.idle_timeout),
        };
        let (conn, new) = match (preopened, reused) {
            (Some(c), _) => (c, true),
            (None, Some(c)) => (c, false),
            (None, None) => {
                let io = open_tcp_tls(dial, &self.inner.tls_h1).await?;
                (start_h1(io, self.next_id(), dial.target.addr).await?, true)
            }
        };
        let mut lease = H1Lease {
            conn,
            slot: slot.clone(),
            _permit: permit,
        };
        p.attach(
            &lease.conn.info,
            new,
            SnapshotSource::Tcp(lease.conn.fd.clone()),
            Protocol::H1,
        );
        let sender = &mut lease.conn.sender;
        let out = exchange("h1", Version::HTTP_11, url, req, new, p, |request| async move {
            sender.ready().await?;
            sender.send_request(request).await
        })
        .await?;
        let H1Lease { conn, slot, _permit } = lease;
        slot.put_back(conn);
        Ok(out)
    }
}
