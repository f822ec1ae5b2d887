//! `gearbox edge`: the edge server. HTTPS over the kernel's TCP (TLS 1.3, ALPN h2
//! and http/1.1, served by hyper) and HTTP/3 over QUIC (quinn + h3), on the same
//! port number by default, advertising h3 with `Alt-Svc`.
//!
//! Every request leaves one [`EdgeRecord`](gearbox_dataplane::telemetry::EdgeRecord)
//! with the server time until its last byte was acknowledged and a snapshot of the
//! connection's transport state. New connections ask the [`ConnectionGears`] for
//! their congestion controller and initial window: the decision points where the Floo
//! and TCP WISE gears plug in (docs/architecture.md, "The parts").

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gearbox_dataplane::telemetry::TelemetrySink;
use gearbox_dataplane::tls::{self, TlsError};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub mod config;
pub mod control;
pub mod floo;
pub mod h3_ack;
pub mod iw_route;
pub mod limits;
pub mod live;
pub mod metrics;
pub mod policy;
pub mod service;
pub mod tcpwise;

mod admin;
mod quic;
mod quic_runtime;
mod tcp;

pub use config::{ConfigError, EdgeConfig};
pub use limits::{Limits, MemoryBound};
pub use live::{CcControl, LiveConnections, LiveSummary, SwitchError};
pub use metrics::Metrics;
pub use policy::{ConnectionGears, QuicChoice, StaticCca, StaticInitialWindow};
pub use quic_runtime::QUIC_THREAD_NAME;

/// How long in-flight requests get to finish after a shutdown signal.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// How long a connection that was sent GOAWAY at shutdown (and, on QUIC, at its idle
/// timeout) waits, with no request in progress, for requests already on their way.
pub(crate) const GOAWAY_LINGER: Duration = Duration::from_millis(500);

/// How a TLS or QUIC handshake bounded by [`bounded_handshake`] ended.
pub(crate) enum Handshake<T> {
    /// It finished (successfully or not) within the handshake timeout.
    Done(T),
    /// `handshake_timeout_ms` passed first.
    TimedOut,
    /// The edge began shutting down first. A connection still in its handshake carries
    /// no request, so nothing is lost by dropping it; waiting would hold the shutdown up
    /// until the handshake timeout whenever a client abandons a handshake (a race's
    /// losing dial, a client gone away).
    ShutDown,
}

/// Runs a handshake until it ends, `limit` passes, or `cancel` (the edge's shutdown) fires.
pub(crate) async fn bounded_handshake<F: Future>(
    handshake: F,
    limit: Duration,
    cancel: &CancellationToken,
) -> Handshake<F::Output> {
    tokio::select! {
        r = tokio::time::timeout(limit, handshake) => match r {
            Ok(out) => Handshake::Done(out),
            Err(_) => Handshake::TimedOut,
        },
        _ = cancel.cancelled() => Handshake::ShutDown,
    }
}

