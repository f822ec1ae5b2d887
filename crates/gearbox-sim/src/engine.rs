//! The discrete-event loop: two quinn-proto endpoints, two links, one workload.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::{SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use gearbox_cc::{CcConfig, Cca, QuicCc, SwitchHandle, SwitchMode};
use gearbox_gear_api::{
    AcceptedConnection, CcaPeriodGear, ClientRecord, ConnectionStats, InitialWindowGear, IwChoice, Protocol, Side,
    Transport, TransportSnapshot, SCHEMA_VERSION,
};
use gearbox_link::Link;
use gearbox_workload::{Limit, Request, WorkloadSpec};
use quinn_proto::{
    ClientConfig, Connection, ConnectionHandle, DatagramEvent, Dir, Endpoint, EndpointConfig, Event, ServerConfig,
    StreamEvent, StreamId, TransportConfig, WriteError,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::null_crypto::{NullClientConfig, NullServerConfig};
use crate::packet;
use crate::paths::{PathView, WorkloadPaths};
use crate::{population_addr, population_prefix, PacketProtection, SimConfig};

/// Why a simulation cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The config file is wrong; the message names the field.
    #[error("{file}: {message}")]
    Config {
        /// The file.
        file: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Setting up the endpoints failed (certificate, TLS, QUIC config).
    #[error("simulator set-up: {0}")]
    Setup(String),
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct SimOutcome {
    /// One JSON line per request (client records with `source = "sim"`), in completion
    /// order.
    pub records: Vec<String>,
    /// Requests the workload asked for.
    pub requests: usize,
    /// Requests that completed.
    pub completed: usize,
    /// Simulated time the run covered.
    pub simulated: Duration,
    /// Packets the two links carried (delivered).
    pub packets: u64,
    /// Every link's counters at the end, as the emulator's relay reports them:
    /// (path index, `"down"` or `"up"`, counters).
    pub links: Vec<(usize, &'static str, gearbox_link::LinkStats)>,
    /// Set when the run hit its virtual-time limit with requests unfinished.
    pub timed_out: bool,
}

const SERVER: SocketAddrV4 = SocketAddrV4::new(std::net::Ipv4Addr::new(10, 0, 0, 1), 4433);
/// The client's address on path `p` (path 0 is the single-path client's).
pub(crate) fn client_ip(path: usize) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::new(10, 0, path as u8, 2)
}
const SERVER_NAME: &str = "sim.gearbox.invalid";
const ALPN: &[u8] = b"gearbox-sim";

/// One request in flight or done, on the client.
pub(crate) struct Pending {
    pub(crate) req: Request,
    pub(crate) conn: usize,
    stream: Option<StreamId>,
    written: u64,
    sent_at: Option<Duration>,
    first_byte_at: Option<Duration>,
    pub(crate) received: u64,
    new_connection: bool,
    /// The path a multipath client chose for it and the rule's reason (its record's
    /// `path_index` and `path_decision`); None on a single path or a population.
    pub(crate) path_choice: Option<(usize, String)>,
}

impl Pending {
    pub(crate) fn new(req: Request) -> Pending {
        Pending {
            req,
            conn: 0,
            stream: None,
            written: 0,
            sent_at: None,
            first_byte_at: None,
            received: 0,
            new_connection: false,
            path_choice: None,
        }
    }
}

/// A client connection and what it knows about its handshake.
pub(crate) struct ClientConn {
    handle: ConnectionHandle,
    /// The QUIC connection; dropped once it has drained with nothing left to send (a
    /// run of `search` opens a connection per request, and each kept ~100 KB).
    conn: Option<Connection>,
    started: Duration,
    connected: Option<Duration>,
    /// Requests waiting for a stream.
    waiting: VecDeque<usize>,
    /// Requests with a stream and request bytes still to write (so an event costs the
    /// requests in flight, not every request of the run).
    writing: Vec<usize>,
    local: SocketAddrV4,
    /// The path it runs on (a population's prefix).
    pub(crate) path: usize,
    /// A population's client address it belongs to (prefix-major index).
    addr: Option<u32>,
    /// Requests with a stream, by stream (a response's bytes find their request without
    /// a scan of the run's requests).
    streams: HashMap<StreamId, usize>,
    /// Its timer deadline as last armed in [`Sim::timers`].
    timer: Option<Instant>,
}

impl ClientConn {
    /// A reading of its statistics for a path monitor.
    pub(crate) fn sample(&self) -> gearbox_gear_api::PathSample {
        let s = self.conn.as_ref().map(Connection::stats).unwrap_or_default();
        gearbox_gear_api::PathSample {
            srtt_ms: s.path.rtt.as_secs_f64() * 1e3,
            min_rtt_ms: s.path.min_rtt.as_secs_f64() * 1e3,
            cwnd_bytes: s.path.cwnd,
            sent_packets: s.path.sent_packets,
            lost_packets: s.path.lost_packets,
            rx_bytes: s.udp_rx.bytes,
        }
    }

    /// Whether its handshake finished and it is still open.
    pub(crate) fn is_connected(&self) -> bool {
        self.connected.is_some() && !self.closed()
    }

    /// Whether it closed (or drained and was dropped).
    pub(crate) fn closed(&self) -> bool {
        self.conn.as_ref().is_none_or(Connection::is_closed)
    }
}

/// One path's pair of links.
pub(crate) struct PathLinks {
    pub(crate) down: Link<BytesMut>,
    pub(crate) up: Link<BytesMut>,
}

/// A server-side response being written.
struct Response {
    remaining: u64,
    header: Vec<u8>,
    finished_reading: bool,
    /// When the request was read whole: the response is generated then (Floo §3.2:
    /// Qws runs from here until its last byte is in QUIC's send buffer).
    ready_at: Option<Duration>,
}

struct ServerConn {
    conn: Connection,
    /// Per stream: bytes of the request read so far (the first 8 say the response size).
    streams: BTreeMap<StreamId, Response>,
    /// Index of the connection in accept order (on one path handshakes arrive in order,
    /// so it is the client connection's index; in a population they do not).
    index: usize,
    /// The client connection it serves (found by the client's address and port).
    client: Option<usize>,
    /// The controller's handle, for the suite's controllers (quinn's cannot switch).
    handle: Option<SwitchHandle>,
    /// Counters at the previous monitor read: (time, sent, lost, delivered bytes).
    last: (Duration, u64, u64, u64),
    /// Response waits (Qws, ms) of the responses written whole since the previous
    /// monitor read.
    period_waits: Vec<f64>,
    /// Mean wait of the previous period that had one, ms (for Qws's gradient).
    last_wait_ms: Option<f64>,
    /// Its timer deadline as last armed in [`Sim::timers`].
    timer: Option<Instant>,
}

/// Connections to handle at this instant, handed out in ascending order with each once
/// (what a `BTreeSet` gives, without a tree node per insert: the set is refilled at
/// every pass of every instant).
#[derive(Debug)]
struct DueSet<T>(Vec<T>);

impl<T> Default for DueSet<T> {
    fn default() -> Self {
        DueSet(Vec::new())
    }
}

impl<T: Ord + Copy> DueSet<T> {
    fn insert(&mut self, t: T) {
        self.0.push(t);
    }

    /// The members, ascending.
    fn sorted(&mut self) -> &[T] {
        self.0.sort_unstable();
        self.0.dedup();
        &self.0
    }

    /// Empties the set; its members, ascending.
    fn take(&mut self) -> Vec<T> {
        self.sorted();
        std::mem::take(&mut self.0)
    }
}

/// Whose timer a [`Sim::timers`] entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Owner {
    Client(usize),
    Server(ConnectionHandle),
}

fn setup_error(e: impl std::fmt::Display) -> SimError {
    SimError::Setup(e.to_string())
}

/// A fresh self-signed Ed25519 certificate for [`SERVER_NAME`] and its key, of the
/// same size in every run, so that every run's handshake has the same packet sizes
/// (and a seed gives the same records): Ed25519's keys and signatures have fixed sizes,
/// and the serial number is set. Left to rcgen, the serial is 20 bytes of the key's
/// hash with the top bit cleared, and DER drops a leading zero byte, so one key in
/// 128 gave a certificate a byte shorter, a server window a byte smaller and two runs
/// of one seed different records.
fn server_certificate() -> Result<(CertificateDer<'static>, PrivateKeyDer<'static>), SimError> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).map_err(setup_error)?;
    let mut params = rcgen::CertificateParams::new(vec![SERVER_NAME.to_string()]).map_err(setup_error)?;
    params.serial_number = Some(rcgen::SerialNumber::from(1u64));
    let cert = params.self_signed(&key).map_err(setup_error)?;
    Ok((cert.der().clone(), PrivateKeyDer::Pkcs8(key.serialize_der().into())))
}

