//! The edge's live connections and their congestion controllers: where a gear (or an
//! operator, through the admin port) switches a running connection's algorithm (Floo
//! §3.4).
//!
//! Every accepted connection registers here with the handle of its controller: the
//! suite's [`SwitchHandle`] for QUIC, the kernel socket's [`TcpCcHandle`] for TCP. The
//! entry goes when the connection ends. Each switch leaves one telemetry record
//! (`event = "cc_switch"`, docs/telemetry.md) and one count in `/metrics`; a QUIC switch
//! that changed the controller leaves a second one a second later, its effect on the
//! connection's loss and RTT (`event = "cc_switch_effect"`, Floo Fig. 12-13).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use gearbox_cc::{
    Cca, ControllerStatus, QuicCc, SwitchEffect, SwitchHandle, SwitchMode, SwitchOutcome, SwitchRecord, TcpCcHandle,
};
use gearbox_dataplane::telemetry::{unix_ms_now, TelemetrySink};
use gearbox_gear_api::Transport;
use serde::Serialize;

/// How a live connection's controller is reached.
#[derive(Debug, Clone)]
pub enum CcControl {
    /// A QUIC connection running one of the suite's controllers.
    Quic(SwitchHandle),
    /// A QUIC connection running one of quinn's built-ins, which cannot switch.
    QuinnBuiltIn(QuicCc),
    /// A TCP connection: the kernel's controller, set on the live socket.
    Tcp(TcpCcHandle),
}

/// Why a switch request was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SwitchError {
    /// No live connection has that id.
    #[error("no live connection {0}")]
    NoConnection(u64),
    /// The kernel has no such controller (Copa, Vivace) or refused it.
    #[error("connection {conn_id}: {message}")]
    Kernel {
        /// The connection.
        conn_id: u64,
        /// What the kernel said, with what it offers.
        message: String,
    },
    /// The connection runs quinn's built-in controller.
    #[error("connection {conn_id} runs quinn's built-in {cc}, which cannot switch; start the edge with one of the suite's controllers (--cc newreno|cubic|bbr|copa|westwood|vivace)")]
    NotSwitchable {
        /// The connection.
        conn_id: u64,
        /// Its controller.
        cc: &'static str,
    },
}

/// One live connection as `/connections` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct LiveSummary {
    /// Edge-local connection id.
    pub conn_id: u64,
    /// Client address.
    pub client_addr: SocketAddr,
    /// `tcp` or `quic`.
    pub transport: Transport,
    /// Running algorithm (QUIC: None before the first ACK or on a built-in; TCP: the
    /// kernel's name).
    pub cca: Option<String>,
    /// Its phase.
    pub phase: Option<&'static str>,
    /// Congestion window, bytes.
    pub cwnd: Option<u64>,
    /// Intended sending rate, bytes per second.
    pub pacing_rate: Option<u64>,
    /// Switches so far.
    pub switches: u64,
    /// Smoothed RTT, ms (QUIC, from the controller's connection-level state).
    pub srtt_ms: Option<f64>,
    /// Min RTT over the last 10 s, ms.
    pub min_rtt_ms: Option<f64>,
    /// Latest delivery-rate sample, bytes per second.
    pub delivery_rate: Option<u64>,
    /// Bytes sent and declared lost since the connection started.
    pub sent_bytes: Option<u64>,
    /// Bytes declared lost since the connection started.
    pub lost_bytes: Option<u64>,
}

struct Entry {
    client_addr: SocketAddr,
    transport: Transport,
    control: CcControl,
    app: Arc<AppCounters>,
}

/// A connection's application-level counters: the part of Floo's Monitor (§3.2, Table 2
/// "App-level") that only the server application sees. The HTTP/3 path counts into
/// them; the Floo loop reads and resets them every selection period.
#[derive(Debug, Default)]
pub struct AppCounters {
    /// Response bytes generated but not yet accepted by QUIC's send buffer
    /// (`Unsent_size`).
    unsent: AtomicU64,
    /// Waits (Qws, ms) of the responses whose last byte entered the send buffer since
    /// the last read.
    waits: Mutex<Vec<f64>>,
}

impl AppCounters {
    /// A response of `bytes` was generated and waits to be written.
    pub fn generated(&self, bytes: u64) {
        self.unsent.fetch_add(bytes, Ordering::Relaxed);
    }

    /// `bytes` of a generated response entered the send buffer.
    pub fn written(&self, bytes: u64) {
        let _ = self
            .unsent
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| Some(u.saturating_sub(bytes)));
    }

    /// A response's last byte entered the send buffer `wait` after it was generated.
    pub fn finished(&self, wait: std::time::Duration) {
        lock(&self.waits).push(wait.as_secs_f64() * 1e3);
    }

    /// Unsent bytes now and the waits since the previous call.
    pub fn take(&self) -> (u64, Vec<f64>) {
        (
            self.unsent.load(Ordering::Relaxed),
            std::mem::take(&mut *lock(&self.waits)),
        )
    }
}

