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

use bytes::Bytes;
use gearbox_dataplane::telemetry::{unix_ms_now, ClientRecord, Protocol, Side, SCHEMA_VERSION};
use gearbox_dataplane::tls;
use http::{HeaderMap, Method};
use rustls::pki_types::ServerName;

use crate::config::ClientConfig;
use crate::conn::{Dial, Key, Pools, SnapshotSource, Target};
use crate::error::ClientError;
use crate::exchange::{Exchanged, Failure, Progress};
use crate::gear::{StaticTransport, TransportPref};
use crate::hedge::RecentCosts;
use crate::race::RaceState;
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
    /// The path scheduler's reason when one chose `path_index` (multipath page loads,
    /// `crate::multipath`); copied into the record with the path index.
    pub path_decision: Option<String>,
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
            path_decision: None,
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

pub(crate) struct Inner {
    pub cfg: ClientConfig,
    /// ALPN h2, http/1.1.
    pub tls_tcp: tokio_rustls::TlsConnector,
    /// ALPN http/1.1 only.
    pub tls_h1: tokio_rustls::TlsConnector,
    /// ALPN h3, with the congestion controller and idle timeout.
    pub quic: quinn::ClientConfig,
    gear: Mutex<Box<dyn TransportGear>>,
    next_conn_id: AtomicU64,
    pub pools: Pools,
    /// Chromium-style race memory: RTTs, choices and broken QUIC per origin.
    pub race: Mutex<RaceState>,
    /// Per origin and path: held while a race opens a connection, so concurrent
    /// requests wait for that race instead of each racing.
    pub race_locks: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
    /// TCP's recent completion times per origin, for the hedge's delay (`crate::hedge`).
    pub tcp_costs: Mutex<RecentCosts>,
    /// QUIC's recent completion times per origin, for the hedge's delay.
    pub quic_costs: Mutex<RecentCosts>,
}