/// Server and client QUIC configs: a fresh certificate of a fixed size
/// ([`server_certificate`]), the run's controller and initial window on both ends.
fn quic_configs(
    config: &SimConfig,
) -> Result<(Arc<dyn quinn_proto::crypto::ServerConfig>, ClientConfig, Factory), SimError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let (cert_der, key_der) = server_certificate()?;

    let mut server_tls = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(setup_error)?
        .with_no_client_auth()
        .with_single_cert(vec![cert_der.clone()], key_der)
        .map_err(setup_error)?;
    server_tls.alpn_protocols = vec![ALPN.to_vec()];
    server_tls.max_early_data_size = 0;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert_der).map_err(setup_error)?;
    let mut client_tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(setup_error)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    client_tls.alpn_protocols = vec![ALPN.to_vec()];

    let cc = config.quic_cc().map_err(setup_error)?;
    let server_crypto: Arc<dyn quinn_proto::crypto::ServerConfig> =
        Arc::new(quinn_proto::crypto::rustls::QuicServerConfig::try_from(server_tls).map_err(setup_error)?);
    let client_crypto: Arc<dyn quinn_proto::crypto::ClientConfig> =
        Arc::new(quinn_proto::crypto::rustls::QuicClientConfig::try_from(client_tls).map_err(setup_error)?);
    let (server_crypto, client_crypto) = match config.packet_protection {
        PacketProtection::Tls => (server_crypto, client_crypto),
        PacketProtection::Null => (
            Arc::new(NullServerConfig(server_crypto)) as Arc<dyn quinn_proto::crypto::ServerConfig>,
            Arc::new(NullClientConfig(client_crypto)) as Arc<dyn quinn_proto::crypto::ClientConfig>,
        ),
    };
    let factory = cc.factory(None).map_err(setup_error)?;
    let mut client = ClientConfig::new(client_crypto);
    client.transport_config(transport(factory.clone(), None));
    Ok((server_crypto, client, factory))
}

/// A congestion controller factory of quinn-proto's.
type Factory = Arc<dyn quinn_proto::congestion::ControllerFactory + Send + Sync>;

/// The transport config both ends use, with `factory`'s controller and, where asked, a
/// qlog stream of the connection's events.
fn transport(factory: Factory, qlog: Option<quinn_proto::QlogStream>) -> Arc<TransportConfig> {
    let mut t = TransportConfig::default();
    t.congestion_controller_factory(factory)
        .max_concurrent_bidi_streams(1024u32.into())
        .qlog_stream(qlog);
    Arc::new(t)
}

fn seed_bytes(seed: u64, salt: u8) -> [u8; 32] {
    let mut s = [salt; 32];
    s[..8].copy_from_slice(&seed.to_le_bytes());
    s
}

/// The simulator's state.
pub(crate) struct Sim {
    base: Instant,
    pub(crate) now: Duration,
    /// Every path's links, in path order (one for a single-path client).
    pub(crate) paths: Vec<PathLinks>,
    /// The links' clock at simulated time zero ([`SimConfig::link_offset_s`]): a link
    /// is handed `now + link_offset`.
    link_offset: Duration,
    /// Each path's current client connection (an index into `clients`).
    pub(crate) path_conn: Vec<Option<usize>>,
    client: Endpoint,
    server: Endpoint,
    client_config: ClientConfig,
    /// The client's controller, for a connection that needs a config of its own (qlog).
    client_factory: Factory,
    /// Where each connection's qlog goes ([`SimConfig::qlog_dir`]).
    qlog_dir: Option<std::path::PathBuf>,
    /// A server connection's qlog file could not be made.
    qlog_error: Option<SimError>,
    /// The server's TLS, the controller and its initial window: each accepted
    /// connection gets its own config, so each suite controller its own handle.
    server_crypto: Arc<dyn quinn_proto::crypto::ServerConfig>,
    cc: QuicCc,
    cc_config: Arc<CcConfig>,
    initial_window: Option<u32>,
    /// Chooses each accepted connection's initial window, as the edge's QUIC gear does
    /// at accept (TCP WISE §IV-A); `None`: every connection gets `initial_window`.
    iw_gear: Option<Box<dyn InitialWindowGear>>,
    /// The gear's choice per client connection, for its records' `iw` object.
    iw_choices: HashMap<usize, IwChoice>,
    /// The client connection of each client address and port (the latest one), so an
    /// accepted connection knows whom it serves.
    client_by_addr: HashMap<SocketAddrV4, usize>,
    /// The server connection of each client connection.
    server_of: HashMap<usize, ConnectionHandle>,
    accepted: usize,
    pub(crate) clients: Vec<ClientConn>,
    by_handle: HashMap<ConnectionHandle, usize>,
    /// Server connections by handle (ordered, so that connections due at one instant
    /// are handled in the same order in every run).
    servers: BTreeMap<ConnectionHandle, ServerConn>,
    /// A population's hosts per prefix (`None`: a single or multipath client).
    hosts_per_prefix: Option<u32>,
    /// A population's current connection of each client address.
    addr_conn: Vec<Option<usize>>,
    /// Links that may hold packets: idle links cost nothing per event, so a population
    /// of thousands of prefixes costs what its busy ones do.
    busy: BTreeSet<usize>,
    /// Client and server connections to handle at this instant: those a datagram, a
    /// request or a due timer touched (quinn-proto's contract: poll a connection after
    /// `handle_event`, `handle_timeout` or application I/O). The others have nothing
    /// to do, so an event costs the connections it touches, not every connection of
    /// the run.
    client_due: DueSet<usize>,
    server_due: DueSet<ConnectionHandle>,
    /// Client connections that made progress at the previous pass of this instant: one
    /// of them may have closed with requests still waiting for a stream
    /// ([`Sim::reconnect_stranded`]).
    client_progressed: Vec<usize>,
    /// Every connection's armed timer deadline, earliest first: an entry is removed when
    /// its connection re-arms (the connection's `timer` says which entry is its), so the
    /// set holds one entry per connection. (A heap with stale entries grew by one entry
    /// at every re-arm, and a busy connection re-arms at almost every packet.)
    timers: BTreeSet<(Instant, Owner)>,
    /// Requests whose response bytes arrived since the last [`Sim::finish_requests`].
    arrived: Vec<usize>,
    pub(crate) pending: Vec<Pending>,
    next_request: usize,
    records: Vec<String>,
    pub(crate) completed: usize,
    /// A page load's dependency graph ([`crate::PageLoad`]); None for a workload run.
    pub(crate) graph: Option<crate::page::Graph>,
    /// The client's view of its paths (None for a population): what a path choice sees
    /// ([`crate::paths`]).
    pub(crate) path_view: Option<PathView>,
    /// How a workload run on several paths chooses each request's path (None: one path
    /// or a population).
    workload_paths: Option<WorkloadPaths>,
    cc_name: String,
    buf: Vec<u8>,
    /// Records already handed out by [`Session::take_records`].
    taken: usize,
    /// Completion times (ms) of requests finished since the previous monitor read, by
    /// client connection.
    period_rcts: HashMap<usize, Vec<f64>>,
}

/// Runs one simulation to its end (every request done, or the virtual-time limit).
pub fn run(config: &SimConfig) -> Result<SimOutcome, SimError> {
    let mut session = Session::new(config)?;
    let limit = session.limit;
    let done = session.sim.run_until(limit)?;
    let sim = session.sim;
    Ok(SimOutcome {
        requests: sim.pending.len(),
        completed: sim.completed,
        packets: sim.delivered_packets(),
        links: sim
            .paths
            .iter()
            .enumerate()
            .flat_map(|(i, p)| [(i, "down", *p.down.stats()), (i, "up", *p.up.stats())])
            .collect(),
        records: sim.records,
        simulated: sim.now,
        timed_out: !done,
    })
}

