//! The client: requests over pooled HTTP/1.1, HTTP/2 and HTTP/3 connections, each timed
//! and written to telemetry as one [`ClientRecord`].
//!
//! A request's completion time (RCT) runs from the moment [`Client::request`] is called
//! (so it includes name resolution, waiting for a pooled connection and any handshake)
//! to the last body byte. That is the quantity WiseTrans compares TCP and QUIC on
//! (WiseTrans §II-A): a new connection's handshake is part of what the transport costs.
//!
//! Retry rule: a request that fails on a *reused* connection before any response header
//! arrived (the peer closed or sent GOAWAY while the connection sat in the pool) is sent
//! once more on a new connection; every other failure is returned. The workloads' POSTs
//! are idempotent (`/bytes/{n}`), so the one retry is safe for them.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use gearbox_dataplane::telemetry::{unix_ms_now, ClientRecord, Protocol, Side, SCHEMA_VERSION};
use gearbox_dataplane::tls;
use http::{HeaderMap, HeaderValue, Method, Version};
use http_body_util::{BodyExt, Full};
use rustls::pki_types::ServerName;

use crate::config::ClientConfig;
use crate::conn::{
    open_h3, open_tcp_tls, start_h1, start_h2, ConnInfo, Dial, H1Conn, H1Lease, H3Conn, HyperBody, Key, Pools,
    SnapshotSource, Target, TcpTls,
};
use crate::error::{from_quic, ClientError};
use crate::gear::{StaticTransport, TransportPref};
use crate::race::{local_address_fingerprint, RaceState};
use crate::silence;
use gearbox_gear_api::{Decision, TransportGear};

/// One HTTP request.
#[derive(Debug, Clone)]
pub struct Request {
    /// HTTP method.
    pub method: Method,
    /// Absolute `https://` URL.
    pub url: String,
    /// Extra request headers (e.g. `priority`).
    pub headers: HeaderMap,
    /// Request body (empty: none).
    pub body: Bytes,
    /// Transport to use; `Auto` asks the client's transport gear.
    pub transport: TransportPref,
    /// Which local path (index into `ClientConfig::local_addrs`) carries it.
    pub path_index: usize,
    /// Workload click/session index, copied into the record.
    pub click: Option<u32>,
    /// Open a new connection for this request instead of reusing a pooled one; the new
    /// connection then replaces the pooled one.
    pub force_new_connection: bool,
    /// Count the response body but do not keep it (bulk transfers in load tests).
    pub discard_body: bool,
    /// Whether the request may be sent again after it may have reached the server
    /// (`None`: by its method, RFC 9110 §9.2.2: GET, HEAD, OPTIONS, TRACE, PUT, DELETE).
    /// The client's fallback rules retry only idempotent requests over TCP once their
    /// QUIC connection failed with them in flight; others fail at once.
    pub idempotent: Option<bool>,
}

impl Request {
    /// A GET of `url` over `transport`.
    pub fn get(url: impl Into<String>, transport: TransportPref) -> Self {
        Request {
            method: Method::GET,
            url: url.into(),
            headers: HeaderMap::new(),
            body: Bytes::new(),
            transport,
            path_index: 0,
            click: None,
            force_new_connection: false,
            discard_body: false,
            idempotent: None,
        }
    }

    /// Whether the request may be sent twice: `idempotent`, or else its method's
    /// nature (RFC 9110 §9.2.2).
    pub fn is_idempotent(&self) -> bool {
        self.idempotent.unwrap_or(matches!(
            self.method,
            Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
        ))
    }

    /// A POST of `body` to `url` over `transport`.
    pub fn post(url: impl Into<String>, body: Bytes, transport: TransportPref) -> Self {
        Request {
            method: Method::POST,
            body,
            ..Request::get(url, transport)
        }
    }
}

/// A complete response and the record written for it.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Response headers.
    pub headers: HeaderMap,
    /// Body (empty when the request asked to discard it; `record.bytes` still counts it).
    pub body: Bytes,
    /// The telemetry record of this request.
    pub record: ClientRecord,
}

/// What is known about a request while it runs; a timeout drops the running future,
/// and the record is then written from what got this far.
struct Progress {
    protocol: Protocol,
    server_addr: Option<SocketAddr>,
    conn: Option<ConnInfo>,
    new_connection: bool,
    snapshot: Option<SnapshotSource>,
    status: Option<u16>,
    headers_at: Option<Instant>,
    first_byte_at: Option<Instant>,
    bytes: u64,
    /// What a `Race` request did (appended to the decision as `;race=...`).
    race: Option<&'static str>,
    /// What the fallback rules did (appended to the decision as `;fallback=...`).
    fallback: Option<&'static str>,
    /// The protocol the request was first handed to, when it was retried on another.
    retried_from: Option<Protocol>,
    /// With `retried_from`: time from the request's start to the retry, ms.
    retry_lost_ms: Option<f64>,
}