pub(crate) fn lock_std<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The gearbox client. Cheap to clone: clones share pools, gear and telemetry.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
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
                tcp_costs: Mutex::new(RecentCosts::new()),
                quic_costs: Mutex::new(RecentCosts::new()),
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

    /// Closes the client's QUIC connections politely (CONNECTION_CLOSE with
    /// H3_NO_ERROR), waiting at most 100 ms for the closes to leave. TCP connections
    /// close with their sockets. [`crate::BlockingClient`] does this when dropped.
    pub async fn close_connections(&self) {
        self.inner.pools.h3.close(Duration::from_millis(100)).await;
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
                if let Some(how) = progress.hedge {
                    d.push_str(";hedge=");
                    d.push_str(how);
                }
                d
            }),
            decision_id,
            click: req.click,
            error: result.as_ref().err().map(|e| e.kind().to_string()),
            retried_from: progress.retried_from,
            retry_lost_ms: progress.retry_lost_ms,
            hedged: progress.hedged,
            hedge_at_ms: progress.hedge_at_ms,
            path_index: req.path_decision.as_ref().map(|_| req.path_index),
            path_decision: req.path_decision.clone(),
        };
        self.inner.cfg.telemetry.write(&record);
        if self.inner.cfg.hedge.is_some() {
            if let Some(ms) = tcp_time_ms(&record) {
                lock_std(&self.inner.tcp_costs).observe(&origin, ms);
            }
            if let Some(ms) = quic_time_ms(&record) {
                lock_std(&self.inner.quic_costs).observe(&origin, ms);
            }
        }
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
    ) -> Result<Exchanged, ClientError> {
        let local = self.local_for(req.path_index)?;
        let target = resolve(url, local).await?;
        p.server_addr = Some(target.addr);
        let key: Key = (url.authority.clone(), req.path_index);
        let dial = Dial {
            target: &target,
            local,
            tcp_cc: self.inner.cfg.tcp_cc,
            mptcp: self.inner.cfg.mptcp,
            connect_timeout: self.inner.cfg.connect_timeout,
        };
        let can_fall_back =
            matches!(req.transport, TransportPref::Auto | TransportPref::Race) && pref != TransportPref::Tcp;
        // How long a new QUIC handshake may take (`crate::silence::handshake_bound`): short
        // when the request has somewhere else to go, TCP here or, for a request whose path
        // a path scheduler chose (`crate::multipath`), the load's other paths; up to
        // Chromium's handshake limit when QUIC is all it has (a fixed `Quic`).
        let quic_fallback = if can_fall_back || req.path_decision.is_some() {
            silence::Fallback::Available
        } else {
            silence::Fallback::Unavailable
        };
        let mut pref = pref;
        if can_fall_back && pref == TransportPref::Quic && self.quic_broken_for(&key.0).is_some() {
            p.fallback = Some("quic-broken");
            pref = TransportPref::Tcp;
        }
        // Hedging (`crate::hedge`): an idempotent `auto` request the gear sent over QUIC.
        let hedge_after = match self.inner.cfg.hedge {
            Some(rule)
                if req.transport == TransportPref::Auto && pref == TransportPref::Quic && req.is_idempotent() =>
            {
                let tcp = lock_std(&self.inner.tcp_costs).median(&key.0);
                rule.delay(tcp, lock_std(&self.inner.quic_costs).median(&key.0))
            }
            _ => None,
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let res = match pref {
                TransportPref::H1 => self.send_h1(&key, &dial, url, req, None, p).await,
                TransportPref::Quic => match hedge_after {
                    Some(delay) if p.hedged.is_none() => {
                        self.send_h3_hedged(&key, &dial, url, req, quic_fallback, start + delay, start, p)
                            .await
                    }
                    _ => self.send_h3(&key, &dial, url, req, quic_fallback, p).await,
                },
                TransportPref::Race => self.send_race(&key, &dial, url, req, p).await,
                TransportPref::Tcp | TransportPref::Auto => self.send_h2(&key, &dial, url, req, p).await,
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

    /// HTTP/3 with a hedge over TCP at `hedge_at` (`crate::hedge`): the QUIC exchange
    /// runs alone until then; if it has not completed, the request is also sent over
    /// TCP and the first of the two to complete answers, the other's future dropped (an
    /// HTTP/3 stream dropped so is stopped, STOP_SENDING, and its connection stays
    /// pooled). When QUIC fails while the hedge runs, QUIC is marked broken (as by the
    /// fallback rules) and the hedge answers; when the hedge fails, QUIC's answer is
    /// awaited and its failure goes to the fallback rules as without a hedge.
    #[allow(clippy::too_many_arguments)] // the send path's arguments and the hedge's time
    async fn send_h3_hedged(
        &self,
        key: &Key,
        dial: &Dial<'_>,
        url: &ParsedUrl,
        req: &Request,
        fallback: silence::Fallback,
        hedge_at: Instant,
        start: Instant,
        p: &mut Progress,
    ) -> Result<Exchanged, Failure> {
        let mut quic = Box::pin(self.send_h3(key, dial, url, req, fallback, p));
        tokio::select! {
            biased;
            r = &mut quic => return r,
            () = tokio::time::sleep_until(hedge_at.into()) => {}
        }
        let hedge_at_ms = start.elapsed().as_secs_f64() * 1e3;
        tracing::debug!(url = %req.url, hedge_at_ms, "QUIC request hedged over TCP");
        let mut hp = Progress::new(Protocol::H2);
        let mut tcp = Box::pin(self.send_h2(key, dial, url, req, &mut hp));
        enum First<T> {
            Quic(T),
            Tcp(T),
        }
        let first = tokio::select! {
            biased;
            r = &mut quic => First::Quic(r),
            r = &mut tcp => First::Tcp(r),
        };
        // Which copy answers (`true`: the hedge), and how the hedge ended.
        let (result, by_tcp, how) = match first {
            First::Quic(Ok(out)) => (Ok(out), false, "quic-won"),
            First::Quic(Err(f)) => {
                if f.quic {
                    let span = lock_std(&self.inner.race).quic_broken(&key.0, Instant::now());
                    tracing::debug!(url = %req.url, error = %f.error, broken_s = span.as_secs(), "QUIC failed under a hedge; marked broken");
                }
                match (&mut tcp).await {
                    Ok(out) => (Ok(out), true, "quic-failed"),
                    Err(mut e) => {
                        // The request's TCP attempt is spent: no fallback retry after it.
                        e.quic = false;
                        e.retry = false;
                        (Err(e), true, "both-failed")
                    }
                }
            }
            First::Tcp(Ok(out)) => (Ok(out), true, "tcp-won"),
            First::Tcp(Err(e)) => {
                tracing::debug!(url = %req.url, error = %e.error, "the hedge failed; waiting for QUIC");
                ((&mut quic).await, false, "tcp-failed")
            }
        };
        // The loser is cancelled here (an HTTP/3 stream dropped mid-exchange is stopped).
        drop(quic);
        drop(tcp);
        let hedge_protocol = hp.protocol;
        if by_tcp {
            p.take_exchange(hp);
        }
        p.hedged = Some(hedge_protocol);
        p.hedge_at_ms = Some(hedge_at_ms);
        p.hedge = Some(how);
        result
    }

    pub(crate) fn local_for(&self, index: usize) -> Result<Option<IpAddr>, ClientError> {
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

    pub(crate) fn next_id(&self) -> u64 {
        self.inner.next_conn_id.fetch_add(1, Ordering::Relaxed)
    }
}

/// The time TCP took over a successful request that ended on TCP, for the hedge's
/// estimate (`crate::hedge`): its completion time, less the time before a hedge or a
/// retry started it (the time spent on QUIC first is not TCP's).
fn tcp_time_ms(record: &ClientRecord) -> Option<f64> {
    if record.error.is_some() || !matches!(record.protocol, Protocol::H1 | Protocol::H2) {
        return None;
    }
    let rct = record.rct_ms?;
    let before = match record.hedged {
        Some(_) => record.hedge_at_ms,
        None => record.retry_lost_ms,
    };
    Some(rct - before.unwrap_or(0.0))
}

/// The time QUIC took over a successful request that ended on QUIC and was not a retry,
/// for the hedge's estimate (`crate::hedge`): its completion time.
fn quic_time_ms(record: &ClientRecord) -> Option<f64> {
    if record.error.is_some() || !matches!(record.protocol, Protocol::H3) || record.retried_from.is_some() {
        return None;
    }
    record.rct_ms
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
pub(crate) async fn resolve(url: &ParsedUrl, local: Option<IpAddr>) -> Result<Target, ClientError> {
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