/// One server connection as a learner sees it at a decision point (Floo §3.2, Table 2),
/// over the period since the previous [`Session::monitor`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct ConnectionMonitor {
    /// Connection index (accept order; the client records' `conn_id` - 1).
    pub conn: usize,
    /// Running controller (`None` for quinn's built-ins, which the simulator cannot read).
    pub cca: Option<&'static str>,
    /// Its phase.
    pub phase: Option<&'static str>,
    /// Congestion window, bytes.
    pub cwnd_bytes: u64,
    /// Intended sending rate, bytes per second.
    pub pacing_rate: u64,
    /// Max delivery rate (bottleneck bandwidth estimate), bytes per second.
    pub max_delivery_rate: u64,
    /// Latest delivery-rate sample, bytes per second.
    pub delivery_rate: u64,
    /// Min RTT, ms.
    pub min_rtt_ms: f64,
    /// Smoothed RTT, ms.
    pub srtt_ms: f64,
    /// RTT variation, ms.
    pub rttvar_ms: f64,
    /// Bytes lost over bytes sent in the period.
    pub loss_rate: f64,
    /// Bytes acknowledged per second in the period.
    pub goodput: f64,
    /// Bytes sent in the period.
    pub bytes_sent: u64,
    /// Response bytes the server has not handed to QUIC yet.
    pub unsent_bytes: u64,
    /// Completion times of the requests on this connection that finished in the period, ms.
    pub rcts_ms: Vec<f64>,
    /// Length of the period, ms.
    pub period_ms: f64,
    /// Mean time the responses written whole in the period waited between being
    /// generated (the request read whole) and their last byte entering QUIC's send
    /// buffer, ms (Floo Table 2 `Qws`; `None` when no response finished writing).
    pub response_wait_ms: Option<f64>,
    /// Change of that mean since the previous period that had one, ms per second
    /// (`Qws_gradient`).
    pub response_wait_gradient_ms_per_s: Option<f64>,
}

impl ConnectionMonitor {
    /// The monitor as the gears see it (Floo Table 2, [`ConnectionStats`]); `None` for a
    /// connection on one of quinn's built-ins, whose state the simulator cannot read.
    pub fn stats(&self) -> Option<ConnectionStats> {
        let cca = Cca::from_name(self.cca?)?;
        let finite = |v: f64| v.is_finite().then_some(v);
        let rate = |v: u64| (v > 0).then_some(v * 8);
        Some(ConnectionStats {
            conn_id: self.conn as u64 + 1,
            transport: Transport::Quic,
            cca,
            period_ms: self.period_ms,
            max_delivery_rate_bps: rate(self.max_delivery_rate),
            min_rtt_ms: finite(self.min_rtt_ms),
            srtt_ms: finite(self.srtt_ms),
            rtt_var_ms2: finite(self.rttvar_ms).map(|v| v * v),
            loss_rate: (self.bytes_sent > 0).then_some(self.loss_rate),
            cwnd_bytes: self.cwnd_bytes,
            pacing_rate_bps: rate(self.pacing_rate),
            goodput_bps: (self.period_ms > 0.0).then_some(self.goodput * 8.0),
            unsent_bytes: self.unsent_bytes,
            response_wait_ms: self.response_wait_ms,
            response_wait_gradient_ms_per_s: self.response_wait_gradient_ms_per_s,
            bytes_sent: self.bytes_sent,
        })
    }
}

/// What a gear did over [`Session::drive`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct GearRun {
    /// Selection periods run.
    pub periods: u64,
    /// Decisions asked of the gear (one per live connection per period).
    pub decisions: u64,
    /// Switches made (decisions that changed a connection's controller).
    pub switches: u64,
}

/// A simulation a learner steps through: advance virtual time, read each connection's
/// monitor, switch a connection's controller (Floo §3.3-3.4).
pub struct Session {
    sim: Sim,
    limit: Duration,
}

impl Session {
    /// Sets a simulation up at time zero.
    pub fn new(config: &SimConfig) -> Result<Session, SimError> {
        let workload = WorkloadSpec::load(&config.workload).map_err(|e| SimError::Config {
            file: PathBuf::from(&config.workload),
            message: format!("workload: {e}"),
        })?;
        if !config.path.is_empty() && matches!(workload.pattern(), Some(gearbox_workload::Pattern::Page(_))) {
            return Err(SimError::Config {
                file: PathBuf::from(&config.workload),
                message: "workload: a page workload on several paths loads pages (`gearbox load --scheduler`); \
                          the simulator loads them one page at a time (`PageLoad`, docs/sim.md \"Page loads on \
                          several paths\"), not as a workload run"
                    .into(),
            });
        }
        let mut requests = workload.generate(
            config.workload_seed.unwrap_or(config.seed),
            Limit::DurationMs(config.duration_s * 1e3),
        );
        let scale = config.time_scale.unwrap_or(1.0);
        if scale != 1.0 {
            for r in &mut requests {
                r.send_at_ms *= scale;
            }
        }
        let mut sim = Sim::new(config, requests.into_iter().map(Pending::new).collect())?;
        if let Some(WorkloadPaths::Gear(_)) = sim.workload_paths {
            // A scheduler chooses among paths it knows: every path's connection opens at
            // time zero, as the multipath client opens its paths (SAILfish's MPQUIC opens
            // them when the connection starts).
            for p in 0..sim.paths.len() {
                sim.connect(p)?;
            }
        }
        Ok(Session {
            sim,
            limit: Duration::from_secs_f64(config.time_limit_s()),
        })
    }
    /// Simulated time now.
    pub fn now(&self) -> Duration {
        self.sim.now
    }

    /// Whether every request is done or the virtual-time limit is reached.
    pub fn finished(&self) -> bool {
        self.sim.completed == self.sim.pending.len() || self.sim.now >= self.limit
    }

    /// Requests of the workload not done (yet; once finished, those the virtual-time limit
    /// cut off, which have no record).
    pub fn unfinished(&self) -> usize {
        self.sim.pending.len() - self.sim.completed
    }

    /// Runs `dt` of simulated time (less at the limit, or when every request is done).
    /// Returns [`Session::finished`].
    pub fn advance(&mut self, dt: Duration) -> Result<bool, SimError> {
        let target = (self.sim.now + dt).min(self.limit);
        self.sim.run_until(target)?;
        Ok(self.finished())
    }

    /// Every live server connection's monitor over the period since the previous call.
    pub fn monitor(&mut self) -> Vec<ConnectionMonitor> {
        let now = self.sim.now;
        let mut rcts = std::mem::take(&mut self.sim.period_rcts);
        let ms = |d: Duration| {
            if d == Duration::MAX {
                f64::NAN
            } else {
                d.as_secs_f64() * 1e3
            }
        };
        let mut out: Vec<ConnectionMonitor> = self
            .sim
            .servers
            .values_mut()
            .map(|s| {
                let status = s.handle.as_ref().and_then(|h| h.status());
                let stats = s.conn.stats();
                let (sent, lost, delivered) = match &status {
                    Some(st) => (st.path.sent, st.path.lost, st.path.delivered),
                    None => (stats.udp_tx.bytes, stats.path.lost_bytes, 0),
                };
                let (t0, s0, l0, d0) = s.last;
                s.last = (now, sent, lost, delivered);
                let dt = now.saturating_sub(t0).as_secs_f64();
                let sent_p = sent.saturating_sub(s0);
                let waits = std::mem::take(&mut s.period_waits);
                let wait = (!waits.is_empty()).then(|| waits.iter().sum::<f64>() / waits.len() as f64);
                let gradient = match (wait, s.last_wait_ms) {
                    (Some(w), Some(prev)) if dt > 0.0 => Some((w - prev) / dt),
                    _ => None,
                };
                if wait.is_some() {
                    s.last_wait_ms = wait;
                }
                ConnectionMonitor {
                    conn: s.index,
                    cca: status.as_ref().map(|st| st.cca.name()),
                    phase: status.as_ref().map(|st| st.phase),
                    cwnd_bytes: status.as_ref().map_or(stats.path.cwnd, |st| st.cwnd),
                    pacing_rate: status.as_ref().map_or(0, |st| st.pacing_rate),
                    max_delivery_rate: status.as_ref().map_or(0, |st| st.path.btl_bw),
                    delivery_rate: status.as_ref().map_or(0, |st| st.path.delivery_rate),
                    min_rtt_ms: status.as_ref().map_or(ms(stats.path.min_rtt), |st| ms(st.path.min_rtt)),
                    srtt_ms: status.as_ref().map_or(ms(stats.path.rtt), |st| ms(st.path.srtt)),
                    rttvar_ms: status.as_ref().map_or(f64::NAN, |st| ms(st.path.rttvar)),
                    loss_rate: if sent_p > 0 {
                        lost.saturating_sub(l0) as f64 / sent_p as f64
                    } else {
                        0.0
                    },
                    goodput: if dt > 0.0 {
                        delivered.saturating_sub(d0) as f64 / dt
                    } else {
                        0.0
                    },
                    bytes_sent: sent_p,
                    unsent_bytes: s.streams.values().map(|r| r.remaining).sum(),
                    rcts_ms: rcts.remove(&s.client.unwrap_or(s.index)).unwrap_or_default(),
                    period_ms: dt * 1e3,
                    response_wait_ms: wait,
                    response_wait_gradient_ms_per_s: gradient,
                }
            })
            .collect();
        out.sort_by_key(|m| m.conn);
        out
    }

