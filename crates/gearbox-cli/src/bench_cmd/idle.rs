//! The idle connections of `gearbox bench load`: TLS over TCP with the HTTP/2 preface
//! sent, and QUIC with HTTP/3's control streams open, each then left quiet. A connection
//! is held by a task that answers the server's PINGs (h2's connection driver, quinn's
//! endpoint) and ends when the server closes it, so the count of live ones is known at
//! any moment. Raw h2 and h3 clients rather than `gearbox-client`: one client per idle
//! connection would cost a QUIC endpoint (a UDP socket) each, and the bench's own file
//! descriptors would then be the bound instead of the server's.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use gearbox_dataplane::tls::{self, Trust};

/// Longest time one idle connection may take to open (TCP + TLS + preface, or QUIC +
/// the h3 control streams): a liveness bound on the bench, not a figure.
const OPEN_BOUND: Duration = Duration::from_secs(30);

/// Idle connections held open against one server.
pub(super) struct IdleSet {
    /// Connections opened and not yet closed by the server.
    alive: Arc<AtomicU64>,
    /// What keeps each connection open: dropping it closes the connection.
    holders: Vec<Holder>,
    /// Connections that failed to open.
    pub(super) failed: u64,
    /// The first failure, for the report.
    pub(super) first_error: Option<String>,
    /// Wall time the opening took, seconds.
    pub(super) open_s: f64,
    /// Connections that ended before the bench closed them, by cause (who closed it, and
    /// why, as the transport reported it).
    closes: Arc<Mutex<BTreeMap<String, u64>>>,
    /// The local UDP port of the QUIC connections (one endpoint for all), for the
    /// socket's drop count; `None` for TCP.
    pub(super) udp_port: Option<u16>,
}

/// Each variant holds the request handle because dropping it would close the connection.
#[allow(dead_code)]
enum Holder {
    H2(h2::client::SendRequest<bytes::Bytes>, tokio::task::JoinHandle<()>),
    H3(
        quinn::Connection,
        h3::client::SendRequest<h3_quinn::OpenStreams, bytes::Bytes>,
        tokio::task::JoinHandle<()>,
    ),
}

impl Drop for Holder {
    fn drop(&mut self) {
        match self {
            Holder::H2(_, task) => task.abort(),
            Holder::H3(conn, _, task) => {
                conn.close(0u32.into(), b"bench done");
                task.abort();
            }
        }
    }
}

impl IdleSet {
    /// Opened connections the server has not closed.
    pub(super) fn alive(&self) -> u64 {
        self.alive.load(Ordering::Relaxed)
    }

    /// Connections opened.
    pub(super) fn opened(&self) -> u64 {
        self.holders.len() as u64
    }

    /// Connections the server or the transport ended, by cause.
    pub(super) fn closes(&self) -> Vec<(String, u64)> {
        let c = self.closes.lock().unwrap_or_else(|p| p.into_inner());
        c.iter().map(|(k, n)| (k.clone(), *n)).collect()
    }
}

/// Why a held QUIC connection ended, in words for the report: an idle timeout is the
/// bench's own transport hearing nothing for the negotiated idle timeout; a close is the
/// server's (with its code); a reset the server's stateless reset.
fn quic_close_cause(e: &quinn::ConnectionError) -> String {
    match e {
        quinn::ConnectionError::TimedOut => "idle timeout: nothing received for the negotiated idle timeout".into(),
        quinn::ConnectionError::ApplicationClosed(c) => {
            format!("the server closed it (application code {:#x})", u64::from(c.error_code))
        }
        quinn::ConnectionError::ConnectionClosed(c) => {
            format!("the server closed it (transport code {})", c.error_code)
        }
        quinn::ConnectionError::Reset => "stateless reset from the server".into(),
        quinn::ConnectionError::LocallyClosed => "closed by the bench".into(),
        other => format!("{other}"),
    }
}

fn count_close(closes: &Mutex<BTreeMap<String, u64>>, cause: String) {
    *closes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(cause)
        .or_insert(0) += 1;
}

/// Which transport an idle set uses.
#[derive(Debug, Clone, Copy)]
pub(super) enum IdleKind {
    /// TLS 1.3 over TCP, ALPN h2, client preface and SETTINGS sent.
    TcpH2,
    /// QUIC, ALPN h3, control and QPACK streams open.
    QuicH3,
}

