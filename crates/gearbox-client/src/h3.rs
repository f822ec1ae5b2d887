//! HTTP/3: dialing QUIC, the origin's one connection per path and sending.
//!
//! HTTP/3 is pooled like HTTP/2: an origin's slot (per local path) holds one quinn
//! connection and its h3 request sender, locked while a connection is being opened.
//! A handshake that fails is remembered in the slot, so the requests that were
//! waiting for it fail with it instead of each trying one of their own. The QUIC
//! endpoints (one UDP socket per local address and family) are kept here too: every
//! QUIC connection of a path goes out of its path's socket. A connection's silence
//! watch (`crate::silence`) ends the exchanges of a connection that went silent.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use gearbox_dataplane::telemetry::Protocol;
use http::HeaderValue;

use crate::client::{lock_std, Client, ParsedUrl, Request};
use crate::conn::{lock, ms_since, ConnInfo, Dial, Key, SnapshotSource};
use crate::error::{from_quic, ClientError};
use crate::exchange::{Exchanged, Failure, Progress};
use crate::silence::{self, Fallback, SilenceWatch};

/// The h3 request sender over quinn.
pub(crate) type H3Sender = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

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

/// Every origin's HTTP/3 slot by (origin, path), and the QUIC endpoints.
#[derive(Default)]
pub(crate) struct Pool {
    slots: Mutex<HashMap<Key, Arc<H3Slot>>>,
    /// One UDP endpoint per (local address, IPv6?): QUIC connections of a path share it.
    endpoints: Mutex<HashMap<(Option<IpAddr>, bool), quinn::Endpoint>>,
}