    /// Asks connection `conn` (accept order) to switch its controller to `to` in `mode`;
    /// it takes effect inside the controller at its next event (docs/cc.md). An error
    /// when there is no such live connection or it runs one of quinn's built-ins.
    pub fn switch(&self, conn: usize, to: Cca, mode: SwitchMode) -> Result<(), String> {
        let s = self
            .sim
            .servers
            .values()
            .find(|s| s.index == conn)
            .ok_or_else(|| format!("no live connection {conn}"))?;
        let h = s
            .handle
            .as_ref()
            .ok_or_else(|| format!("connection {conn} runs {}, which cannot switch", self.sim.cc_name))?;
        h.switch_to(to, mode);
        Ok(())
    }

    /// Runs the simulation to its end with `gear` choosing every connection's controller
    /// every `period` (Floo §3.1: Monitor -> Selector -> Switcher, the Switcher being the
    /// suite's `mode` switching). Connections on quinn's built-ins are left alone.
    pub fn drive(
        &mut self,
        gear: &mut dyn CcaPeriodGear,
        period: Duration,
        mode: SwitchMode,
    ) -> Result<GearRun, SimError> {
        if period.is_zero() {
            return Err(SimError::Setup("the selection period must be > 0".into()));
        }
        let mut run = GearRun::default();
        while !self.advance(period)? {
            run.periods += 1;
            for m in self.monitor() {
                let Some(stats) = m.stats() else { continue };
                let decision = gear.choose(&stats, self.sim.instant());
                run.decisions += 1;
                if decision.choice != stats.cca && self.switch(m.conn, decision.choice, mode).is_ok() {
                    run.switches += 1;
                }
            }
        }
        Ok(run)
    }

    /// Gives every connection accepted from now on its initial window from `gear`, as the
    /// edge's QUIC initial-window gear does at accept (TCP WISE §IV-A: the Connection
    /// Manager); the records of those connections carry the choice as the edge's do
    /// (an `iw` object). `None` goes back to the config's `initial_window`. A gear that
    /// answers `None` for a connection leaves it the config's window.
    pub fn set_initial_window_gear(&mut self, gear: Option<Box<dyn InitialWindowGear>>) {
        self.sim.iw_gear = gear;
    }

    /// Client records (JSON lines) of the requests finished since the previous call.
    pub fn take_records(&mut self) -> Vec<String> {
        let new = self.sim.records[self.sim.taken..].to_vec();
        self.sim.taken = self.sim.records.len();
        new
    }
}

impl Sim {
    /// A simulation at time zero with `pending` requests (not yet started).
    pub(crate) fn new(config: &SimConfig, pending: Vec<Pending>) -> Result<Sim, SimError> {
        let link = |c: gearbox_link::LinkConfig, salt: u64| {
            Link::new(c, config.seed.wrapping_mul(0x9e37_79b9).wrapping_add(salt)).map_err(setup_error)
        };
        // Path 0's links keep the single-path salts, so adding paths changes nothing
        // on the first.
        let paths = config
            .links()
            .map_err(|e| SimError::Config {
                file: PathBuf::from("<config>"),
                message: e,
            })?
            .into_iter()
            .enumerate()
            .map(|(p, (down, up))| {
                let salt = 2 * p as u64;
                Ok(PathLinks {
                    down: link(down, salt + 1)?,
                    up: link(up, salt + 2)?,
                })
            })
            .collect::<Result<Vec<_>, SimError>>()?;
        let (server_crypto, client_config, client_factory) = quic_configs(config)?;
        if let Some(dir) = &config.qlog_dir {
            std::fs::create_dir_all(dir).map_err(|e| SimError::Setup(format!("qlog folder {}: {e}", dir.display())))?;
        }
        let endpoint_config = Arc::new(EndpointConfig::default());
        // Path MTU discovery on, as quinn turns it on over a socket that sets
        // don't-fragment (Linux): the real edge and client then send datagrams of up to
        // quinn's 1452-byte bound over the emulator's 1500-byte links, and so must the
        // simulator. Off, every packet stayed at the 1200-byte minimum and a transfer
        // took 20% more packets than the emulator's (docs/sim.md "Fidelity").
        let mtud = true;
        // One client's paths (a page load may run on one): what a path choice sees.
        let path_view = (config.population.is_none()).then(|| PathView::new(paths.len(), |p| client_ip(p).to_string()));
        let workload_paths = match config.path.is_empty() {
            false => Some(WorkloadPaths::from_config(config, std::path::Path::new("<config>"))?),
            true => None,
        };
        Ok(Sim {
            base: Instant::now(),
            now: Duration::ZERO,
            path_conn: vec![None; paths.len()],
            link_offset: Duration::from_secs_f64(config.link_offset_s.unwrap_or(0.0)),
            paths,
            client: Endpoint::new(endpoint_config.clone(), None, mtud, Some(seed_bytes(config.seed, 3))),
            server: Endpoint::new(
                endpoint_config,
                Some(Arc::new(ServerConfig::with_crypto(server_crypto.clone()))),
                mtud,
                Some(seed_bytes(config.seed, 4)),
            ),
            client_config,
            client_factory,
            qlog_dir: config.qlog_dir.clone(),
            qlog_error: None,
            server_crypto,
            cc: config.quic_cc().map_err(setup_error)?,
            cc_config: Arc::new(CcConfig::default()),
            initial_window: config.initial_window,
            iw_gear: None,
            iw_choices: HashMap::new(),
            client_by_addr: HashMap::new(),
            server_of: HashMap::new(),
            accepted: 0,
            clients: Vec::new(),
            by_handle: HashMap::new(),
            servers: BTreeMap::new(),
            hosts_per_prefix: config.population.as_ref().map(|p| p.hosts_per_prefix),
            addr_conn: vec![None; config.population.as_ref().map_or(0, |p| p.addresses() as usize)],
            busy: BTreeSet::new(),
            client_due: DueSet::default(),
            server_due: DueSet::default(),
            client_progressed: Vec::new(),
            timers: BTreeSet::new(),
            arrived: Vec::new(),
            pending,
            next_request: 0,
            records: Vec::new(),
            completed: 0,
            cc_name: config.cc.clone(),
            buf: Vec::with_capacity(64 * 1024),
            taken: 0,
            period_rcts: HashMap::new(),
            graph: None,
            path_view,
            workload_paths,
        })
    }

    /// Every record written so far.
    pub(crate) fn records(&self) -> &[String] {
        &self.records
    }

    /// Packets every link delivered.
    pub(crate) fn delivered_packets(&self) -> u64 {
        self.paths
            .iter()
            .map(|p| p.down.stats().delivered_packets + p.up.stats().delivered_packets)
            .sum()
    }

    pub(crate) fn instant(&self) -> Instant {
        self.base + self.now
    }

    /// A qlog stream into `name` in the qlog folder, times from the run's time zero;
    /// None without a folder.
    fn qlog(&self, name: String) -> Result<Option<quinn_proto::QlogStream>, SimError> {
        let Some(dir) = &self.qlog_dir else { return Ok(None) };
        let path = dir.join(&name);
        let file =
            std::fs::File::create(&path).map_err(|e| SimError::Setup(format!("qlog file {}: {e}", path.display())))?;
        let mut q = quinn_proto::QlogConfig::default();
        q.writer(Box::new(std::io::BufWriter::new(file)))
            .title(Some(name))
            .start_time(self.base);
        Ok(q.into_stream())
    }

