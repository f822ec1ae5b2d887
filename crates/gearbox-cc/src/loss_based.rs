//! What the loss-based algorithms (NewReno, CUBIC, Westwood+) share: RFC 9002's
//! recovery period and the phases they report.

use std::time::Instant;

use crate::algorithm::Phase;

/// RFC 9002 §7.3.2: the window is reduced once per congestion event. A loss of a packet
/// sent before the current recovery period began belongs to the same event, and the
/// period ends when a packet sent after it began is acknowledged.
#[derive(Debug, Clone, Copy, Default)]
pub struct Recovery {
    start: Option<Instant>,
}

impl Recovery {
    /// An ACK of a packet sent at `sent`. True while it belongs to the recovery period
    /// (the window must not grow); an ACK of a later packet ends the period.
    pub fn acked(&mut self, sent: Instant) -> bool {
        match self.start {
            Some(start) if sent <= start => true,
            Some(_) => {
                self.start = None;
                false
            }
            None => false,
        }
    }

    /// A congestion event at `now` of packets sent at or before `sent`. True when it
    /// opens a new recovery period (the window is to be reduced), false when it belongs
    /// to the current one.
    pub fn congestion(&mut self, now: Instant, sent: Instant) -> bool {
        if self.start.is_some_and(|start| sent <= start) {
            return false;
        }
        self.start = Some(now);
        true
    }

    /// Whether a recovery period is open.
    pub fn is_active(&self) -> bool {
        self.start.is_some()
    }

    /// Closes any recovery period (a full switch starts outside one).
    pub fn clear(&mut self) {
        self.start = None;
    }
}

/// The phase of a loss-based algorithm: recovering, slow start below `ssthresh`, else
/// congestion avoidance.
pub fn phase(recovery: &Recovery, window: u64, ssthresh: u64) -> Phase {
    if recovery.is_active() {
        Phase::Recovering
    } else if window < ssthresh {
        Phase::Starting
    } else {
        Phase::Converged
    }
}

/// The telemetry name of such a phase; `starting` names the slow start in use.
pub fn phase_name(phase: Phase, starting: &'static str) -> &'static str {
    match phase {
        Phase::Recovering => "recovery",
        Phase::Starting => starting,
        _ => "congestion_avoidance",
    }
}

/// `ssthresh` as the trait reports it: None before the first reduction.
pub fn reported_ssthresh(ssthresh: u64) -> Option<u64> {
    (ssthresh != u64::MAX).then_some(ssthresh)
}
