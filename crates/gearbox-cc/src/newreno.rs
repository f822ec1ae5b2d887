//! NewReno for QUIC, RFC 9002 §7 (Appendix B's pseudocode): slow start, a recovery
//! period per loss event, and congestion avoidance growing by one datagram per window
//! acknowledged (appropriate byte counting, RFC 3465).
//!
//! quinn has its own NewReno; this one is the suite's, so a connection can switch into
//! and out of it. quinn's stays available (`quinn-newreno`) as a peer to compare with.

use std::time::Instant;

use crate::algorithm::{Ack, Algorithm, Phase, SendingRate};
use crate::config::{positive, InvalidParameter};
use crate::loss_based::{self, Recovery};
use crate::path::PathState;

/// NewReno's parameters.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NewRenoConfig {
    /// Window multiplier on a loss (RFC 9002 §7.3.2 kLossReductionFactor), in (0, 1).
    pub loss_reduction_factor: f64,
}

impl Default for NewRenoConfig {
    fn default() -> Self {
        NewRenoConfig {
            loss_reduction_factor: 0.5,
        }
    }
}

impl NewRenoConfig {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), InvalidParameter> {
        positive("newreno.loss_reduction_factor", self.loss_reduction_factor)?;
        if self.loss_reduction_factor >= 1.0 {
            return Err(InvalidParameter::new(
                "newreno.loss_reduction_factor",
                self.loss_reduction_factor,
                "must be below 1",
            ));
        }
        Ok(())
    }
}

/// RFC 9002 NewReno.
#[derive(Debug, Clone)]
pub struct NewReno {
    loss_reduction_factor: f64,
    /// Congestion window, bytes.
    window: u64,
    /// Slow-start threshold, bytes (`u64::MAX` until the first loss).
    ssthresh: u64,
    /// RFC 9002's recovery period.
    recovery: Recovery,
    /// Bytes acknowledged since the window last grew in congestion avoidance.
    bytes_acked: u64,
    /// Max datagram size, bytes.
    mtu: u64,
}

impl NewReno {
    /// NewReno in slow start from `initial_window` bytes.
    pub fn new(config: &NewRenoConfig, initial_window: u64, _now: Instant, path: &PathState) -> Self {
        NewReno {
            loss_reduction_factor: config.loss_reduction_factor,
            window: initial_window,
            ssthresh: u64::MAX,
            recovery: Recovery::default(),
            bytes_acked: 0,
            mtu: u64::from(path.mtu),
        }
    }

    fn minimum_window(&self) -> u64 {
        2 * self.mtu
    }
}

impl Algorithm for NewReno {
    fn on_ack(&mut self, _now: Instant, ack: &Ack, _path: &PathState) {
        if self.recovery.acked(ack.sent) {
            return;
        }
        if ack.app_limited {
            return;
        }
        if self.window < self.ssthresh {
            self.window += ack.bytes;
            if self.window >= self.ssthresh {
                self.bytes_acked = self.window - self.ssthresh;
            }
        } else {
            self.bytes_acked += ack.bytes;
            if self.bytes_acked >= self.window {
                self.bytes_acked -= self.window;
                self.window += self.mtu;
            }
        }
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        persistent_congestion: bool,
        _lost_bytes: u64,
        _path: &PathState,
    ) {
        if !self.recovery.congestion(now, sent) {
            return;
        }
        self.window = ((self.window as f64 * self.loss_reduction_factor) as u64).max(self.minimum_window());
        self.ssthresh = self.window;
        self.bytes_acked = 0;
        if persistent_congestion {
            self.window = self.minimum_window();
        }
    }

    fn on_mtu_update(&mut self, path: &PathState) {
        self.mtu = u64::from(path.mtu);
        self.window = self.window.max(self.minimum_window());
    }

    fn window(&self) -> u64 {
        self.window
    }

    fn ssthresh(&self) -> Option<u64> {
        loss_based::reported_ssthresh(self.ssthresh)
    }

    fn phase(&self) -> Phase {
        loss_based::phase(&self.recovery, self.window, self.ssthresh)
    }

    fn phase_name(&self) -> &'static str {
        loss_based::phase_name(self.phase(), "slow_start")
    }

    fn enter_converged(&mut self, _now: Instant, rate: SendingRate, _path: &PathState) {
        self.window = rate.cwnd.max(self.minimum_window());
        self.ssthresh = self.window;
        self.recovery.clear();
        self.bytes_acked = 0;
    }

    fn clone_box(&self) -> Box<dyn Algorithm> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ack(sent: Instant, bytes: u64) -> Ack {
        Ack {
            sent,
            bytes,
            app_limited: false,
            rtt: Duration::from_millis(50),
        }
    }

    #[test]
    fn slow_start_doubles_then_a_loss_halves_once_per_round() {
        let t0 = Instant::now();
        let path = PathState::new(1200, Duration::from_millis(50));
        let mut c = NewReno::new(&NewRenoConfig::default(), 12_000, t0, &path);
        assert_eq!(c.phase(), Phase::Starting);
        c.on_ack(t0, &ack(t0, 12_000), &path);
        assert_eq!(c.window(), 24_000);
        let t1 = t0 + Duration::from_millis(60);
        c.on_congestion_event(t1, t0, false, 1200, &path);
        assert_eq!(c.window(), 12_000);
        assert_eq!(c.phase(), Phase::Recovering);
        // A second loss of a packet sent before recovery began is the same event.
        c.on_congestion_event(t1, t0, false, 1200, &path);
        assert_eq!(c.window(), 12_000);
        // An ACK of a packet sent after it ends recovery; then one MTU per window.
        c.on_ack(t1, &ack(t1 + Duration::from_millis(1), 12_000), &path);
        assert_eq!(c.phase(), Phase::Converged);
        assert_eq!(c.window(), 13_200);
    }

    #[test]
    fn entering_congestion_avoidance_keeps_the_rate_it_is_given() {
        let t0 = Instant::now();
        let path = PathState::new(1200, Duration::from_millis(50));
        let mut c = NewReno::new(&NewRenoConfig::default(), 12_000, t0, &path);
        c.enter_converged(
            t0,
            SendingRate {
                cwnd: 90_000,
                pacing_rate: 1_800_000,
            },
            &path,
        );
        assert_eq!((c.window(), c.phase()), (90_000, Phase::Converged));
    }

    #[test]
    fn a_loss_factor_of_one_or_more_is_refused() {
        let e = NewRenoConfig {
            loss_reduction_factor: 1.0,
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.field, "newreno.loss_reduction_factor");
    }
}