    /// A new connection's server config: its own controller (and, for the suite's, its
    /// own switch handle), started with `initial_window` packets (`None`: the config's).
    fn server_config(&mut self, initial_window: Option<u32>) -> (Arc<ServerConfig>, Option<SwitchHandle>) {
        let handle = matches!(self.cc, QuicCc::Suite(_)).then(SwitchHandle::new);
        let factory = self
            .cc
            .factory_with(
                &self.cc_config,
                initial_window.or(self.initial_window),
                handle.clone().unwrap_or_default(),
            )
            .expect("the controller and initial window were validated with the config");
        // A qlog file that cannot be made stops the run at the next step (`qlog_error`).
        let qlog = self
            .qlog(format!("conn{}-server.sqlog", self.accepted))
            .unwrap_or_else(|e| {
                self.qlog_error = Some(e);
                None
            });
        let mut config = ServerConfig::with_crypto(self.server_crypto.clone());
        config.transport_config(transport(factory, qlog));
        (Arc::new(config), handle)
    }

    /// Runs every event up to `target`; returns whether every request is done. A page
    /// load stops early, at the instant a discovered object waits for its path.
    pub(crate) fn run_until(&mut self, target: Duration) -> Result<bool, SimError> {
        loop {
            self.settle()?;
            if self.completed == self.pending.len() {
                return Ok(true);
            }
            if self.graph.as_ref().is_some_and(|g| !g.ready.is_empty()) {
                return Ok(false);
            }
            // With nothing left to happen (no timer, packet or request) it idles to the
            // target; a due event that produced nothing (a link departure) must not spin.
            let next = self
                .next_event(target)
                .unwrap_or(Duration::MAX)
                .max(self.now + Duration::from_nanos(1));
            if next > target {
                self.now = self.now.max(target);
                return Ok(false);
            }
            self.now = next;
        }
    }

    /// When something next happens; departures from a link's bottleneck before it (and
    /// not after `limit`) are replayed on the way.
    ///
    /// A departure hands nothing to an endpoint: the packet only moves from the
    /// bottleneck to the link's delay stage. The link replays departures up to the time
    /// of every call (an enqueue, a delivery), so stepping over them here gives the same
    /// link state as handling each departure's instant, without the instant's pass over
    /// connections and links (about half of a full link's instants were departures).
    /// Only departures before every other event (request, timer, delivery, on any link)
    /// are replayed, so no packet can be offered to a link already advanced past its
    /// arrival.
    fn next_event(&mut self, limit: Duration) -> Option<Duration> {
        let mut other: Option<Duration> = None;
        let mut take = |t: Option<Duration>| {
            if let Some(t) = t {
                other = Some(other.map_or(t, |n: Duration| n.min(t)));
            }
        };
        if self.graph.is_none() {
            if let Some(p) = self.pending.get(self.next_request) {
                take(Some(Duration::from_secs_f64(p.req.send_at_ms / 1e3)));
            }
        }
        // The earliest armed timer; an entry of a connection gone since is dropped.
        while let Some(&(t, owner)) = self.timers.first() {
            if self.armed(owner) == Some(t) {
                take(Some(t.saturating_duration_since(self.base)));
                break;
            }
            self.timers.pop_first();
        }
        loop {
            // The earliest link event, and the link it is on (down before up, in path
            // order, on a tie).
            let mut first: Option<(Duration, usize, bool)> = None;
            for &i in &self.busy {
                let p = &self.paths[i];
                for (down, link) in [(true, &p.down), (false, &p.up)] {
                    // Links count from their own time zero ([`SimConfig::link_offset_s`]).
                    if let Some(w) = link.next_wakeup().map(|w| w.saturating_sub(self.link_offset)) {
                        if first.is_none_or(|(f, _, _)| w < f) {
                            first = Some((w, i, down));
                        }
                    }
                }
            }
            let Some((w, i, down)) = first else { return other };
            let before_all = w > self.now && w <= limit && other.is_none_or(|o| w < o);
            let link = if down {
                &mut self.paths[i].down
            } else {
                &mut self.paths[i].up
            };
            if before_all && link.next_delivery().is_none_or(|d| d > w + self.link_offset) {
                link.advance_to(w + self.link_offset);
                continue;
            }
            return Some(other.map_or(w, |o| o.min(w)));
        }
    }

    /// The timer deadline `owner` has armed now.
    fn armed(&self, owner: Owner) -> Option<Instant> {
        match owner {
            Owner::Client(ci) => self.clients[ci].timer,
            Owner::Server(h) => self.servers.get(&h).and_then(|s| s.timer),
        }
    }

    /// Marks every connection whose timer is due at `now` for handling.
    fn due_timers(&mut self, now: Instant) {
        while let Some(&(t, owner)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.pop_first();
            if self.armed(owner) != Some(t) {
                continue;
            }
            match owner {
                Owner::Client(ci) => {
                    self.clients[ci].timer = None;
                    self.client_due.insert(ci);
                }
                Owner::Server(h) => {
                    if let Some(s) = self.servers.get_mut(&h) {
                        s.timer = None;
                        self.server_due.insert(h);
                    }
                }
            }
        }
    }

    /// Arms the timer of client connection `ci` as quinn-proto now asks.
    fn rearm_client(&mut self, ci: usize) {
        let c = &mut self.clients[ci];
        let t = c.conn.as_mut().and_then(Connection::poll_timeout);
        if t != c.timer {
            if let Some(old) = c.timer {
                self.timers.remove(&(old, Owner::Client(ci)));
            }
            c.timer = t;
            if let Some(t) = t {
                self.timers.insert((t, Owner::Client(ci)));
            }
        }
    }

    /// Arms the timer of server connection `h` as quinn-proto now asks.
    fn rearm_server(&mut self, h: ConnectionHandle) {
        let Some(s) = self.servers.get_mut(&h) else { return };
        let t = s.conn.poll_timeout();
        if t != s.timer {
            if let Some(old) = s.timer {
                self.timers.remove(&(old, Owner::Server(h)));
            }
            s.timer = t;
            if let Some(t) = t {
                self.timers.insert((t, Owner::Server(h)));
            }
        }
    }

    /// Handles everything due at `now` until nothing more happens.
    fn settle(&mut self) -> Result<(), SimError> {
        loop {
            let mut progress = self.start_due_requests()?;
            progress |= self.reconnect_stranded()?;
            progress |= self.drive_connections();
            progress |= self.deliver();
            if let Some(e) = self.qlog_error.take() {
                return Err(e);
            }
            if !progress {
                return Ok(());
            }
        }
    }

    fn start_due_requests(&mut self) -> Result<bool, SimError> {
        let mut progress = false;
        if self.graph.is_some() {
            // A page load starts each object when it is assigned a path.
            return Ok(false);
        }
        while let Some(p) = self.pending.get(self.next_request) {
            if Duration::from_secs_f64(p.req.send_at_ms / 1e3) > self.now {
                break;
            }
            let i = self.next_request;
            self.next_request += 1;
            progress = true;
            if let Some(hosts) = self.hosts_per_prefix {
                // A population: the request goes from its client's address (the
                // workload's client index modulo the addresses, as `gearbox load` spreads
                // requests over its local addresses), on that address's connection.
                let addr = self.pending[i].req.client_index % (self.addr_conn.len() as u32);
                let live = self.addr_conn[addr as usize].filter(|&c| !self.clients[c].closed());
                let c = match live {
                    Some(c) if !self.pending[i].req.new_connection => c,
                    _ => {
                        self.pending[i].new_connection = true;
                        self.connect_addr(addr, hosts)?
                    }
                };
                self.pending[i].conn = c;
                self.clients[c].waiting.push_back(i);
                self.client_due.insert(c);
                continue;
            }
            let fresh = self.pending[i].req.new_connection;
            if self.workload_paths.is_some() {
                let (path, reason) = self.choose_path(i);
                self.assign(i, path, reason, fresh)?;
            } else {
                self.start_on_path(i, 0, fresh)?;
            }
        }
        Ok(progress)
    }

    /// The path of workload request `i` on a multipath client, and the rule's reason.
    fn choose_path(&mut self, i: usize) -> (usize, String) {
        let n = self.paths.len();
        let client = self.pending[i].req.client_index;
        if !matches!(self.workload_paths, Some(WorkloadPaths::Gear(_))) {
            return (client as usize % n, format!("client-index:{client}%{n}"));
        }
        let states = self.path_states();
        let now = self.instant();
        let r = &self.pending[i].req;
        let request = gearbox_gear_api::PathRequest {
            url: format!("https://{SERVER}{}", r.path),
            // RFC 9218's default urgency: a workload request carries no priority.
            urgency: 3,
            expected_bytes: Some(r.response_bytes),
            workload_client: Some(client),
        };
        let Some(WorkloadPaths::Gear(gear)) = self.workload_paths.as_mut() else {
            unreachable!("checked above")
        };
        let d = gear.choose(&request, &states, now);
        (states[d.choice.min(n - 1)].index, d.reason)
    }

