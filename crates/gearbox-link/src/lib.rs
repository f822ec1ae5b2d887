//! # gearbox-link — the sans-IO link model of the gearbox lab
//!
//! One [`Link`] is one direction of a network path: packets go in with
//! [`Link::enqueue`], come out with [`Link::poll_transmit`], and
//! [`Link::next_wakeup`] says when to call again. It has no sockets, clocks or
//! threads: time is a [`std::time::Duration`] since an epoch the caller chooses
//! (the link's time zero — a trace's first millisecond, a schedule's `at_ms`),
//! passed into every call. `Duration` was chosen over a bare `u64` of
//! nanoseconds so a unit mistake cannot compile; it holds nanoseconds exactly.
//! The TUN emulator drives it with real elapsed time, the simulator with
//! virtual time (docs/architecture.md "One link model, two clocks").
//!
//! The link is a chain of small stages, each testable alone, as in mahimahi's
//! `mm-delay … mm-link … mm-loss` shells:
//!
//! 1. [`policer`] — per-protocol (UDP or TCP) random drop, token-bucket rate
//!    limit or block: the ISP/middlebox treatment of QUIC in WiseTrans
//!    (§II-B, Fig. 7).
//! 2. [`loss`] — Bernoulli or Gilbert-Elliott random loss.
//! 3. [`queue`] + [`rate`] — the bottleneck: drop-tail / drop-head / CoDel
//!    (RFC 8289) limited in packets, bytes or BDP multiples (Floo
//!    Table 4), drained at a constant rate or by a mahimahi trace with exact
//!    mahimahi semantics.
//! 4. [`delay`] — fixed delay plus jitter, order-preserving unless asked.
//!
//! Parameters change at scheduled times ([`ScheduledChange`]; TCP WISE
//! §V, Figs. 7-9). [`trace`] reads and writes mahimahi traces and
//! [`tracegen`] synthesises seeded imitations of public trace families.
//!
//! Deterministic: the same config, seed and call sequence give the same
//! output, on any machine.

pub mod config;
pub mod delay;
pub mod link;
pub mod loss;
pub mod policer;
pub mod queue;
pub mod rate;
pub mod trace;
pub mod tracegen;

pub use config::{ConfigError, Discipline, LinkConfig, QueueConfig, ScheduledChange};
pub use link::{EventKind, Link, LinkError, LinkStats, PacketEvent, Verdict};
pub use loss::{GilbertElliott, LossConfig};
pub use policer::{PolicerConfig, Protocol};
pub use rate::Rate;
pub use trace::{Trace, TraceError};

/// Seconds to a `Duration`, saturating instead of panicking on absurd values
/// (a config field of 1e300 ms must not crash the emulator).
pub(crate) fn secs(v: f64) -> std::time::Duration {
    std::time::Duration::try_from_secs_f64(v.max(0.0)).unwrap_or(std::time::Duration::MAX)
}

/// The stage of the chain that dropped a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Stage 1, the protocol policer.
    Policer,
    /// Stage 2, random loss.
    Loss,
    /// Stage 3, the bottleneck queue.
    Queue,
}

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The policer blocks this protocol.
    PolicerBlocked,
    /// The policer's random drop for this protocol.
    PolicerRandom,
    /// The policer's token bucket was short of tokens.
    PolicerRateLimited,
    /// Random (Bernoulli or Gilbert-Elliott) loss.
    RandomLoss,
    /// The queue was full (drop-tail, or CoDel's tail drop, or a packet larger than the limit).
    QueueFull,
    /// Evicted from the head of a full drop-head queue.
    QueueHeadDrop,
    /// Dropped by CoDel's control law at dequeue.
    Codel,
}

impl DropReason {
    /// The stage that made this drop.
    pub fn stage(self) -> Stage {
        match self {
            DropReason::PolicerBlocked | DropReason::PolicerRandom | DropReason::PolicerRateLimited => Stage::Policer,
            DropReason::RandomLoss => Stage::Loss,
            DropReason::QueueFull | DropReason::QueueHeadDrop | DropReason::Codel => Stage::Queue,
        }
    }
}