/// Opens `count` idle connections of `kind` to `addr`, `parallel` handshakes at a time.
pub(super) async fn open(
    kind: IdleKind,
    addr: SocketAddr,
    cert: &Path,
    count: usize,
    parallel: usize,
) -> anyhow::Result<IdleSet> {
    let trust = Trust::Roots(vec![cert.to_path_buf()]);
    let alive = Arc::new(AtomicU64::new(0));
    let first_error = Arc::new(Mutex::new(None::<String>));
    let closes = Arc::new(Mutex::new(BTreeMap::new()));
    let started = Instant::now();
    let mut udp_port = None;
    let holders: Vec<Holder> = match kind {
        IdleKind::TcpH2 => {
            let tls = tls::client_config(&trust, &[b"h2"])?;
            let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));
            futures::stream::iter(0..count)
                .map(|_| {
                    let (connector, alive, first_error, closes) =
                        (connector.clone(), alive.clone(), first_error.clone(), closes.clone());
                    async move {
                        match tokio::time::timeout(OPEN_BOUND, open_h2(&connector, addr, alive, closes)).await {
                            Ok(Ok(h)) => Some(h),
                            Ok(Err(e)) => note(&first_error, format!("{e:#}")),
                            Err(_) => note(&first_error, format!("not open after {OPEN_BOUND:?}")),
                        }
                    }
                })
                .buffer_unordered(parallel)
                .filter_map(|h| async move { h })
                .collect()
                .await
        }
        IdleKind::QuicH3 => {
            let tls = tls::client_config(&trust, &[tls::ALPN_H3])?;
            let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
                .context("TLS configuration unusable for QUIC")?;
            let mut transport = quinn::TransportConfig::default();
            // The client keeps the path alive (quic-go, caddy's QUIC, sends no PING of its
            // own and would drop a quiet connection at its 30 s idle timeout); the
            // application stays quiet.
            transport.keep_alive_interval(Some(Duration::from_secs(10)));
            transport.max_idle_timeout(Some(quinn::IdleTimeout::from(quinn::VarInt::from_u32(600_000))));
            let mut config = quinn::ClientConfig::new(Arc::new(crypto));
            config.transport_config(Arc::new(transport));
            let endpoint = gearbox_dataplane::transport::quic_endpoint("127.0.0.1:0".parse()?, None)
                .context("cannot open the bench's QUIC endpoint")?;
            udp_port = endpoint.local_addr().ok().map(|a| a.port());
            futures::stream::iter(0..count)
                .map(|_| {
                    let (endpoint, config, alive, first_error, closes) = (
                        endpoint.clone(),
                        config.clone(),
                        alive.clone(),
                        first_error.clone(),
                        closes.clone(),
                    );
                    async move {
                        match tokio::time::timeout(OPEN_BOUND, open_h3(&endpoint, config, addr, alive, closes)).await {
                            Ok(Ok(h)) => Some(h),
                            Ok(Err(e)) => note(&first_error, format!("{e:#}")),
                            Err(_) => note(&first_error, format!("not open after {OPEN_BOUND:?}")),
                        }
                    }
                })
                .buffer_unordered(parallel)
                .filter_map(|h| async move { h })
                .collect()
                .await
        }
    };
    let first_error = first_error.lock().unwrap_or_else(|p| p.into_inner()).take();
    Ok(IdleSet {
        alive,
        failed: (count - holders.len()) as u64,
        holders,
        first_error,
        open_s: started.elapsed().as_secs_f64(),
        closes,
        udp_port,
    })
}

fn note(first: &Mutex<Option<String>>, e: String) -> Option<Holder> {
    first.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
    None
}

async fn open_h2(
    connector: &tokio_rustls::TlsConnector,
    addr: SocketAddr,
    alive: Arc<AtomicU64>,
    closes: Arc<Mutex<BTreeMap<String, u64>>>,
) -> anyhow::Result<Holder> {
    let tcp = tokio::net::TcpStream::connect(addr).await.context("TCP connect")?;
    let name = rustls::pki_types::ServerName::try_from("localhost")?;
    let tls = connector.connect(name, tcp).await.context("TLS handshake")?;
    let (send, conn) = h2::client::handshake(tls).await.context("HTTP/2 preface")?;
    alive.fetch_add(1, Ordering::Relaxed);
    let task = tokio::spawn(async move {
        // Answers PINGs and SETTINGS until the server closes the connection.
        let cause = match conn.await {
            Ok(()) => "the server closed it".to_string(),
            Err(e) => format!("the server closed it ({e})"),
        };
        alive.fetch_sub(1, Ordering::Relaxed);
        count_close(&closes, cause);
    });
    Ok(Holder::H2(send, task))
}

async fn open_h3(
    endpoint: &quinn::Endpoint,
    config: quinn::ClientConfig,
    addr: SocketAddr,
    alive: Arc<AtomicU64>,
    closes: Arc<Mutex<BTreeMap<String, u64>>>,
) -> anyhow::Result<Holder> {
    let conn = endpoint
        .connect_with(config, addr, "localhost")?
        .await
        .context("QUIC handshake")?;
    let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn.clone()))
        .await
        .context("HTTP/3 set-up")?;
    alive.fetch_add(1, Ordering::Relaxed);
    let quic = conn.clone();
    let task = tokio::spawn(async move {
        let _ = driver.wait_idle().await;
        alive.fetch_sub(1, Ordering::Relaxed);
        let cause = quic
            .close_reason()
            .map_or_else(|| "the HTTP/3 driver ended".into(), |e| quic_close_cause(&e));
        count_close(&closes, cause);
    });
    Ok(Holder::H3(conn, send, task))
}