    /// Every path's state as a multipath client's path choice sees it now
    /// ([`PathView::states`]).
    pub(crate) fn path_states(&mut self) -> Vec<gearbox_gear_api::PathState> {
        let now = self.instant();
        let Some(view) = self.path_view.as_mut() else {
            return Vec::new();
        };
        let (clients, path_conn) = (&self.clients, &self.path_conn);
        view.states(now, |p| {
            path_conn[p]
                .map(|c| &clients[c])
                .filter(|c| c.is_connected())
                .map(ClientConn::sample)
        })
    }

    /// Sends request `i` on `path` of a multipath client, chosen for `reason` (its
    /// record's `path_index` and `path_decision`); `fresh`: on a new connection.
    pub(crate) fn assign(&mut self, i: usize, path: usize, reason: String, fresh: bool) -> Result<(), SimError> {
        if let Some(view) = self.path_view.as_mut() {
            view.started(path, self.pending[i].req.response_bytes);
        }
        self.pending[i].path_choice = Some((path, reason));
        self.start_on_path(i, path, fresh)
    }

    /// Queues request `i` on `path`'s connection: a new one when `fresh` (the workload
    /// asks for one), when the path has none, or when it closed (e.g. its idle timeout
    /// passed during a long think time), as a real client reconnects.
    fn start_on_path(&mut self, i: usize, path: usize, fresh: bool) -> Result<(), SimError> {
        let live = self.path_conn[path].filter(|&c| !self.clients[c].closed());
        let c = match live {
            Some(c) if !fresh => c,
            _ => {
                self.connect(path)?;
                self.pending[i].new_connection = true;
                self.clients.len() - 1
            }
        };
        self.pending[i].conn = c;
        self.clients[c].waiting.push_back(i);
        self.client_due.insert(c);
        Ok(())
    }

    /// Opens a client connection on `path`.
    pub(crate) fn connect(&mut self, path: usize) -> Result<(), SimError> {
        let c = self.connect_on(path, client_ip(path))?;
        self.path_conn[path] = Some(c);
        Ok(())
    }

    /// Opens a connection from a population's client address `addr` (on its prefix's
    /// links); returns its index.
    fn connect_addr(&mut self, addr: u32, hosts: u32) -> Result<usize, SimError> {
        let c = self.connect_on((addr / hosts) as usize, population_addr(addr, hosts))?;
        self.clients[c].addr = Some(addr);
        self.addr_conn[addr as usize] = Some(c);
        Ok(c)
    }

    /// Opens a client connection from `ip` over link pair `path`; returns its index.
    fn connect_on(&mut self, path: usize, ip: std::net::Ipv4Addr) -> Result<usize, SimError> {
        // Ports 50000-65535, reused after 15,536 connections (quinn routes by
        // connection id, so two connections of one address and port never mix).
        let port = 50000 + (self.clients.len() % 15_536) as u16;
        let local = SocketAddrV4::new(ip, port);
        let mut client_config = self.client_config.clone();
        if let Some(qlog) = self.qlog(format!("conn{}-client.sqlog", self.clients.len()))? {
            client_config.transport_config(transport(self.client_factory.clone(), Some(qlog)));
        }
        let (handle, conn) = self
            .client
            .connect(self.instant(), client_config, SERVER.into(), SERVER_NAME)
            .map_err(setup_error)?;
        self.by_handle.insert(handle, self.clients.len());
        self.clients.push(ClientConn {
            handle,
            conn: Some(conn),
            started: self.now,
            connected: None,
            waiting: VecDeque::new(),
            writing: Vec::new(),
            local,
            path,
            addr: None,
            streams: HashMap::new(),
            timer: None,
        });
        let c = self.clients.len() - 1;
        self.client_due.insert(c);
        self.client_by_addr.insert(local, c);
        Ok(c)
    }

    /// Requests still waiting for a stream on a connection that closed go to a new one.
    fn reconnect_stranded(&mut self) -> Result<bool, SimError> {
        // Only a connection handled at this instant can have closed since the last look:
        // one due now, or one that made progress at the previous pass.
        let clients = &self.clients;
        let is_stranded = |ci: &usize| clients[*ci].closed() && !clients[*ci].waiting.is_empty();
        let mut found: Vec<usize> = self.client_progressed.iter().copied().filter(is_stranded).collect();
        found.extend(self.client_due.sorted().iter().copied().filter(is_stranded));
        found.sort_unstable();
        found.dedup();
        let stranded: Vec<(usize, Option<u32>, Vec<usize>)> = found
            .iter()
            .map(|&ci| &self.clients[ci])
            .map(|c| (c.path, c.addr, c.waiting.iter().copied().collect()))
            .collect();
        if stranded.is_empty() {
            return Ok(false);
        }
        for (path, addr, requests) in stranded {
            let c = match (addr, self.hosts_per_prefix) {
                (Some(a), Some(hosts)) => self.connect_addr(a, hosts)?,
                _ => {
                    self.connect(path)?;
                    self.clients.len() - 1
                }
            };
            for i in requests {
                let old = self.pending[i].conn;
                self.clients[old].waiting.clear();
                self.pending[i].conn = c;
                self.pending[i].new_connection = true;
                self.clients[c].waiting.push_back(i);
            }
        }
        Ok(true)
    }

    /// Timers, endpoint events, application events and transmits of every connection.
    fn drive_connections(&mut self) -> bool {
        let now = self.instant();
        self.due_timers(now);
        let mut progress = false;
        // A connection is not handled again at the next pass unless something touches it
        // (a datagram, a request, its timer): it has just been polled until it had nothing
        // to send, and polling it again at the same instant with no new input finds
        // nothing (a pass of every connection that made progress cost a second round of
        // polls per event, most of quinn-proto's `poll_transmit` calls that sent nothing;
        // the records are the same byte for byte, docs/sim.md "Speed").
        self.client_progressed.clear();
        for ci in self.client_due.take() {
            if self.drive_client(ci, now) {
                progress = true;
                self.client_progressed.push(ci);
            }
            self.rearm_client(ci);
        }
        for h in self.server_due.take() {
            progress |= self.drive_server(h, now);
            self.rearm_server(h);
        }
        progress
    }

    /// Timers, endpoint events, application events and transmits of client connection `ci`.
    fn drive_client(&mut self, ci: usize, now: Instant) -> bool {
        let mut progress = false;
        {
            let c = &mut self.clients[ci];
            let Some(conn) = c.conn.as_mut() else { return false };
            if conn.poll_timeout().is_some_and(|t| t <= now) {
                conn.handle_timeout(now);
                progress = true;
            }
            while let Some(ev) = conn.poll_endpoint_events() {
                if let Some(back) = self.client.handle_event(c.handle, ev) {
                    conn.handle_event(back);
                }
            }
            while let Some(ev) = conn.poll() {
                progress = true;
                match ev {
                    Event::Connected => c.connected = Some(self.now),
                    Event::Stream(StreamEvent::Readable { id }) => {
                        read_response(&mut self.pending, &mut self.arrived, conn, &c.streams, id, self.now);
                    }
                    _ => {}
                }
            }
        }
        progress |= self.client_streams(ci);
        let c = &mut self.clients[ci];
        let src = c.local;
        let up = &mut self.paths[c.path].up;
        let Some(conn) = c.conn.as_mut() else { return progress };
        loop {
            self.buf.clear();
            let Some(t) = conn.poll_transmit(now, 16, &mut self.buf) else {
                break;
            };
            progress = true;
            self.busy.insert(c.path);
            send(up, self.now + self.link_offset, src, &t, &self.buf);
        }
        // A drained connection has told its endpoint (above) and has nothing left to do.
        if conn.is_drained() && c.waiting.is_empty() && c.writing.is_empty() {
            c.conn = None;
        }
        progress
    }

