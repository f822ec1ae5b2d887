//! What the loss-based algorithms (NewReno, CUBIC, Westwood+) share: RFC 9002's
//! recovery period and the phases they report.

use std::time::Instant;

use crate::algorithm::Phase;

/// RFC 9002 §7.3.2: the window is reduced once per congestion event. A loss of a packet
/// sent before the latest recovery period began belongs to that event even when it is
/// detected after the period ended (a time-threshold loss found late), and the period
/// ends when a packet sent after it began is acknowledged.
#[derive(Debug, Clone, Copy, Default)]
pub struct Recovery {
    /// When the latest recovery period began (kept after it ends).
    start: Option<Instant>,
    /// Whether that period is still open.
    active: bool,
}

impl Recovery {
    /// An ACK of a packet sent at `sent`. True while it belongs to the open recovery
    /// period (the window must not grow); an ACK of a later packet ends the period.
    pub fn acked(&mut self, sent: Instant) -> bool {
        match self.start {
            Some(start) if self.active && sent <= start => true,
            _ => {
                self.active = false;
                false
            }
        }
    }

    /// A congestion event at `now` of packets sent at or before `sent`. True when it
    /// opens a new recovery period (the window is to be reduced), false when it belongs
    /// to the latest one.
    pub fn congestion(&mut self, now: Instant, sent: Instant) -> bool {
        if self.start.is_some_and(|start| sent <= start) {
            return false;
        }
        self.start = Some(now);
        self.active = true;
        true
    }

    /// Whether a recovery period is open.
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// Closes any recovery period and forgets it (a full switch starts outside one).
    pub fn clear(&mut self) {
        self.start = None;
        self.active = false;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_late_loss_of_an_old_packet_is_the_same_event() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut r = Recovery::default();
        assert!(r.congestion(ms(100), ms(50)));
        assert!(r.acked(ms(90)), "sent before the period: no growth");
        assert!(!r.acked(ms(110)), "sent after: the period ends");
        assert!(!r.is_active());
        assert!(
            !r.congestion(ms(200), ms(60)),
            "a late loss of an old packet: same event"
        );
        assert!(r.congestion(ms(300), ms(150)), "a loss of a newer packet: a new event");
    }
}