/// Why the edge cannot start.
#[derive(Debug, thiserror::Error)]
pub enum EdgeError {
    /// Bad configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Certificate or key problem.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// A listen address cannot be bound.
    #[error("cannot listen on {addr} ({what}): {reason}")]
    Bind {
        /// Which listener ("TCP", "QUIC/UDP", "admin").
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Why, in words.
        reason: String,
    },
    /// The configured kernel TCP controller cannot be used (e.g. Westwood+ without the
    /// root or BTF its BPF program needs).
    #[error("--tcp-cc {cc}: {reason}")]
    TcpCc {
        /// The controller asked for.
        cc: gearbox_cc::TcpCc,
        /// Why, with what the kernel offers.
        reason: String,
    },
    /// The Cwnd Table cannot be used.
    #[error("--cwnd-table {0}")]
    CwndTable(#[from] gearbox_gears::tcpwise::TableError),
    /// The control plane's settings, spool or policies folder cannot be used.
    #[error(transparent)]
    Control(#[from] gearbox_dataplane::control::ControlError),
    /// The telemetry file cannot be opened.
    #[error("cannot open telemetry file {path}: {source}")]
    Telemetry {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Fails at start, not at the first connection, when the configured kernel TCP
/// controller cannot be set (Westwood+ is registered here, for the edge's lifetime).
fn check_tcp_cc(cc: gearbox_cc::TcpCc) -> Result<(), EdgeError> {
    let probe =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).map_err(|e| EdgeError::TcpCc {
            cc,
            reason: format!("cannot open a socket to check it: {e}"),
        })?;
    cc.apply(&socket2::SockRef::from(&probe)).map_err(|e| EdgeError::TcpCc {
        cc,
        reason: if e.kind() == std::io::ErrorKind::NotFound {
            format!(
                "the kernel does not offer it; it offers: {}",
                gearbox_cc::kernel::available()
            )
        } else {
            e.to_string()
        },
    })
}

/// A listener on an `IPPROTO_MPTCP` socket (the edge's `mptcp` setting): the kernel
/// accepts MPTCP connections and their subflows on it, and plain TCP from clients that
/// do not ask for MPTCP.
fn mptcp_listener(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::MPTCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    tokio::net::TcpListener::from_std(socket.into())
}

fn bind_error(what: &'static str, addr: SocketAddr, e: &std::io::Error) -> EdgeError {
    let reason = match e.kind() {
        std::io::ErrorKind::AddrInUse => "the port is already in use; choose another with --listen".to_string(),
        std::io::ErrorKind::PermissionDenied => "permission denied (ports below 1024 need root)".to_string(),
        _ => e.to_string(),
    };
    EdgeError::Bind { what, addr, reason }
}

/// State shared by every connection of an edge.
pub struct Shared {
    /// The configuration it runs with.
    pub config: EdgeConfig,
    /// Where request records go.
    pub telemetry: TelemetrySink,
    /// Counters for `/metrics`.
    pub metrics: Arc<Metrics>,
    /// Per-connection gears.
    pub gears: ConnectionGears,
    /// Reverse proxy, when an upstream is configured.
    pub proxy: Option<service::Proxy>,
    /// `Alt-Svc` value sent on TCP responses.
    pub alt_svc: Option<http::HeaderValue>,
    next_conn_id: AtomicU64,
    tls_tcp: tokio_rustls::TlsAcceptor,
    quic_crypto: Arc<quinn::crypto::rustls::QuicServerConfig>,
    /// Server configs of connections running quinn's built-in controllers, one per
    /// choice (the suite's controllers get a config of their own per connection).
    quic_configs: Mutex<HashMap<QuicChoice, Arc<quinn::ServerConfig>>>,
    /// Parameters of the suite's controllers.
    cc_config: Arc<gearbox_cc::CcConfig>,
    /// Live connections and their controllers, for switching.
    pub live: Arc<LiveConnections>,
    /// In-flight connections, requests and record writers; shutdown waits for them.
    tracker: TaskTracker,
    /// TCP WISE's Cwnd Table and kernel program, with `--cwnd-table`.
    pub tcp_iw: Option<Arc<tcpwise::TcpWise>>,
    /// Open connections, in total and per client address (`limits.max_connections*`).
    pub(crate) connections: Arc<limits::ConnectionCap>,
    /// The budget of request bodies held whole (`limits.body_memory_bytes`).
    pub(crate) body_memory: limits::BodyMemory,
}

impl Shared {
    fn conn_id(&self) -> u64 {
        self.next_conn_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The quinn server config for a choice and the handle of its controller. The
    /// suite's controllers get a factory of their own per connection, so each answers
    /// to its own [`gearbox_cc::SwitchHandle`]; quinn's built-ins share one config per
    /// distinct choice.
    fn quic_config(
        &self,
        choice: &QuicChoice,
    ) -> Result<(Arc<quinn::ServerConfig>, CcControl), gearbox_cc::InvalidParameter> {
        if let gearbox_cc::QuicCc::Suite(_) = choice.cc {
            let handle = gearbox_cc::SwitchHandle::new();
            let factory = choice
                .cc
                .factory_with(&self.cc_config, choice.initial_window_packets, handle.clone())?;
            let config = quic_server_config(&self.quic_crypto, factory, &self.config);
            return Ok((Arc::new(config), CcControl::Quic(handle)));
        }
        let mut cache = self.quic_configs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = cache.get(choice) {
            return Ok((c.clone(), CcControl::QuinnBuiltIn(choice.cc)));
        }
        let factory = choice.cc.factory(choice.initial_window_packets)?;
        let config = Arc::new(quic_server_config(&self.quic_crypto, factory, &self.config));
        cache.insert(choice.clone(), config.clone());
        Ok((config, CcControl::QuinnBuiltIn(choice.cc)))
    }
}

fn quic_server_config(
    crypto: &Arc<quinn::crypto::rustls::QuicServerConfig>,
    factory: Arc<dyn quinn::congestion::ControllerFactory + Send + Sync>,
    config: &EdgeConfig,
) -> quinn::ServerConfig {
    let limits = &config.limits;
    let mut transport = quinn::TransportConfig::default();
    transport
        .congestion_controller_factory(factory)
        // Stream credit: a client cannot open more requests than this at once.
        .max_concurrent_bidi_streams(limits.max_streams_per_connection.into())
        .keep_alive_interval(Some(Duration::from_millis(limits.keep_alive_interval_ms)))
        // Memory per connection (docs/edge.md "Memory"): response bytes held until
        // acknowledged, and request bytes held until read. Validated at start.
        .send_window(limits.quic_send_window_bytes)
        .stream_receive_window(
            quinn::VarInt::from_u64(limits.quic_stream_receive_window_bytes).unwrap_or(quinn::VarInt::MAX),
        )
        .receive_window(quinn::VarInt::from_u64(limits.quic_receive_window_bytes).unwrap_or(quinn::VarInt::MAX))
        .max_idle_timeout(quinn::IdleTimeout::try_from(Duration::from_millis(config.idle_timeout_ms)).ok());
    let mut sc = quinn::ServerConfig::with_crypto(crypto.clone());
    sc.transport_config(Arc::new(transport));
    sc
}

/// A bound, not yet serving, edge.
pub struct Edge {
    shared: Arc<Shared>,
    tcp: tokio::net::TcpListener,
    quic: quinn::Endpoint,
    /// The threads quinn's drivers run on (the QUIC socket's reads among them).
    quic_runtime: quic_runtime::QuicRuntime,
    admin: Option<tokio::net::TcpListener>,
    /// The control plane's policy poller, with `[control].policies`.
    poller: Option<gearbox_dataplane::control::PolicyPoller>,
}

impl Edge {
    /// Validates the config, loads the certificate and binds every listener.
    /// Must be called inside a tokio runtime.
    pub async fn bind(config: EdgeConfig, mut gears: ConnectionGears) -> Result<Edge, EdgeError> {
        config.validate()?;
        if let Some(cc) = config.tcp_cc {
            check_tcp_cc(cc)?;
        }
        let certs = tls::load_certs(&config.cert)?;
        let key = tls::load_key(&config.key)?;
        let tcp_tls = tls::server_config(certs.clone(), key.clone_key(), &tls::ALPN_TCP)?;
        let quic_tls = tls::server_config(certs, key, &[tls::ALPN_H3])?;
        let quic_crypto = Arc::new(
            quinn::crypto::rustls::QuicServerConfig::try_from(quic_tls)
                .map_err(|e| TlsError::Rustls(rustls::Error::General(e.to_string())))?,
        );

        let tcp = if config.mptcp {
            mptcp_listener(config.listen).map_err(|e| bind_error("MPTCP", config.listen, &e))?
        } else {
            tokio::net::TcpListener::bind(config.listen)
                .await
                .map_err(|e| bind_error("TCP", config.listen, &e))?
        };
        let tcp_addr = tcp.local_addr().map_err(|e| bind_error("TCP", config.listen, &e))?;
        let tcp_iw = match control::cwnd_table(&config) {
            Some(path) => {
                let t = control::start_tcpwise(&config, path, &tcp)?;
                gears.set_initial_window(Box::new(gearbox_gears::tcpwise::TcpWiseGear::new(
                    t.table(),
                    gearbox_dataplane::telemetry::unix_ms_now().to_bits(),
                )));
                tcpwise::TcpWise::spawn_reloader(&t);
                Some(t)
            }
            None => None,
        };
        let mut quic_addr = config.quic_addr();
        if config.quic_listen.is_none() {
            quic_addr.set_port(tcp_addr.port());
        }
        let admin = match config.admin_listen {
            Some(a) => Some(
                tokio::net::TcpListener::bind(a)
                    .await
                    .map_err(|e| bind_error("admin", a, &e))?,
            ),
            None => None,
        };
        let telemetry = match (&config.telemetry, &config.control) {
            (Some(p), None) => TelemetrySink::to_file(p).map_err(|source| EdgeError::Telemetry {
                path: p.clone(),
                source,
            })?,
            (None, None) => TelemetrySink::disabled(),
            (file, Some(c)) => TelemetrySink::open(file.as_deref(), Some(c))?,
        };
        let poller = control::poller(&config, tcp_iw.clone())?;
        let proxy = config
            .upstream
            .as_deref()
            .and_then(|u| service::Proxy::new(u, &config.limits));
        // Every accepted connection gets its own gears' config; this one is never used.
        let default_factory = config
            .cc
            .factory(config.initial_window)
            .map_err(|e| ConfigError::Invalid {
                field: "initial_window",
                message: e.reason,
            })?;
        // The endpoint's socket and drivers live on threads of their own, so that TCP
        // work cannot keep the socket unread (crate::quic_runtime).
        let quic_threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let quic_runtime =
            quic_runtime::QuicRuntime::start(quic_threads).map_err(|e| bind_error("QUIC runtime", quic_addr, &e))?;
        let quic = gearbox_dataplane::transport::quic_udp_socket_sized(
            quic_addr,
            gearbox_dataplane::transport::SERVER_UDP_BUFFER_BYTES,
        )
        .and_then(|socket| {
            quinn::Endpoint::new(
                quinn::EndpointConfig::default(),
                Some(quic_server_config(&quic_crypto, default_factory, &config)),
                socket,
                quic_runtime.quinn(),
            )
        })
        .map_err(|e| bind_error("QUIC/UDP", quic_addr, &e))?;
        let quic_port = quic.local_addr().map(|a| a.port()).unwrap_or(quic_addr.port());
        let alt_svc = config
            .alt_svc
            .then(|| http::HeaderValue::from_str(&format!("h3=\":{quic_port}\"; ma=86400")).ok())
            .flatten();
        let switch_counts = Arc::new(live::SwitchCounts::default());
        let live = Arc::new(LiveConnections::new(telemetry.clone(), switch_counts.clone()));
        let metrics = Arc::new(Metrics::default());
        metrics.set_switch_counts(switch_counts);
        let shared = Arc::new(Shared {
            connections: limits::ConnectionCap::new(&config.limits),
            body_memory: limits::BodyMemory::new(config.limits.body_memory_bytes),
            cc_config: Arc::new(config.congestion.clone()),
            live,
            alt_svc,
            config,
            telemetry,
            metrics,
            gears,
            proxy,
            next_conn_id: AtomicU64::new(1),
            tls_tcp: tokio_rustls::TlsAcceptor::from(Arc::new(tcp_tls)),
            quic_crypto,
            quic_configs: Mutex::new(HashMap::new()),
            tracker: TaskTracker::new(),
            tcp_iw,
        });
        Ok(Edge {
            shared,
            tcp,
            quic,
            quic_runtime,
            admin,
            poller,
        })
    }

    /// The TCP (h2, http/1.1) address.
    pub fn tcp_addr(&self) -> SocketAddr {
        self.tcp.local_addr().unwrap_or(self.shared.config.listen)
    }

    /// The QUIC (h3) address.
    pub fn quic_addr(&self) -> SocketAddr {
        self.quic.local_addr().unwrap_or(self.shared.config.quic_addr())
    }

    /// The admin (`/metrics`) address, if any.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().and_then(|a| a.local_addr().ok())
    }

    /// The control plane's policy poller (with `[control].policies`), to which a gear
    /// built outside the edge (Floo's, by `gearbox edge`) adds its loader before serving.
    pub fn policies(&mut self) -> Option<&mut gearbox_dataplane::control::PolicyPoller> {
        self.poller.as_mut()
    }

    /// The bound on the edge's buffered memory its `[limits]` imply (docs/edge.md "Memory").
    pub fn memory_bound(&self) -> MemoryBound {
        self.shared.config.limits.memory_bound()
    }

    /// The edge's counters.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.shared.metrics.clone()
    }

    /// The edge's live connections, through which a gear switches a running
    /// connection's congestion controller.
    pub fn live(&self) -> Arc<LiveConnections> {
        self.shared.live.clone()
    }

    /// Serves until `shutdown` completes, then stops accepting, lets in-flight
    /// requests finish (up to [`SHUTDOWN_GRACE`]) and flushes telemetry.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let cancel = CancellationToken::new();
        let Edge {
            shared,
            tcp,
            quic,
            quic_runtime,
            admin,
            poller,
        } = self;
        let poll_task = poller.map(gearbox_dataplane::control::PolicyPoller::spawn);
        let tcp_task = tokio::spawn(tcp::accept_loop(shared.clone(), tcp, cancel.clone()));
        let quic_task = tokio::spawn(quic::accept_loop(shared.clone(), quic.clone(), cancel.clone()));
        let floo_task = shared
            .gears
            .take_period_gear()
            .map(|pg| tokio::spawn(floo::run(shared.clone(), pg, cancel.clone())));
        let admin_task = admin.map(|a| {
            tokio::spawn(admin::serve(
                shared.metrics.clone(),
                shared.live.clone(),
                a,
                Duration::from_millis(shared.config.limits.admin_header_timeout_ms),
                cancel.clone(),
            ))
        });
        shutdown.await;
        tracing::info!("shutting down: finishing in-flight requests");
        cancel.cancel();
        let _ = tcp_task.await;
        let _ = quic_task.await;
        if let Some(t) = floo_task {
            let _ = t.await;
        }
        tracing::debug!("shutdown: accepting stopped");
        shared.tracker.close();
        if tokio::time::timeout(SHUTDOWN_GRACE, shared.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!("requests still running after {SHUTDOWN_GRACE:?}; stopping anyway");
        }
        tracing::debug!("shutdown: connections ended");
        quic.close(0u32.into(), b"edge shutting down");
        let _ = tokio::time::timeout(Duration::from_secs(2), quic.wait_idle()).await;
        tracing::debug!("shutdown: QUIC endpoint idle");
        if let Some(t) = admin_task {
            let _ = t.await;
        }
        if let Some(t) = poll_task {
            t.abort();
        }
        if let Some(t) = &shared.tcp_iw {
            // Routes the route fallback changed go back as they were found.
            t.restore_routes();
        }
        shared.telemetry.finish().await;
        tracing::debug!("shutdown: telemetry flushed");
        drop(quic_runtime);
    }
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
        (Ok(mut int), Ok(mut term)) => {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