    /// Timers, endpoint events, application events and transmits of server connection `h`.
    fn drive_server(&mut self, h: ConnectionHandle, now: Instant) -> bool {
        let mut progress = false;
        {
            let Some(s) = self.servers.get_mut(&h) else {
                return false;
            };
            if s.conn.poll_timeout().is_some_and(|t| t <= now) {
                s.conn.handle_timeout(now);
                progress = true;
            }
            while let Some(ev) = s.conn.poll_endpoint_events() {
                if let Some(back) = self.server.handle_event(h, ev) {
                    s.conn.handle_event(back);
                }
            }
            while let Some(ev) = s.conn.poll() {
                progress = true;
                if let Event::Stream(StreamEvent::Readable { id }) = ev {
                    serve_read(s, id);
                }
            }
            while let Some(id) = s.conn.streams().accept(Dir::Bi) {
                progress = true;
                s.streams.insert(
                    id,
                    Response {
                        remaining: 0,
                        header: Vec::new(),
                        finished_reading: false,
                        ready_at: None,
                    },
                );
                serve_read(s, id);
            }
            progress |= serve_write(s, self.now);
            loop {
                self.buf.clear();
                let Some(t) = s.conn.poll_transmit(now, 16, &mut self.buf) else {
                    break;
                };
                progress = true;
                let dst = match t.destination {
                    SocketAddr::V4(a) => a,
                    SocketAddr::V6(_) => continue,
                };
                send_down(
                    &mut self.paths,
                    &mut self.busy,
                    self.hosts_per_prefix.is_some(),
                    self.now + self.link_offset,
                    dst,
                    &t,
                    &self.buf,
                );
            }
            if s.conn.is_drained() {
                self.servers.remove(&h);
            }
        }
        progress
    }

    /// Opens streams for waiting requests and writes their request bytes.
    fn client_streams(&mut self, ci: usize) -> bool {
        let mut progress = false;
        let c = &mut self.clients[ci];
        let Some(conn) = c.conn.as_mut() else { return false };
        while let Some(&i) = c.waiting.front() {
            let Some(id) = conn.streams().open(Dir::Bi) else {
                break;
            };
            c.waiting.pop_front();
            c.writing.push(i);
            c.streams.insert(id, i);
            self.pending[i].stream = Some(id);
            self.pending[i].sent_at.get_or_insert(self.now);
            progress = true;
        }
        for &i in &c.writing {
            let p = &mut self.pending[i];
            let want = p.req.request_bytes.max(8);
            let Some(id) = p.stream.filter(|_| p.written < want) else {
                continue;
            };
            let mut req = vec![0u8; (want - p.written) as usize];
            if p.written == 0 {
                req[..8].copy_from_slice(&p.req.response_bytes.to_be_bytes());
            }
            match conn.send_stream(id).write(&req) {
                Ok(n) => {
                    p.written += n as u64;
                    progress |= n > 0;
                    if p.written >= want {
                        let _ = conn.send_stream(id).finish();
                    }
                }
                Err(WriteError::Blocked) => {}
                Err(_) => p.written = want,
            }
        }
        let pending = &self.pending;
        c.writing
            .retain(|&i| pending[i].written < pending[i].req.request_bytes.max(8));
        progress
    }

    /// Hands every due datagram of every path's links to its endpoint.
    fn deliver(&mut self) -> bool {
        let now = self.instant();
        let mut progress = false;
        // Busy links in path order (a link made busy by a delivery here is still seen).
        let mut from = 0;
        while let Some(&path) = self.busy.range(from..).next() {
            from = path + 1;
            progress |= self.deliver_path(path, now);
            let l = &self.paths[path];
            if l.down.next_wakeup().is_none() && l.up.next_wakeup().is_none() {
                self.busy.remove(&path);
            }
        }
        progress |= self.finish_requests();
        progress
    }

    fn deliver_path(&mut self, path: usize, now: Instant) -> bool {
        let mut progress = false;
        while let Some(p) = self.paths[path].up.poll_transmit(self.now + self.link_offset) {
            progress = true;
            let Some((src, _dst, data)) = packet::unwrap(p) else {
                continue;
            };
            self.buf.clear();
            match self.server.handle(now, src, None, None, data, &mut self.buf) {
                Some(DatagramEvent::NewConnection(incoming)) => {
                    self.buf.clear();
                    let remote = incoming.remote_address();
                    let client = match remote {
                        SocketAddr::V4(a) => self.client_by_addr.get(&a).copied(),
                        SocketAddr::V6(_) => None,
                    };
                    let choice = self.choose_initial_window(remote);
                    let (config, handle) = self.server_config(choice.as_ref().map(|c| c.iw));
                    if let Ok((h, conn)) = self.server.accept(incoming, now, &mut self.buf, Some(config)) {
                        if let Some(choice) = choice {
                            self.iw_choices.insert(client.unwrap_or(self.accepted), choice);
                        }
                        if let Some(ci) = client {
                            self.server_of.insert(ci, h);
                        }
                        self.servers.insert(
                            h,
                            ServerConn {
                                conn,
                                streams: BTreeMap::new(),
                                index: self.accepted,
                                client,
                                handle,
                                last: (self.now, 0, 0, 0),
                                period_waits: Vec::new(),
                                last_wait_ms: None,
                                timer: None,
                            },
                        );
                        self.server_due.insert(h);
                        self.accepted += 1;
                    }
                }
                Some(DatagramEvent::ConnectionEvent(h, ev)) => {
                    if let Some(s) = self.servers.get_mut(&h) {
                        s.conn.handle_event(ev);
                        self.server_due.insert(h);
                    }
                }
                Some(DatagramEvent::Response(t)) => {
                    if let SocketAddr::V4(dst) = t.destination {
                        send_down(
                            &mut self.paths,
                            &mut self.busy,
                            self.hosts_per_prefix.is_some(),
                            self.now + self.link_offset,
                            dst,
                            &t,
                            &self.buf,
                        );
                    }
                }
                None => {}
            }
        }
        while let Some(p) = self.paths[path].down.poll_transmit(self.now + self.link_offset) {
            progress = true;
            let Some((src, _dst, data)) = packet::unwrap(p) else {
                continue;
            };
            self.buf.clear();
            if let Some(DatagramEvent::ConnectionEvent(h, ev)) =
                self.client.handle(now, src, None, None, data, &mut self.buf)
            {
                if let Some(&ci) = self.by_handle.get(&h) {
                    if let Some(conn) = self.clients[ci].conn.as_mut() {
                        conn.handle_event(ev);
                        self.client_due.insert(ci);
                    }
                }
            }
        }
        progress
    }

    /// The initial window the gear (if any) gives a connection from `client` accepted
    /// now; the simulated clock counts from the Unix epoch, so the hour of day is that of
    /// the simulated time.
    fn choose_initial_window(&mut self, client: SocketAddr) -> Option<IwChoice> {
        let gear = self.iw_gear.as_mut()?;
        let time_unix_ms = self.now.as_secs_f64() * 1e3;
        let conn = AcceptedConnection::new(self.accepted as u64 + 1, client, Transport::Quic, time_unix_ms);
        gear.choose(&conn, self.base + self.now).choice
    }

    /// Writes the records of requests whose response is complete.
    fn finish_requests(&mut self) -> bool {
        let mut progress = false;
        // Only a request whose response bytes arrived can have completed: the others are
        // not looked at (a scan of every request made each event cost the run's length).
        // In index order, as the scan wrote them.
        let mut arrived = std::mem::take(&mut self.arrived);
        arrived.sort_unstable();
        arrived.dedup();
        for i in arrived {
            let p = &self.pending[i];
            let done = p.stream.is_some() && p.received >= p.req.response_bytes && p.first_byte_at.is_some();
            if !done || p.sent_at.is_none() {
                continue;
            }
            let record = self.record(i);
            self.records.push(record);
            let p = &self.pending[i];
            let rct = self
                .now
                .saturating_sub(Duration::from_secs_f64(p.req.send_at_ms / 1e3))
                .as_secs_f64()
                * 1e3;
            self.period_rcts.entry(p.conn).or_default().push(rct);
            self.completed += 1;
            if let Some(id) = self.pending[i].stream {
                self.clients[self.pending[i].conn].streams.remove(&id);
            }
            self.pending[i].stream = None;
            self.pending[i].sent_at = None;
            progress = true;
            if let Some(g) = self.graph.as_mut() {
                g.completed(i, self.now, &mut self.pending);
            }
            if let (Some(view), Some((path, _))) = (self.path_view.as_mut(), &self.pending[i].path_choice) {
                // The client reads the path's statistics as each response completes
                // (gearbox-client's multipath load does): the monitors replay these
                // readings in order before the next choice.
                let sample = self.clients[self.pending[i].conn].sample();
                view.completed(self.base + self.now, *path, self.pending[i].req.response_bytes, sample);
            }
        }
        progress
    }