/// What the Floo loop reads of one live connection every selection period.
pub(crate) enum PeriodView {
    /// A QUIC connection on one of the suite's controllers, with its status.
    Quic {
        conn_id: u64,
        status: ControllerStatus,
        app: Arc<AppCounters>,
    },
    /// A kernel TCP connection: its socket, read with `TCP_INFO`.
    Tcp { conn_id: u64, handle: TcpCcHandle },
}

impl PeriodView {
    pub(crate) fn conn_id(&self) -> u64 {
        match self {
            PeriodView::Quic { conn_id, .. } | PeriodView::Tcp { conn_id, .. } => *conn_id,
        }
    }
}

/// The fields every event record of a connection starts with (docs/telemetry.md "Event
/// records").
#[derive(Debug, Serialize)]
pub(crate) struct EventHead {
    side: &'static str,
    schema: u32,
    event: &'static str,
    time_unix_ms: f64,
    conn_id: u64,
    transport: Transport,
}

impl EventHead {
    /// The head of an `event` record of connection `conn_id`, now.
    pub(crate) fn now(event: &'static str, conn_id: u64, transport: Transport) -> Self {
        EventHead {
            side: "edge",
            schema: 1,
            event,
            time_unix_ms: unix_ms_now(),
            conn_id,
            transport,
        }
    }
}

/// The record a switch leaves in the edge's telemetry.
#[derive(Debug, Serialize)]
struct SwitchEvent<'a> {
    #[serde(flatten)]
    head: EventHead,
    #[serde(flatten)]
    record: &'a SwitchRecord,
}

/// The record of a switch's effect: the connection's loss and RTT over the second
/// before it and the second after it (gearbox_cc::effect).
#[derive(Debug, Serialize)]
struct SwitchEffectEvent<'a> {
    #[serde(flatten)]
    head: EventHead,
    #[serde(flatten)]
    effect: &'a SwitchEffect,
}

/// The record a kernel TCP switch leaves: no phases or windows, the kernel keeps them.
#[derive(Debug, Serialize)]
struct TcpSwitchEvent<'a> {
    #[serde(flatten)]
    head: EventHead,
    from: &'a str,
    to: &'a str,
    mode: &'static str,
    outcome: SwitchOutcome,
    error: Option<String>,
}