impl Pool {
    /// The slot of `key`, made empty on first use.
    pub fn slot(&self, key: &Key) -> Arc<H3Slot> {
        lock(&self.slots).entry(key.clone()).or_default().clone()
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

    /// Closes every QUIC connection with H3_NO_ERROR (RFC 9114 §8.1) and gives the
    /// endpoints up to `bound` to send the closes. Without it a client whose runtime
    /// stops right after its last response leaves the server's side open until its idle
    /// timeout, waiting for acknowledgements that never come.
    pub async fn close(&self, bound: Duration) {
        let eps: Vec<quinn::Endpoint> = lock(&self.endpoints).values().cloned().collect();
        for ep in &eps {
            ep.close(quinn::VarInt::from_u32(0x100), b"client closing");
        }
        let _ = tokio::time::timeout(bound, futures::future::join_all(eps.iter().map(|e| e.wait_idle()))).await;
    }
}

/// A QUIC connection and HTTP/3 on it, bounded by the connect timeout; `idle`: the
/// pool's idle timeout, after which the silence watch closes the connection unused;
/// `floor`: the shortest silence the watch acts on (`quic_silence_floor`).
pub(crate) async fn open_h3(
    dial: &Dial<'_>,
    endpoint: &quinn::Endpoint,
    config: quinn::ClientConfig,
    cc: &'static str,
    id: u64,
    idle: Duration,
    floor: Duration,
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
        watch: SilenceWatch::spawn(quic.clone(), idle, floor),
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

impl Client {
    /// HTTP/3 on the origin's one QUIC connection. A new connection's handshake is
    /// bounded by `crate::silence::handshake_bound` for the request's `fallback` (or the
    /// connect timeout, if shorter); an exchange on a connection its silence watch
    /// declares silent ends at once with [`ClientError::QuicSilent`]. Every failure here
    /// is marked `quic` (the client's fallback rules may retry it over TCP), and `sent`
    /// once the request was handed to the connection.
    pub(crate) async fn send_h3(
        &self,
        key: &Key,
        dial: &Dial<'_>,
        url: &ParsedUrl,
        req: &Request,
        fallback: Fallback,
        p: &mut Progress,
    ) -> Result<Exchanged, Failure> {
        let addr = dial.target.addr.to_string();
        let quic_failure = |error: ClientError| Failure {
            error,
            retry: false,
            quic: true,
            sent: false,
        };
        let request = h3_request(url, req)?;
        let (conn, new) = self
            .h3_connection(key, dial, req.force_new_connection, fallback)
            .await
            .map_err(quic_failure)?;
        p.attach(
            &conn.info,
            new,
            SnapshotSource::Quic(conn.quic.clone(), conn.cc),
            Protocol::H3,
        );
        conn.touch();
        let _outstanding = conn.watch.begin();
        let silent = |ms: u64| ClientError::QuicSilent {
            addr: addr.clone(),
            silent_ms: ms,
        };
        let outcome = tokio::select! {
            r = self.h3_exchange(&conn, &addr, request, req, p) => r,
            ms = conn.watch.silenced() => Err((silent(ms), true)),
        };
        match outcome {
            Ok(out) => {
                conn.touch();
                Ok(out)
            }
            Err((error, before_response)) => {
                // The watch may have closed the connection a moment before the
                // exchange saw it: then the silence is the reason.
                let error = conn.watch.silent_ms().map_or(error, silent);
                let silent = matches!(error, ClientError::QuicSilent { .. });
                if before_response && !new {
                    conn.closed.store(true, std::sync::atomic::Ordering::Release);
                }
                Err(Failure {
                    error,
                    // A pooled connection that turned out dead is retried on a new one,
                    // unless it went silent: the path, not the connection, is the
                    // problem, and a new handshake would wait on it too.
                    retry: before_response && !new && !silent,
                    quic: true,
                    sent: true,
                })
            }
        }
    }

    /// The origin's HTTP/3 connection on the path of `key` (and whether it is new):
    /// the pooled one while it is reusable and `force_new` is not set, else a new one,
    /// its handshake bounded by `crate::silence::handshake_bound` for `fallback` (or the
    /// connect timeout, if shorter). Requests that waited for a handshake that failed
    /// fail with it (whichever request's bound it had).
    pub(crate) async fn h3_connection(
        &self,
        key: &Key,
        dial: &Dial<'_>,
        force_new: bool,
        fallback: Fallback,
    ) -> Result<(Arc<H3Conn>, bool), ClientError> {
        let cfg = &self.inner.cfg;
        let slot = self.inner.pools.h3.slot(key);
        if force_new {
            // A connection of its own: dialed without the origin's slot, so requests that
            // each want one open theirs side by side, not one handshake after another.
            let c = Arc::new(self.dial_h3(key, dial, fallback).await?);
            slot.lock().await.conn = Some(c.clone());
            return Ok((c, true));
        }
        let waiting_since = Instant::now();
        let mut guard = slot.lock().await;
        let (conn, new) = match &guard.conn {
            Some(c) if c.reusable(cfg.idle_timeout, Instant::now()) => (c.clone(), false),
            _ => {
                if let Some((_, why)) = guard.failed.as_ref().filter(|(at, _)| *at >= waiting_since) {
                    return Err(why.same_again());
                }
                let c = match self.dial_h3(key, dial, fallback).await {
                    Ok(c) => Arc::new(c),
                    Err(e) => {
                        guard.failed = Some((Instant::now(), e.same_again()));
                        return Err(e);
                    }
                };
                guard.conn = Some(c.clone());
                guard.failed = None;
                (c, true)
            }
        };
        drop(guard);
        Ok((conn, new))
    }

    /// Opens an HTTP/3 connection to `key`'s origin from `dial.local`, its handshake
    /// bounded by what the client knows of the path's RTT and whether the request has a
    /// fallback (`crate::silence::handshake_bound`).
    async fn dial_h3(&self, key: &Key, dial: &Dial<'_>, fallback: Fallback) -> Result<H3Conn, ClientError> {
        let cfg = &self.inner.cfg;
        let known_rtt = lock_std(&self.inner.race).quic_rtt(&key.0);
        let bounded = Dial {
            target: dial.target,
            local: dial.local,
            tcp_cc: dial.tcp_cc,
            mptcp: dial.mptcp,
            connect_timeout: dial.connect_timeout.min(silence::handshake_bound(
                known_rtt,
                fallback,
                cfg.quic_silence_floor,
            )),
        };
        self.open_quic(&bounded).await
    }

    /// Opens an HTTP/3 connection as `dial` says, on the pool's UDP endpoint for its
    /// local address, with the client's controller, idle timeout and silence floor.
    pub(crate) async fn open_quic(&self, dial: &Dial<'_>) -> Result<H3Conn, ClientError> {
        let cfg = &self.inner.cfg;
        let endpoint = self
            .inner
            .pools
            .h3
            .endpoint(dial.local, dial.target.addr.is_ipv6())
            .map_err(|e| ClientError::Quic {
                addr: dial.target.addr.to_string(),
                reason: format!("cannot open a UDP socket: {e}"),
            })?;
        open_h3(
            dial,
            &endpoint,
            self.inner.quic.clone(),
            cfg.quic_cc.name(),
            self.next_id(),
            cfg.idle_timeout,
            cfg.quic_silence_floor,
        )
        .await
    }

    /// One request and its response on an HTTP/3 connection; on failure, the error and
    /// whether no response header had arrived.
    async fn h3_exchange(
        &self,
        conn: &H3Conn,
        addr: &str,
        request: http::Request<()>,
        req: &Request,
        p: &mut Progress,
    ) -> Result<Exchanged, (ClientError, bool)> {
        let cfg = &self.inner.cfg;
        // Errors of a stream on a connection that has since closed are the connection's.
        let fail = |reason: String| match conn.quic.close_reason() {
            Some(e) => from_quic(addr, &e, cfg.connect_timeout),
            None => ClientError::Http {
                protocol: "h3",
                url: req.url.clone(),
                reason,
            },
        };
        let mut sender = conn.sender.clone();
        let before_response = async {
            let mut stream = sender.send_request(request).await?;
            // A server may answer before it has read the whole request and then stop our
            // sending side with H3_NO_ERROR (RFC 9114 §4.1; quic-go does this). That ends
            // the upload, not the exchange: the response still decides.
            let sent = match req.body.is_empty() {
                true => Ok(()),
                false => stream.send_data(req.body.clone()).await,
            };
            let finished = match sent {
                Ok(()) => stream.finish().await,
                Err(e) => Err(e),
            };
            match stream.recv_response().await {
                Ok(response) => Ok::<_, h3::error::StreamError>((stream, response)),
                Err(e) => Err(finished.err().unwrap_or(e)),
            }
        };
        let (mut stream, response) = before_response.await.map_err(|e| (fail(e.to_string()), true))?;
        p.headers(response.status().as_u16());
        let mut body = BytesMut::new();
        loop {
            match stream.recv_data().await {
                Ok(Some(mut chunk)) => {
                    use bytes::Buf;
                    let n = chunk.remaining();
                    p.data(n);
                    if req.discard_body {
                        chunk.advance(n);
                    } else {
                        body.extend_from_slice(&chunk.copy_to_bytes(n));
                    }
                }
                Ok(None) => break,
                Err(e) => return Err((fail(e.to_string()), false)),
            }
        }
        let (parts, ()) = response.into_parts();
        Ok((parts.status.as_u16(), parts.headers, body.freeze()))
    }
}

fn h3_request(url: &ParsedUrl, req: &Request) -> Result<http::Request<()>, ClientError> {
    let mut request = http::Request::builder()
        .method(req.method.clone())
        .uri(url.uri.clone())
        .body(())
        .map_err(|e| ClientError::BadUrl {
            url: req.url.clone(),
            reason: e.to_string(),
        })?;
    for (name, value) in &req.headers {
        if name != http::header::HOST {
            request.headers_mut().append(name.clone(), value.clone());
        }
    }
    if !req.body.is_empty() {
        request
            .headers_mut()
            .insert(http::header::CONTENT_LENGTH, HeaderValue::from(req.body.len()));
    }
    Ok(request)
}
