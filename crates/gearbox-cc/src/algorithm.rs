//! The shape every gearbox controller has, below quinn's `Controller` trait.
//!
//! quinn asks a controller for one number, its window, and tells it of sends, ACKs and
//! losses. Switching a live connection from one algorithm to another (Floo §3.4) needs
//! more: which phase the algorithm is in (a switch waits for a converged one), its
//! sending rate as a window *and* as a pacing rate (so the next algorithm can start
//! where this one stood, Table 3's "sending-rate variables"), and a way to enter the
//! converged phase directly. Observation variables (bottleneck bandwidth, min RTT,
//! smoothed RTT, Table 3) are not the algorithm's: they live in [`PathState`], kept at
//! connection level by [`crate::Switchable`] and handed to every event, so each
//! algorithm reads the same estimates and a switch loses none of them.
//!
//! The trait takes plain values ([`Ack`], [`PathState`]) rather than quinn's
//! `RttEstimator`, which only quinn can construct, so the algorithms can be driven and
//! tested without a connection.

use std::time::{Duration, Instant};

use crate::path::PathState;

/// Which part of its life cycle an algorithm is in, as switching needs to know it.
///
/// Floo §3.4 ("phase migration") switches only out of a converged phase and starts the
/// new algorithm in its converged phase; the algorithm's own name for the phase is
/// [`Algorithm::phase_name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Probing for capacity from the initial window: slow start, BBR's Startup, Copa's
    /// and Vivace's starting phase.
    Starting,
    /// Reacting to a loss: fast recovery.
    Recovering,
    /// BBR's Drain: emptying the queue Startup built.
    Draining,
    /// The steady state: congestion avoidance, BBR's ProbeBW, Copa's and Vivace's
    /// steady rate adjustment. A full switch happens only from here.
    Converged,
    /// BBR's ProbeRTT: window cut to 4 packets to measure the path's min RTT.
    ProbingRtt,
}

impl Phase {
    /// `starting`, `recovering`, `draining`, `converged` or `probing_rtt`.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Recovering => "recovering",
            Phase::Draining => "draining",
            Phase::Converged => "converged",
            Phase::ProbingRtt => "probing_rtt",
        }
    }
}

/// One acknowledged packet, as quinn reports it (`Controller::on_ack`) plus the RTT
/// and delivery-rate samples [`crate::Switchable`] derived from it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ack {
    /// When the packet was sent.
    pub sent: Instant,
    /// Bytes the packet carried.
    pub bytes: u64,
    /// Whether the sender was limited by the application (not the window) before this
    /// ACK arrived; window growth should not follow app-limited ACKs (RFC 9002 §7.8).
    pub app_limited: bool,
    /// RTT sample of this packet: ACK arrival minus send time (includes the peer's ACK
    /// delay; quinn's smoothed RTT in [`PathState::srtt`] removes it).
    pub rtt: Duration,
}

/// A sending rate in both forms an algorithm may keep it (Floo §3.4, Table 3): the
/// unit a switch carries from one algorithm to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SendingRate {
    /// Congestion window, bytes.
    pub cwnd: u64,
    /// Pacing rate, bytes per second.
    pub pacing_rate: u64,
}

impl SendingRate {
    /// A window-based algorithm's rate: `cwnd` per smoothed RTT.
    pub fn from_window(cwnd: u64, srtt: Duration) -> Self {
        SendingRate {
            cwnd,
            pacing_rate: rate_of_window(cwnd, srtt),
        }
    }
}

/// Bytes per second a window of `cwnd` bytes sends per `rtt` (cwnd / RTT).
pub fn rate_of_window(cwnd: u64, rtt: Duration) -> u64 {
    let secs = rtt.as_secs_f64().max(1e-6);
    (cwnd as f64 / secs).min(u64::MAX as f64) as u64
}

/// The window that carries `rate` bytes per second over `rtt` (rate × RTT): how a
/// rate-based algorithm speaks to quinn, which paces and limits by the window alone
/// (docs/cc.md "Rates on a window-based stack").
pub fn window_of_rate(rate: u64, rtt: Duration) -> u64 {
    (rate as f64 * rtt.as_secs_f64()).min(u64::MAX as f64) as u64
}

/// A congestion-control algorithm of the suite.
///
/// Event methods mirror quinn's `Controller` (same order, same meaning); each also
/// gets the connection's [`PathState`], already updated with the event.
pub trait Algorithm: Send + Sync + std::fmt::Debug {
    /// Packets carrying `bytes` were sent at `now` (quinn calls this once per batch).
    fn on_sent(&mut self, now: Instant, bytes: u64, path: &PathState) {
        let _ = (now, bytes, path);
    }

    /// One packet was acknowledged.
    fn on_ack(&mut self, now: Instant, ack: &Ack, path: &PathState);

    /// The ACKs of one ACK frame have all been delivered; `in_flight` bytes remain
    /// unacknowledged.
    fn on_end_acks(&mut self, now: Instant, in_flight: u64, app_limited: bool, path: &PathState) {
        let _ = (now, in_flight, app_limited, path);
    }

    /// Packets sent at or before `sent` were lost (`lost_bytes` of them) or marked
    /// with ECN-CE (`lost_bytes == 0`).
    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        persistent_congestion: bool,
        lost_bytes: u64,
        path: &PathState,
    );

    /// The path's MTU changed (`path.mtu` holds the new one).
    fn on_mtu_update(&mut self, path: &PathState) {
        let _ = path;
    }

    /// Bytes that may be in flight.
    fn window(&self) -> u64;

    /// Slow-start threshold in bytes, for algorithms that have one.
    fn ssthresh(&self) -> Option<u64> {
        None
    }

    /// The sending rate the algorithm intends (bytes per second for pacing; the window
    /// for its window form). Window-based algorithms: window per smoothed RTT.
    fn sending_rate(&self, path: &PathState) -> SendingRate {
        SendingRate::from_window(self.window(), path.srtt)
    }

    /// The coarse phase switching looks at.
    fn phase(&self) -> Phase;

    /// The algorithm's own name for its phase (`slow_start`, `probe_bw`, ...), for
    /// telemetry.
    fn phase_name(&self) -> &'static str;

    /// Full switching (Floo §3.4): leave whatever phase the freshly built algorithm is
    /// in and continue from `rate` in the converged phase (BBR: ProbeRTT first, then
    /// ProbeBW, Floo Fig. 12d). Parameters stay; other variables take their defaults.
    fn enter_converged(&mut self, now: Instant, rate: SendingRate, path: &PathState);

    /// Copy of the algorithm (quinn clones controllers when a path is migrated).
    fn clone_box(&self) -> Box<dyn Algorithm>;
}