impl Progress {
    fn new(protocol: Protocol) -> Self {
        Progress {
            protocol,
            server_addr: None,
            conn: None,
            new_connection: false,
            snapshot: None,
            status: None,
            headers_at: None,
            first_byte_at: None,
            bytes: 0,
            race: None,
            fallback: None,
            retried_from: None,
            retry_lost_ms: None,
        }
    }

    fn attach(&mut self, info: &ConnInfo, new: bool, snapshot: SnapshotSource, protocol: Protocol) {
        self.conn = Some(info.clone());
        self.new_connection = new;
        self.snapshot = Some(snapshot);
        self.protocol = protocol;
        self.status = None;
        self.headers_at = None;
        self.first_byte_at = None;
        self.bytes = 0;
    }

    fn data(&mut self, len: usize) {
        if len > 0 && self.first_byte_at.is_none() {
            self.first_byte_at = Some(Instant::now());
        }
        self.bytes += len as u64;
    }
}

/// A failure, and what may be done about it.
struct Failure {
    error: ClientError,
    /// It may be retried once on a fresh connection of the same protocol (a pooled
    /// connection turned out dead before any response header).
    retry: bool,
    /// It happened on QUIC (handshake, connection or HTTP/3 exchange), so a fallback
    /// mode may carry the request over TCP instead.
    quic: bool,
    /// The request had been handed to the connection (it may have reached the server).
    sent: bool,
}

impl From<ClientError> for Failure {
    fn from(error: ClientError) -> Self {
        Failure {
            error,
            retry: false,
            quic: false,
            sent: false,
        }
    }
}

/// A parsed `https://` URL.
#[derive(Debug, Clone)]
pub(crate) struct ParsedUrl {
    pub uri: http::Uri,
    /// `host:port` (IPv6 host in brackets), the pool key and the lookup string.
    pub authority: String,
    /// Host without brackets.
    pub host: String,
    pub path_and_query: String,
}

pub(crate) fn parse_url(url: &str) -> Result<ParsedUrl, ClientError> {
    let bad = |reason: &str| ClientError::BadUrl {
        url: url.to_string(),
        reason: reason.to_string(),
    };
    let uri: http::Uri = url.parse().map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
    match uri.scheme_str() {
        Some("https") => {}
        Some(other) => return Err(bad(&format!("scheme {other:?} is not supported; use https"))),
        None => return Err(bad("not an absolute URL; expected https://host[:port]/path")),
    }
    let authority = uri.authority().ok_or_else(|| bad("no host"))?;
    let host_in_url = authority.host();
    if host_in_url.is_empty() {
        return Err(bad("no host"));
    }
    let port = authority.port_u16().unwrap_or(443);
    let host = host_in_url.trim_start_matches('[').trim_end_matches(']').to_string();
    let authority = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let path_and_query = uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let path_and_query = if path_and_query.is_empty() {
        "/".to_string()
    } else {
        path_and_query
    };
    Ok(ParsedUrl {
        uri,
        authority,
        host,
        path_and_query,
    })
}

struct Inner {
    cfg: ClientConfig,
    /// ALPN h2, http/1.1.
    tls_tcp: tokio_rustls::TlsConnector,
    /// ALPN http/1.1 only.
    tls_h1: tokio_rustls::TlsConnector,
    /// ALPN h3, with the congestion controller and idle timeout.
    quic: quinn::ClientConfig,
    gear: Mutex<Box<dyn TransportGear>>,
    next_conn_id: AtomicU64,
    pools: Pools,
    /// Chromium-style race memory: RTTs, choices and broken QUIC per origin.
    race: Mutex<RaceState>,
    /// Per origin and path: held while a race opens a connection, so concurrent
    /// requests wait for that race instead of each racing.
    race_locks: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
}