/// Switch counts by (from, to, mode) for `/metrics`; mode `kernel` for TCP.
#[derive(Debug, Default)]
pub struct SwitchCounts(Mutex<BTreeMap<(String, String, &'static str), u64>>);

impl SwitchCounts {
    fn count(&self, from: &str, to: &str, mode: &'static str) {
        *lock(&self.0)
            .entry((from.to_string(), to.to_string(), mode))
            .or_default() += 1;
    }

    /// `(from, to, mode, count)` for every pair switched at least once.
    pub fn snapshot(&self) -> Vec<(String, String, &'static str, u64)> {
        lock(&self.0)
            .iter()
            .map(|((f, t, m), &n)| (f.clone(), t.clone(), *m, n))
            .collect()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Every live connection of an edge.
pub struct LiveConnections {
    conns: Mutex<HashMap<u64, Entry>>,
    telemetry: TelemetrySink,
    counts: Arc<SwitchCounts>,
}

impl LiveConnections {
    pub(crate) fn new(telemetry: TelemetrySink, counts: Arc<SwitchCounts>) -> Self {
        LiveConnections {
            conns: Mutex::new(HashMap::new()),
            telemetry,
            counts,
        }
    }

    /// Registers connection `conn_id`; it stays listed until the guard is dropped.
    pub(crate) fn register(
        self: &Arc<Self>,
        conn_id: u64,
        client_addr: SocketAddr,
        transport: Transport,
        control: CcControl,
    ) -> LiveGuard {
        if let CcControl::Quic(handle) = &control {
            let telemetry = self.telemetry.clone();
            let counts = self.counts.clone();
            handle.set_observer(move |record| {
                if record.outcome == SwitchOutcome::Switched {
                    counts.count(record.from.name(), record.to.name(), record.mode.name());
                }
                telemetry.write(&SwitchEvent {
                    head: EventHead::now("cc_switch", conn_id, transport),
                    record,
                });
            });
            let telemetry = self.telemetry.clone();
            handle.set_effect_observer(move |effect| {
                telemetry.write(&SwitchEffectEvent {
                    head: EventHead::now("cc_switch_effect", conn_id, transport),
                    effect,
                });
            });
        }
        let app = Arc::new(AppCounters::default());
        lock(&self.conns).insert(
            conn_id,
            Entry {
                client_addr,
                transport,
                control,
                app: app.clone(),
            },
        );
        LiveGuard {
            live: self.clone(),
            conn_id,
            app,
        }
    }

    /// Every live connection a period gear can act on: QUIC on one of the suite's
    /// controllers with a status (an ACK seen), and kernel TCP.
    pub(crate) fn period_views(&self) -> Vec<PeriodView> {
        lock(&self.conns)
            .iter()
            .filter_map(|(&conn_id, e)| match &e.control {
                CcControl::Quic(h) => h.status().map(|status| PeriodView::Quic {
                    conn_id,
                    status,
                    app: e.app.clone(),
                }),
                CcControl::Tcp(handle) => Some(PeriodView::Tcp {
                    conn_id,
                    handle: handle.clone(),
                }),
                CcControl::QuinnBuiltIn(_) => None,
            })
            .collect()
    }

    /// Asks connection `conn_id` to run `to`. A QUIC controller acts at its next
    /// event, in `mode`; a TCP socket switches at once, with no state migration (the
    /// kernel's own re-initialisation; `mode` does not apply).
    pub fn switch(&self, conn_id: u64, to: Cca, mode: SwitchMode) -> Result<(), SwitchError> {
        let control = lock(&self.conns)
            .get(&conn_id)
            .map(|e| e.control.clone())
            .ok_or(SwitchError::NoConnection(conn_id))?;
        match control {
            CcControl::Quic(handle) => {
                handle.switch_to(to, mode);
                Ok(())
            }
            CcControl::QuinnBuiltIn(cc) => Err(SwitchError::NotSwitchable { conn_id, cc: cc.name() }),
            CcControl::Tcp(handle) => self.switch_tcp(conn_id, &handle, to),
        }
    }

    fn switch_tcp(&self, conn_id: u64, handle: &TcpCcHandle, to: Cca) -> Result<(), SwitchError> {
        let from = handle.current().unwrap_or_else(|_| "unknown".into());
        let Some(name) = gearbox_cc::TcpCc::for_cca(to).map(gearbox_cc::TcpCc::name) else {
            return Err(SwitchError::Kernel {
                conn_id,
                message: format!(
                    "{to} has no kernel TCP implementation; the kernel offers: {}",
                    gearbox_cc::kernel::available()
                ),
            });
        };
        let (outcome, error) = if from == name {
            (SwitchOutcome::NoOp, None)
        } else {
            match handle.switch_to(name) {
                Ok(()) => (SwitchOutcome::Switched, None),
                Err(e) => (SwitchOutcome::Refused, Some(e.to_string())),
            }
        };
        if outcome == SwitchOutcome::Switched {
            self.counts.count(&from, name, "kernel");
        }
        self.telemetry.write(&TcpSwitchEvent {
            head: EventHead::now("cc_switch", conn_id, Transport::Tcp),
            from: &from,
            to: name,
            mode: "kernel",
            outcome,
            error: error.clone(),
        });
        match error {
            Some(message) => Err(SwitchError::Kernel { conn_id, message }),
            None => Ok(()),
        }
    }

    /// The controller status of connection `conn_id` (None: unknown, a built-in, or no
    /// ACK yet).
    pub fn status(&self, conn_id: u64) -> Option<ControllerStatus> {
        match &lock(&self.conns).get(&conn_id)?.control {
            CcControl::Quic(h) => h.status(),
            CcControl::QuinnBuiltIn(_) | CcControl::Tcp(_) => None,
        }
    }

    /// Every live connection, by id.
    pub fn list(&self) -> Vec<LiveSummary> {
        let conns = lock(&self.conns);
        let mut out: Vec<LiveSummary> = conns
            .iter()
            .map(|(&conn_id, e)| {
                let (status, switches) = match &e.control {
                    CcControl::Quic(h) => (h.status(), h.switches()),
                    CcControl::QuinnBuiltIn(_) | CcControl::Tcp(_) => (None, 0),
                };
                let kernel_cc = match &e.control {
                    CcControl::Tcp(h) => h.current().ok(),
                    _ => None,
                };
                LiveSummary {
                    conn_id,
                    client_addr: e.client_addr,
                    transport: e.transport,
                    cca: status.as_ref().map(|s| s.cca.name().to_string()).or(kernel_cc),
                    phase: status.as_ref().map(|s| s.phase),
                    cwnd: status.as_ref().map(|s| s.cwnd),
                    pacing_rate: status.as_ref().map(|s| s.pacing_rate),
                    switches,
                    srtt_ms: status.as_ref().map(|s| s.path.srtt.as_secs_f64() * 1e3),
                    min_rtt_ms: status
                        .as_ref()
                        .filter(|s| s.path.min_rtt != std::time::Duration::MAX)
                        .map(|s| s.path.min_rtt.as_secs_f64() * 1e3),
                    delivery_rate: status.as_ref().map(|s| s.path.delivery_rate),
                    sent_bytes: status.as_ref().map(|s| s.path.sent),
                    lost_bytes: status.as_ref().map(|s| s.path.lost),
                }
            })
            .collect();
        out.sort_by_key(|s| s.conn_id);
        out
    }
}

/// Removes a connection from [`LiveConnections`] when it ends.
pub(crate) struct LiveGuard {
    live: Arc<LiveConnections>,
    conn_id: u64,
    app: Arc<AppCounters>,
}

impl LiveGuard {
    /// The connection's application counters.
    pub(crate) fn app(&self) -> Arc<AppCounters> {
        self.app.clone()
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        lock(&self.live.conns).remove(&self.conn_id);
    }
}