    fn record(&self, i: usize) -> String {
        let p = &self.pending[i];
        let path = p.path_choice.as_ref();
        let c = &self.clients[p.conn];
        let issued = Duration::from_secs_f64(p.req.send_at_ms / 1e3);
        let done = p.first_byte_at.unwrap_or(self.now).max(self.now);
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let stats = c.conn.as_ref().map(Connection::stats).unwrap_or_default();
        let record = ClientRecord {
            side: Side::Client,
            schema: SCHEMA_VERSION,
            time_unix_ms: ms(issued),
            conn_id: p.conn as u64 + 1,
            server_addr: SERVER.to_string(),
            local_addr: c.local.to_string(),
            protocol: Protocol::H3,
            method: "GET".into(),
            url: format!("https://{SERVER}{}", p.req.path),
            status: Some(200),
            bytes: p.received,
            rct_ms: Some(ms(done.saturating_sub(issued))),
            ttfb_ms: p.first_byte_at.map(|t| ms(t.saturating_sub(issued))),
            new_connection: p.new_connection,
            handshake_ms: p
                .new_connection
                .then(|| c.connected.map(|t| ms(t.saturating_sub(c.started))))
                .flatten(),
            transport: Some(TransportSnapshot {
                cc: self.cc_name.clone(),
                rtt_ms: ms(stats.path.rtt),
                min_rtt_ms: None,
                rttvar_ms: None,
                cwnd_bytes: stats.path.cwnd,
                sent_packets: stats.path.sent_packets,
                lost_packets: stats.path.lost_packets,
                congestion_events: Some(stats.path.congestion_events),
                unacked_bytes: None,
                delivery_rate_bps: None,
                timeouts: None,
            }),
            decision: Some("sim:quic".into()),
            decision_id: None,
            click: Some(p.req.click),
            error: None,
            retried_from: None,
            retry_lost_ms: None,
            hedged: None,
            hedge_at_ms: None,
            path_index: path.map(|(p, _)| *p),
            path_decision: path.map(|(_, reason)| reason.clone()),
        };
        let mut v = serde_json::to_value(&record).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.insert("source".into(), "sim".into());
            if let Some(choice) = self.iw_choices.get(&p.conn) {
                o.insert("iw".into(), serde_json::to_value(choice).unwrap_or_default());
            }
            // The server end of the connection as the response completed (sim only: the
            // emulator has the edge's own records for it): its window, its packets sent
            // and lost (retransmissions, TCP WISE Table II), its RTT.
            let server = self.server_of.get(&p.conn).and_then(|h| self.servers.get(h));
            if let Some(s) = server {
                let st = s.conn.stats();
                o.insert(
                    "server_transport".into(),
                    serde_json::json!({
                        "cwnd_bytes": st.path.cwnd,
                        "sent_packets": st.path.sent_packets,
                        "lost_packets": st.path.lost_packets,
                        "congestion_events": st.path.congestion_events,
                        "rtt_ms": ms(st.path.rtt),
                        "mtu": st.path.current_mtu,
                    }),
                );
            }
        }
        v.to_string()
    }
}

/// Reads what arrived of a response on client connection `ci` (stream ids are per
/// connection: two connections in use at once have the same ids).
fn read_response(
    pending: &mut [Pending],
    arrived: &mut Vec<usize>,
    conn: &mut Connection,
    streams: &HashMap<StreamId, usize>,
    id: StreamId,
    now: Duration,
) {
    let Some(&i) = streams.get(&id) else {
        return;
    };
    arrived.push(i);
    let p = &mut pending[i];
    let mut recv = conn.recv_stream(id);
    let Ok(mut chunks) = recv.read(true) else { return };
    loop {
        match chunks.next(usize::MAX) {
            Ok(Some(chunk)) => {
                p.first_byte_at.get_or_insert(now);
                p.received += chunk.bytes.len() as u64;
            }
            Ok(None) => {
                // The stream finished: an empty response still completes.
                p.first_byte_at.get_or_insert(now);
                break;
            }
            Err(_) => break,
        }
    }
    let _ = chunks.finalize();
}

/// Reads a request on the server: its first 8 bytes are the response size.
fn serve_read(s: &mut ServerConn, id: StreamId) {
    let Some(r) = s.streams.get_mut(&id) else { return };
    let mut recv = s.conn.recv_stream(id);
    let Ok(mut chunks) = recv.read(true) else { return };
    loop {
        match chunks.next(usize::MAX) {
            Ok(Some(chunk)) => {
                if r.header.len() < 8 {
                    let take = (8 - r.header.len()).min(chunk.bytes.len());
                    r.header.extend_from_slice(&chunk.bytes[..take]);
                    if r.header.len() == 8 {
                        let mut b = [0u8; 8];
                        b.copy_from_slice(&r.header);
                        r.remaining = u64::from_be_bytes(b);
                    }
                }
            }
            Ok(None) => {
                r.finished_reading = true;
                break;
            }
            Err(_) => break,
        }
    }
    let _ = chunks.finalize();
}

/// A shared buffer of response bytes (their content does not matter).
static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];

/// Writes responses whose requests were read whole, as far as flow control allows.
fn serve_write(s: &mut ServerConn, now: Duration) -> bool {
    let mut progress = false;
    let mut done = Vec::new();
    for (&id, r) in s.streams.iter_mut() {
        if !r.finished_reading {
            continue;
        }
        let ready_at = *r.ready_at.get_or_insert(now);
        while r.remaining > 0 {
            let n = (r.remaining as usize).min(ZEROS.len());
            // A static `Bytes` is handed to quinn's send buffer without a copy.
            let mut chunk = [Bytes::from_static(&ZEROS[..n])];
            match s.conn.send_stream(id).write_chunks(&mut chunk) {
                Ok(w) if w.bytes > 0 => {
                    r.remaining -= w.bytes as u64;
                    progress = true;
                }
                Ok(_) | Err(_) => break,
            }
        }
        if r.remaining == 0 {
            let _ = s.conn.send_stream(id).finish();
            s.period_waits.push(now.saturating_sub(ready_at).as_secs_f64() * 1e3);
            done.push(id);
            progress = true;
        }
    }
    for id in done {
        s.streams.remove(&id);
    }
    progress
}

/// The link pair of client address `dst`: path `p` owns `10.0.p.2`; a population's prefix
/// `i` owns `100.(64 + i / 256).(i % 256).0/24`.
fn link_of(links: usize, population: bool, dst: SocketAddrV4) -> usize {
    let i = if population {
        population_prefix(*dst.ip()).unwrap_or(0) as usize
    } else {
        dst.ip().octets()[2] as usize
    };
    i.min(links - 1)
}

fn send(link: &mut Link<BytesMut>, now: Duration, src: SocketAddrV4, t: &quinn_proto::Transmit, buf: &[u8]) {
    if let SocketAddr::V4(dst) = t.destination {
        send_to(link, now, src, dst, t, buf);
    }
}

/// Puts a transmit's datagrams (several when segmented) on a link.
/// The server's datagrams of `t` (in `buf`) onto the downlink toward `dst` at link time
/// `at`, that link marked busy.
fn send_down(
    paths: &mut [PathLinks],
    busy: &mut BTreeSet<usize>,
    population: bool,
    at: Duration,
    dst: SocketAddrV4,
    t: &quinn_proto::Transmit,
    buf: &[u8],
) {
    let link = link_of(paths.len(), population, dst);
    busy.insert(link);
    send_to(&mut paths[link].down, at, SERVER, dst, t, buf);
}

fn send_to(
    link: &mut Link<BytesMut>,
    now: Duration,
    src: SocketAddrV4,
    dst: SocketAddrV4,
    t: &quinn_proto::Transmit,
    buf: &[u8],
) {
    let seg = t.segment_size.unwrap_or(t.size).max(1);
    for chunk in buf[..t.size].chunks(seg) {
        link.enqueue(now, packet::wrap(src, dst, chunk));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With rcgen's own serial one key in 128 gave a shorter certificate: a thousand
    /// keys would show it with a probability of 1 - (127/128)^1000, above 0.9996.
    #[test]
    fn every_fresh_certificate_has_the_same_size() {
        let sizes: BTreeSet<usize> = (0..1000).map(|_| server_certificate().unwrap().0.len()).collect();
        assert_eq!(sizes.len(), 1, "certificate sizes {sizes:?}");
    }
}