fn lock_std<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The gearbox client. Cheap to clone: clones share pools, gear and telemetry.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("config", &self.inner.cfg)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client whose `Auto` requests go over TCP ([`StaticTransport`]'s default).
    pub fn new(config: ClientConfig) -> Result<Self, ClientError> {
        Client::with_gear(config, Box::new(StaticTransport::default()))
    }

    /// A client whose `Auto` requests are decided by `gear`.
    pub fn with_gear(config: ClientConfig, gear: Box<dyn TransportGear>) -> Result<Self, ClientError> {
        let tls_err = |e: tls::TlsError| ClientError::Config(e.to_string());
        let tcp = tls::client_config(&config.trust, &tls::ALPN_TCP).map_err(tls_err)?;
        let h1 = tls::client_config(&config.trust, &[b"http/1.1"]).map_err(tls_err)?;
        let h3 = tls::client_config(&config.trust, &[tls::ALPN_H3]).map_err(tls_err)?;
        let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(h3)
            .map_err(|e| ClientError::Config(format!("TLS configuration unusable for QUIC: {e}")))?;
        let mut transport = quinn::TransportConfig::default();
        let factory = config
            .quic_cc
            .factory(config.quic_initial_window_packets)
            .map_err(|e| ClientError::Config(e.to_string()))?;
        transport.congestion_controller_factory(factory);
        let idle = quinn::IdleTimeout::try_from(config.idle_timeout)
            .map_err(|_| ClientError::Config(format!("idle timeout {:?} is too long for QUIC", config.idle_timeout)))?;
        transport.max_idle_timeout(Some(idle));
        // Something retransmittable on the wire whenever nothing has been heard for a
        // while, so a silent path shows (crate::silence).
        transport.keep_alive_interval(Some(silence::RETRANSMITTABLE_ON_WIRE));
        let mut quic = quinn::ClientConfig::new(Arc::new(crypto));
        quic.transport_config(Arc::new(transport));
        Ok(Client {
            inner: Arc::new(Inner {
                tls_tcp: tokio_rustls::TlsConnector::from(Arc::new(tcp)),
                tls_h1: tokio_rustls::TlsConnector::from(Arc::new(h1)),
                quic,
                gear: Mutex::new(gear),
                next_conn_id: AtomicU64::new(1),
                pools: Pools::default(),
                race: Mutex::new(RaceState::new()),
                race_locks: Mutex::new(HashMap::new()),
                cfg: config,
            }),
        })
    }

    /// Replaces the transport gear.
    pub fn set_gear(&self, gear: Box<dyn TransportGear>) {
        *self.inner.gear.lock().unwrap_or_else(|p| p.into_inner()) = gear;
    }

    /// The configuration the client was made with.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.cfg
    }

    /// How much longer `Race` requests skip QUIC for `origin` (`host:port`) because it
    /// failed or lost a race (None: not broken).
    pub fn quic_broken_for(&self, origin: &str) -> Option<Duration> {
        lock_std(&self.inner.race).broken_for(origin, Instant::now())
    }

    /// Waits until every record written so far is in the telemetry file.
    pub async fn flush_telemetry(&self) {
        self.inner.cfg.telemetry.flush().await;
    }

    /// Sends a request and reads the whole response. One record is written to telemetry
    /// either way; on success it is also in [`Response::record`].
    pub async fn request(&self, req: Request) -> Result<Response, ClientError> {
        self.request_with_record(req).await.0
    }

    /// Like [`Client::request`], and also hands back the record (useful on failure).
    pub async fn request_with_record(&self, req: Request) -> (Result<Response, ClientError>, ClientRecord) {
        self.execute(req, None).await
    }

    /// Asks the gear for an `Auto` transport (`origin` is `host:port`); a transport the
    /// caller fixed is a decision too, with no id.
    pub(crate) fn decide(&self, requested: TransportPref, origin: &str) -> Decision<TransportPref> {
        if requested != TransportPref::Auto {
            return Decision::new(requested, format!("fixed:{}", requested.name()));
        }
        self.inner
            .gear
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .choose(origin, Instant::now())
            .map(TransportPref::from)
    }

    /// Runs one request; `decided` carries a transport already chosen (page loads decide
    /// once per page).
    pub(crate) async fn execute(
        &self,
        req: Request,
        decided: Option<Decision<TransportPref>>,
    ) -> (Result<Response, ClientError>, ClientRecord) {
        let start = Instant::now();
        let start_unix_ms = unix_ms_now();
        let parsed = parse_url(&req.url);
        let origin = parsed.as_ref().map(|u| u.authority.clone()).unwrap_or_default();
        let Decision {
            choice: pref,
            reason: decision,
            id: decision_id,
        } = match decided {
            Some(d) => d,
            None => self.decide(req.transport, &origin),
        };
        let mut progress = Progress::new(intended_protocol(pref));
        let result = match parsed {
            Err(e) => Err(e),
            Ok(url) => {
                let timeout = self.inner.cfg.request_timeout;
                match tokio::time::timeout(timeout, self.run(&url, &req, pref, start, &mut progress)).await {
                    Ok(res) => res,
                    Err(_) => Err(ClientError::Timeout {
                        what: "request",
                        addr: progress
                            .server_addr
                            .map(|a| a.to_string())
                            .unwrap_or(url.authority.clone()),
                        after: timeout,
                    }),
                }
            }
        };
        let end = Instant::now();
        let conn = progress.conn.as_ref();
        let record = ClientRecord {
            side: Side::Client,
            schema: SCHEMA_VERSION,
            time_unix_ms: start_unix_ms,
            conn_id: conn.map_or(0, |c| c.id),
            server_addr: conn
                .map(|c| c.server_addr)
                .or(progress.server_addr)
                .map(|a| a.to_string())
                .unwrap_or_else(|| origin.clone()),
            local_addr: conn.map(|c| c.local_addr.clone()).unwrap_or_default(),
            protocol: progress.protocol,
            method: req.method.to_string(),
            url: req.url.clone(),
            status: progress.status,
            bytes: progress.bytes,
            rct_ms: result.is_ok().then(|| end.duration_since(start).as_secs_f64() * 1e3),
            ttfb_ms: progress
                .first_byte_at
                .or(if result.is_ok() { progress.headers_at } else { None })
                .map(|t| t.duration_since(start).as_secs_f64() * 1e3),
            new_connection: progress.new_connection,
            handshake_ms: conn.filter(|_| progress.new_connection).map(|c| c.handshake_ms),
            transport: progress.snapshot.as_ref().and_then(SnapshotSource::snapshot),
            decision: Some({
                let mut d = decision;
                if let Some(outcome) = progress.race {
                    d.push_str(";race=");
                    d.push_str(outcome);
                }
                if let Some(what) = progress.fallback {
                    d.push_str(";fallback=");
                    d.push_str(what);
                }
                d
            }),
            decision_id,
            click: req.click,
            error: result.as_ref().err().map(|e| e.kind().to_string()),
            retried_from: progress.retried_from,
            retry_lost_ms: progress.retry_lost_ms,
        };
        self.inner.cfg.telemetry.write(&record);
        if let Some(t) = &record.transport {
            let mut race = lock_std(&self.inner.race);
            if pref == TransportPref::Race {
                race.observe_rtt(&origin, t.rtt_ms);
            }
            if record.protocol == Protocol::H3 {
                race.observe_quic_rtt(&origin, t.rtt_ms);
            }
        }
        self.inner
            .gear
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .observe(&record, Instant::now());
        let result = result.map(|(status, headers, body)| Response {
            status,
            headers,
            body,
            record: record.clone(),
        });
        (result, record)
    }

    /// The request proper: resolve, get a connection, exchange, with one retry when a
    /// pooled connection turned out dead, and the fallback from QUIC to TCP (below).
    ///
    /// Fallback rules, in the modes that can fall back (the caller left the transport
    /// to the client, `Auto`, or asked for `Race`; a fixed `Quic` is the QUIC-only
    /// baseline and never falls back):
    /// - QUIC marked broken for the origin (`crate::race::RaceState::quic_broken`: 300 s,
    ///   doubling per consecutive break): a gear's QUIC choice goes over TCP at once
    ///   (`fallback=quic-broken`; `Race` has its own `race=tcp-broken`).
    /// - A request whose QUIC attempt failed (handshake failed or timed out, the
    ///   connection went silent, `crate::silence`, or closed, or the HTTP/3 exchange
    ///   failed) marks QUIC broken and is sent again over TCP when that is safe: always
    ///   when it never reached the connection (handshake failure), otherwise only when
    ///   it is idempotent ([`Request::is_idempotent`]). The record says
    ///   `retried_from = "h3"`, `retry_lost_ms` and `fallback=tcp-retry`. A
    ///   non-idempotent request fails with the QUIC error instead.
    ///
    /// This is Chromium's `HttpNetworkTransaction::HandleIOError` (net/http/
    /// http_network_transaction.cc): on `ERR_QUIC_PROTOCOL_ERROR` it retries the request
    /// with alternative services disabled (`retry_without_alt_svc_on_quic_errors`) and
    /// the alternative service ends up marked broken; on `ERR_QUIC_HANDSHAKE_FAILED` it
    /// retries as well. Two differences: Chromium retries only while no response
    /// header has arrived, whatever the method; here a request is retried after its
    /// headers too (the client hands out only whole responses, so nothing partial was
    /// seen by the caller), but only an idempotent one once it may have reached the
    /// server.
    async fn run(
        &self,
        url: &ParsedUrl,
        req: &Request,
        pref: TransportPref,
        start: Instant,
        p: &mut Progress,
    ) -> Result<(u16, HeaderMap, Bytes), ClientError> {
        let local = self.local_for(req.path_index)?;
        let target = resolve(url, local).await?;
        p.server_addr = Some(target.addr);
        let key: Key = (url.authority.clone(), req.path_index);
        let dial = Dial {
            target: &target,
            local,
            tcp_cc: self.inner.cfg.tcp_cc,
            connect_timeout: self.inner.cfg.connect_timeout,
        };
        let can_fall_back =
            matches!(req.transport, TransportPref::Auto | TransportPref::Race) && pref != TransportPref::Tcp;
        let mut pref = pref;
        if can_fall_back && pref == TransportPref::Quic && self.quic_broken_for(&key.0).is_some() {
            p.fallback = Some("quic-broken");
            pref = TransportPref::Tcp;
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            let res = match pref {
                TransportPref::H1 => self.via_h1(&key, &dial, url, req, None, p).await,
                TransportPref::Quic => self.via_h3(&key, &dial, url, req, p).await,
                TransportPref::Race => self.via_race(&key, &dial, url, req, p).await,
                TransportPref::Tcp | TransportPref::Auto => self.via_tcp(&key, &dial, url, req, p).await,
            };
            match res {
                Ok(out) => return Ok(out),
                Err(f) if f.retry && attempt == 1 => {
                    tracing::debug!(url = %req.url, error = %f.error, "pooled connection was dead; retrying on a new one");
                }
                Err(f) if f.quic && can_fall_back && p.retried_from.is_none() => {
                    let span = lock_std(&self.inner.race).quic_broken(&key.0, Instant::now());
                    tracing::debug!(
                        url = %req.url,
                        error = %f.error,
                        broken_s = span.as_secs(),
                        "QUIC failed; marked broken"
                    );
                    if f.sent && !req.is_idempotent() {
                        return Err(f.error);
                    }
                    p.retried_from = Some(Protocol::H3);
                    p.retry_lost_ms = Some(start.elapsed().as_secs_f64() * 1e3);
                    p.fallback = Some("tcp-retry");
                    pref = TransportPref::Tcp;
                }
                Err(f) => return Err(f.error),
            }
        }
    }

    fn local_for(&self, index: usize) -> Result<Option<IpAddr>, ClientError> {
        let addrs = &self.inner.cfg.local_addrs;
        if addrs.is_empty() {
            return if index == 0 {
                Ok(None)
            } else {
                Err(ClientError::Path { index, available: 1 })
            };
        }
        addrs.get(index).copied().map(Some).ok_or(ClientError::Path {
            index,
            available: addrs.len(),
        })
    }

    fn next_id(&self) -> u64 {
        self.inner.next_conn_id.fetch_add(1, Ordering::Relaxed)
    }

    /// TCP: HTTP/2 on the origin's one connection, or HTTP/1.1 when the server chose it.
    async fn via_tcp(
        &self,
        key: &Key,
        dial: &Dial<'_>,
        url: &ParsedUrl,
        req: &Request,
        p: &mut Progress,
    ) -> Result<(u16, HeaderMap, Bytes), Failure> {
        let cfg = &self.inner.cfg;
        let slot = self.inner.pools.tcp_slot(key);
        let mut guard = slot.lock().await;
        if guard.h1_only {
            drop(guard);
            return self.via_h1(key, dial, url, req, None, p).await;
        }
        let (conn, new) = match &guard.h2 {
            Some(c) if !req.force_new_connection && c.reusable(cfg.idle_timeout, Instant::now()) => (c.clone(), false),
            _ => {
                let io = open_tcp_tls(dial, &self.inner.tls_tcp).await?;
                let id = self.next_id();
                if !io.is_h2() {
                    // The server picked http/1.1: remember it, and serve this request on
                    // the connection just made, which then joins the origin's h1 pool.
                    guard.h1_only = true;
                    drop(guard);
                    let conn = start_h1(io, id, dial.target.addr).await?;
                    return self.via_h1(key, dial, url, req, Some(conn), p).await;
                }
                let c = Arc::new(start_h2(io, id, dial.target.addr).await?);
                guard.h2 = Some(c.clone());
                (c, true)
            }
        };
        drop(guard);
        p.attach(&conn.info, new, SnapshotSource::Tcp(conn.fd.clone()), Protocol::H2);
        conn.touch();
        let request = hyper_request(url, req, Version::HTTP_2)?;
        let mut sender = conn.sender.clone();
        let response = match sender.send_request(request).await {
            Ok(r) => r,
            Err(e) => {
                if sender.is_closed() {
                    conn.closed.store(true, Ordering::Release);
                }
                return Err(Failure {
                    error: http_error("h2", req, e),
                    retry: !new,
                    quic: false,
                    sent: true,
                });
            }
        };
        let out = read_hyper(response, p, req)
            .await
            .map_err(|e| http_error("h2", req, e))?;
        conn.touch();
        Ok(out)
    }

    /// HTTP/1.1 from the origin's keep-alive pool (`preopened`: a connection the TCP path
    /// just opened and found to speak HTTP/1.1).
    async fn via_h1(
        &self,
        key: &Key,
        dial: &Dial<'_>,
        url: &ParsedUrl,
        req: &Request,
        preopened: Option<H1Conn>,
        p: &mut Progress,
    ) -> Result<(u16, HeaderMap, Bytes), Failure> {
        let cfg = &self.inner.cfg;
        let slot = self.inner.pools.h1_slot(key, cfg.max_h1_connections_per_origin);
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
        if let Err(e) = lease.conn.sender.ready().await {
            return Err(Failure {
                error: http_error("h1", req, e),
                retry: !new,
                quic: false,
                sent: true,
            });
        }
        let request = hyper_request(url, req, Version::HTTP_11)?;
        let response = match lease.conn.sender.send_request(request).await {
            Ok(r) => r,
            Err(e) => {
                return Err(Failure {
                    error: http_error("h1", req, e),
                    retry: !new,
                    quic: false,
                    sent: true,
                })
            }
        };
        let out = read_hyper(response, p, req)
            .await
            .map_err(|e| http_error("h1", req, e))?;
        let H1Lease { conn, slot, _permit } = lease;
        slot.put_back(conn);
        Ok(out)
    }

    /// `Race`: follow the last race's choice while its connection lives; otherwise race
    /// a new connection (QUIC first, TCP after the delay) unless QUIC is broken, in
    /// which case TCP is used directly. Rules and reasons: `crate::race`.
    async fn via_race(
        &self,
        key: &Key,
        dial: &Dial<'_>,
        url: &ParsedUrl,
        req: &Request,
        p: &mut Progress,
    ) -> Result<(u16, HeaderMap, Bytes), Failure> {
        let origin = key.0.as_str();
        let race_lock = lock_std(&self.inner.race_locks).entry(key.clone()).or_default().clone();
        let racing = race_lock.lock().await;
        let (broken, choice, delay) = {
            let mut race = lock_std(&self.inner.race);
            race.network(local_address_fingerprint());
            (
                race.is_broken(origin, Instant::now()),
                race.choice(origin),
                race.tcp_delay(origin),
            )
        };
        if broken {
            drop(racing);
            p.race = Some("tcp-broken");
            lock_std(&self.inner.race).tcp_used(origin);
            return self.via_tcp(key, dial, url, req, p).await;
        }
        if !req.force_new_connection {
            let idle = self.inner.cfg.idle_timeout;
            let now = Instant::now();
            match choice {
                Some(TransportPref::Quic) => {
                    let live = self
                        .inner
                        .pools
                        .h3_slot(key)
                        .lock()
                        .await
                        .conn
                        .as_ref()
                        .is_some_and(|c| c.reusable(idle, now));
                    if live {
                        drop(racing);
                        p.race = Some("reuse-quic");
                        return self.via_h3(key, dial, url, req, p).await;
                    }
                }
                Some(TransportPref::Tcp) => {
                    let live = {
                        let slot = self.inner.pools.tcp_slot(key);
                        let slot = slot.lock().await;
                        slot.h1_only || slot.h2.as_ref().is_some_and(|c| c.reusable(idle, now))
                    };
                    if live {
                        drop(racing);
                        p.race = Some("reuse-tcp");
                        return self.via_tcp(key, dial, url, req, p).await;
                    }
                }
                _ => {}
            }
        }
        // The race's connection goes into the pool, and the request then takes it from
        // there like any pooled request (so it must not ask for yet another one).
        let pooled_req = Request {
            force_new_connection: false,
            ..req.clone()
        };
        match self.race_connect(dial, delay).await {
            Err(e) => {
                p.race = Some("failed");
                p.protocol = Protocol::H2;
                Err(Failure::from(e))
            }
            Ok(Raced::Quic(conn)) => {
                lock_std(&self.inner.race).quic_won(origin);
                self.inner.pools.h3_slot(key).lock().await.conn = Some(Arc::new(*conn));
                drop(racing);
                p.race = Some("quic");
                let res = self.via_h3(key, dial, url, &pooled_req, p).await;
                p.new_connection = true;
                res
            }
            Ok(Raced::Tcp { io, quic_failed }) => {
                let span = lock_std(&self.inner.race).quic_broken(origin, Instant::now());
                tracing::debug!(
                    origin,
                    quic_failed,
                    broken_s = span.as_secs(),
                    "QUIC lost the race; marked broken"
                );
                p.race = Some(if quic_failed { "tcp-quic-failed" } else { "tcp-won" });
                let id = self.next_id();
                let slot = self.inner.pools.tcp_slot(key);
                let mut tcp = slot.lock().await;
                if io.is_h2() {
                    tcp.h2 = Some(Arc::new(start_h2(*io, id, dial.target.addr).await?));
                    drop(tcp);
                    drop(racing);
                    let res = self.via_tcp(key, dial, url, &pooled_req, p).await;
                    p.new_connection = true;
                    res
                } else {
                    tcp.h1_only = true;
                    drop(tcp);
                    let conn = start_h1(*io, id, dial.target.addr).await?;
                    drop(racing);
                    self.via_h1(key, dial, url, req, Some(conn), p).await
                }
            }
        }
    }

    /// Opens one connection by racing: the QUIC handshake starts now, TCP+TLS after
    /// `delay` (at once if QUIC fails first); the first to connect wins and the other
    /// attempt is dropped. Fails only when both fail (with TCP's error).
    async fn race_connect(&self, dial: &Dial<'_>, delay: Duration) -> Result<Raced, ClientError> {
        let addr = dial.target.addr.to_string();
        let quic = async {
            let endpoint = self
                .inner
                .pools
                .endpoint(dial.local, dial.target.addr.is_ipv6())
                .map_err(|e| ClientError::Quic {
                    addr: addr.clone(),
                    reason: format!("cannot open a UDP socket: {e}"),
                })?;
            let cc = self.inner.cfg.quic_cc.name();
            let idle = self.inner.cfg.idle_timeout;
            open_h3(dial, &endpoint, self.inner.quic.clone(), cc, self.next_id(), idle).await
        };
        tokio::pin!(quic);
        let head_start = tokio::time::sleep(delay);
        tokio::pin!(head_start);
        let quic_failed = tokio::select! {
            r = &mut quic => match r {
                Ok(conn) => return Ok(Raced::Quic(Box::new(conn))),
                Err(e) => {
                    tracing::debug!(%addr, error = %e, "QUIC failed before TCP started");
                    true
                }
            },
            () = &mut head_start => false,
        };
        let tcp = open_tcp_tls(dial, &self.inner.tls_tcp);
        tokio::pin!(tcp);
        if quic_failed {
            return tcp.await.map(|io| Raced::Tcp {
                io: Box::new(io),
                quic_failed: true,
            });
        }
        tokio::select! {
            r = &mut quic => match r {
                Ok(conn) => Ok(Raced::Quic(Box::new(conn))),
                Err(e) => {
                    tracing::debug!(%addr, error = %e, "QUIC failed while TCP was connecting");
                    tcp.await.map(|io| Raced::Tcp { io: Box::new(io), quic_failed: true })
                }
            },
            r = &mut tcp => match r {
                Ok(io) => Ok(Raced::Tcp { io: Box::new(io), quic_failed: false }),
                Err(tcp_err) => match quic.await {
                    Ok(conn) => Ok(Raced::Quic(Box::new(conn))),
                    Err(_) => Err(tcp_err),
                },
            },
        }
    }

    /// HTTP/3 on the origin's one QUIC connection. A new connection's handshake is
    /// bounded by `crate::silence::handshake_grace` (or the connect timeout, if shorter);
    /// an exchange on a connection its silence watch declares silent ends at once with
    /// [`ClientError::QuicSilent`]. Every failure here is marked `quic` (the client's
    /// fallback rules may retry it over TCP), and `sent` once the request was handed to
    /// the connection.
    async fn via_h3(
        &self,
        key: &Key,
        dial: &Dial<'_>,
        url: &ParsedUrl,
        req: &Request,
        p: &mut Progress,
    ) -> Result<(u16, HeaderMap, Bytes), Failure> {
        let cfg = &self.inner.cfg;
        let addr = dial.target.addr.to_string();
        let quic_failure = |error: ClientError| Failure {
            error,
            retry: false,
            quic: true,
            sent: false,
        };
        let request = h3_request(url, req)?;
        let slot = self.inner.pools.h3_slot(key);
        let waiting_since = Instant::now();
        let mut guard = slot.lock().await;
        let (conn, new) = match &guard.conn {
            Some(c) if !req.force_new_connection && c.reusable(cfg.idle_timeout, Instant::now()) => (c.clone(), false),
            _ => {
                if let Some((_, why)) = guard.failed.as_ref().filter(|(at, _)| *at >= waiting_since) {
                    return Err(quic_failure(why.same_again()));
                }
                let endpoint = self
                    .inner
                    .pools
                    .endpoint(dial.local, dial.target.addr.is_ipv6())
                    .map_err(|e| {
                        quic_failure(ClientError::Quic {
                            addr: addr.clone(),
                            reason: format!("cannot open a UDP socket: {e}"),
                        })
                    })?;
                let cc = cfg.quic_cc.name();
                let known_rtt = lock_std(&self.inner.race).quic_rtt(&key.0);
                let bounded = Dial {
                    target: dial.target,
                    local: dial.local,
                    tcp_cc: dial.tcp_cc,
                    connect_timeout: dial.connect_timeout.min(silence::handshake_grace(known_rtt)),
                };
                let opened = open_h3(
                    &bounded,
                    &endpoint,
                    self.inner.quic.clone(),
                    cc,
                    self.next_id(),
                    cfg.idle_timeout,
                )
                .await;
                let c = match opened {
                    Ok(c) => Arc::new(c),
                    Err(e) => {
                        guard.failed = Some((Instant::now(), e.same_again()));
                        return Err(quic_failure(e));
                    }
                };
                guard.conn = Some(c.clone());
                guard.failed = None;
                (c, true)
            }
        };
        drop(guard);
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

    /// One request and its response on an HTTP/3 connection; on failure, the error and
    /// whether no response header had arrived.
    async fn h3_exchange(
        &self,
        conn: &H3Conn,
        addr: &str,
        request: http::Request<()>,
        req: &Request,
        p: &mut Progress,
    ) -> Result<(u16, HeaderMap, Bytes), (ClientError, bool)> {
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
        p.status = Some(response.status().as_u16());
        p.headers_at = Some(Instant::now());
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

/// The connection a race produced.
enum Raced {
    /// QUIC connected first.
    Quic(Box<H3Conn>),
    /// TCP+TLS connected first (`quic_failed`: QUIC had failed, rather than being slower).
    Tcp { io: Box<TcpTls>, quic_failed: bool },
}

/// Protocol written in a record before the connection tells which one it is.
fn intended_protocol(pref: TransportPref) -> Protocol {
    match pref {
        TransportPref::H1 => Protocol::H1,
        TransportPref::Quic | TransportPref::Race => Protocol::H3,
        TransportPref::Tcp | TransportPref::Auto => Protocol::H2,
    }
}

/// Resolves the URL's host; with a bound local path, to an address of its family.
async fn resolve(url: &ParsedUrl, local: Option<IpAddr>) -> Result<Target, ClientError> {
    let resolve_err = |reason: String| ClientError::Resolve {
        host: url.authority.clone(),
        reason,
    };
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(url.authority.as_str())
        .await
        .map_err(|e| resolve_err(e.to_string()))?
        .collect();
    let addr = addrs
        .iter()
        .copied()
        .find(|a| local.is_none_or(|l| l.is_ipv4() == a.is_ipv4()))
        .ok_or_else(|| resolve_err("no address of the local path's address family".into()))?;
    let server_name = ServerName::try_from(url.host.clone()).map_err(|e| ClientError::BadUrl {
        url: url.uri.to_string(),
        reason: format!("host is not a valid TLS server name: {e}"),
    })?;
    Ok(Target {
        server_name,
        server_name_text: url.host.clone(),
        addr,
    })
}

/// The request as hyper sends it: origin-form target and `Host` for HTTP/1.1, absolute
/// URI (hyper turns it into `:scheme`/`:authority`) for HTTP/2.
fn hyper_request(url: &ParsedUrl, req: &Request, version: Version) -> Result<http::Request<HyperBody>, ClientError> {
    let bad = |e: http::Error| ClientError::BadUrl {
        url: req.url.clone(),
        reason: e.to_string(),
    };
    let mut builder = http::Request::builder().method(req.method.clone()).version(version);
    builder = if version == Version::HTTP_11 {
        let host = HeaderValue::from_str(&url.authority).map_err(|e| ClientError::BadUrl {
            url: req.url.clone(),
            reason: e.to_string(),
        })?;
        builder
            .uri(url.path_and_query.as_str())
            .header(http::header::HOST, host)
    } else {
        builder.uri(url.uri.clone())
    };
    let mut request = builder.body(Full::new(req.body.clone())).map_err(bad)?;
    for (name, value) in &req.headers {
        if name != http::header::HOST {
            request.headers_mut().append(name.clone(), value.clone());
        }
    }
    Ok(request)
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

/// Reads a hyper response to its end, timing the first body byte.
async fn read_hyper(
    response: http::Response<hyper::body::Incoming>,
    p: &mut Progress,
    req: &Request,
) -> Result<(u16, HeaderMap, Bytes), hyper::Error> {
    p.status = Some(response.status().as_u16());
    p.headers_at = Some(Instant::now());
    let (parts, mut incoming) = response.into_parts();
    let mut body = BytesMut::new();
    while let Some(frame) = incoming.frame().await {
        if let Ok(data) = frame?.into_data() {
            p.data(data.len());
            if !req.discard_body {
                body.extend_from_slice(&data);
            }
        }
    }
    Ok((parts.status.as_u16(), parts.headers, body.freeze()))
}

fn http_error(protocol: &'static str, req: &Request, e: hyper::Error) -> ClientError {
    // hyper's Display is terse ("connection closed before message completed"); the
    // source chain carries the h2 or io reason.
    let mut reason = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        reason.push_str(": ");
        reason.push_str(&s.to_string());
        source = s.source();
    }
    ClientError::Http {
        protocol,
        url: req.url.clone(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_urls_are_accepted() {
        assert!(matches!(parse_url("http://a/"), Err(ClientError::BadUrl { .. })));
        assert!(matches!(parse_url("/just/a/path"), Err(ClientError::BadUrl { .. })));
        assert!(matches!(parse_url("https://"), Err(ClientError::BadUrl { .. })));
        assert!(matches!(parse_url("not a url at all"), Err(ClientError::BadUrl { .. })));
    }

    #[test]
    fn url_origin_defaults_to_port_443_and_path_slash() {
        let u = parse_url("https://example.org").unwrap();
        assert_eq!(u.authority, "example.org:443");
        assert_eq!(u.path_and_query, "/");
        let u = parse_url("https://[::1]:8443/bytes/10?x=1").unwrap();
        assert_eq!(u.authority, "[::1]:8443");
        assert_eq!(u.host, "::1");
        assert_eq!(u.path_and_query, "/bytes/10?x=1");
    }
}
