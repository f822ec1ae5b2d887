//! TCP Westwood+ for QUIC (Mascolo, Casetti, Gerla, Sanadidi, Wang, "TCP Westwood:
//! Bandwidth Estimation for Enhanced Transport over Wireless Links", MobiCom 2001;
//! Grieco & Mascolo, "Performance evaluation and comparison of Westwood+, New Reno, and
//! Vegas TCP congestion control", ACM CCR 34(2), 2004).
//!
//! Westwood keeps Reno's growth (slow start, one segment per RTT) but replaces its
//! blind halving: after a loss it sets `ssthresh = BWE × RTT_min`, the window that fills
//! the pipe at the bandwidth the ACKs showed, so a random loss on a wireless link costs
//! little while a congestion loss still drains the queue. The "+" is how BWE is sampled:
//! once per RTT, bytes acknowledged in that RTT over its length (Grieco & Mascolo §2),
//! which is robust to ACK compression, then low-pass filtered. The filter is the
//! exponential average the Linux implementation uses, `BWE ← 7/8 BWE + 1/8 sample`
//! (the paper's own is a discrete Tustin filter with a 4-sample cut-off; both are
//! first-order low-pass filters of about the same time constant, and the EWMA needs no
//! history). One departure, measured: in slow start the estimate is the latest sample,
//! unfiltered (the rate doubles every RTT there, and the filter would leave the first
//! `ssthresh` at a fraction of the pipe; see `sample`).
//!
//! On a loss (CCR 2004 §2, "cwnd = min(cwnd, ssthresh)" after a triple duplicate ACK):
//! `ssthresh = max(BWE × RTT_min, 2 segments)`, `cwnd = min(cwnd, ssthresh)`; one
//! reduction per recovery period (RFC 9002 §7.3.2). Persistent congestion (the paper's
//! timeout) takes the window to 2 segments.

use std::time::{Duration, Instant};

use crate::algorithm::{rate_of_window, window_of_rate, Ack, Algorithm, Phase, SendingRate};
use crate::config::{positive, InvalidParameter};
use crate::loss_based::{self, Recovery};
use crate::path::PathState;

/// Westwood+'s parameters.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WestwoodConfig {
    /// Weight of a new bandwidth sample in the filter, in (0, 1] (1/8).
    pub filter_gain: f64,
    /// Shortest interval a bandwidth sample may cover, ms (Linux uses 50 ms so that a
    /// tiny RTT does not make samples of a handful of ACKs).
    pub min_sample_interval_ms: f64,
}

impl Default for WestwoodConfig {
    fn default() -> Self {
        WestwoodConfig {
            filter_gain: 0.125,
            min_sample_interval_ms: 50.0,
        }
    }
}

impl WestwoodConfig {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), InvalidParameter> {
        positive("westwood.filter_gain", self.filter_gain)?;
        if self.filter_gain > 1.0 {
            return Err(InvalidParameter::new(
                "westwood.filter_gain",
                self.filter_gain,
                "must be at most 1",
            ));
        }
        positive("westwood.min_sample_interval_ms", self.min_sample_interval_ms)
    }
}

/// Westwood+.
#[derive(Debug, Clone)]
pub struct Westwood {
    filter_gain: f64,
    min_interval: Duration,
    /// Max datagram size, bytes.
    mtu: u64,
    /// Congestion window, bytes.
    window: u64,
    /// Slow-start threshold, bytes.
    ssthresh: u64,
    /// Filtered bandwidth estimate BWE, bytes per second (0: no sample yet).
    bwe: f64,
    /// Start of the current sampling interval and the bytes acknowledged in it.
    sample_start: Option<Instant>,
    sample_bytes: u64,
    /// Bytes acknowledged in congestion avoidance not yet turned into growth.
    bytes_acked: u64,
    /// RFC 9002's recovery period.
    recovery: Recovery,
}

impl Westwood {
    /// Westwood+ in slow start from `initial_window` bytes.
    pub fn new(config: &WestwoodConfig, initial_window: u64, _now: Instant, path: &PathState) -> Self {
        Westwood {
            filter_gain: config.filter_gain,
            min_interval: Duration::from_secs_f64(config.min_sample_interval_ms / 1e3),
            mtu: u64::from(path.mtu),
            window: initial_window,
            ssthresh: u64::MAX,
            bwe: 0.0,
            sample_start: None,
            sample_bytes: 0,
            bytes_acked: 0,
            recovery: Recovery::default(),
        }
    }

    fn minimum_window(&self) -> u64 {
        2 * self.mtu
    }

    /// The bandwidth estimate, bytes per second (0 before the first sample).
    pub fn bandwidth_estimate(&self) -> u64 {
        self.bwe as u64
    }

    /// One RTT's sample (Grieco & Mascolo §2): acknowledged bytes over the interval.
    fn sample(&mut self, now: Instant, bytes: u64, path: &PathState) {
        let start = *self.sample_start.get_or_insert(now);
        self.sample_bytes += bytes;
        let elapsed = now.saturating_duration_since(start);
        if elapsed < path.min_rtt_or_srtt().max(self.min_interval) {
            return;
        }
        let rate = self.sample_bytes as f64 / elapsed.as_secs_f64();
        // In slow start the ACK rate doubles every RTT: a filter with a time constant of
        // eight samples would trail it by a factor of about four when the first loss
        // comes (measured at 50 Mbit/s: a window of 84 kB set where the pipe was
        // 250 kB, and five seconds of Reno growth to get back). So the filter starts at
        // the latest sample there and smooths only once the rate is steady.
        let slow_start = self.window < self.ssthresh;
        self.bwe = if self.bwe == 0.0 || slow_start {
            rate
        } else {
            (1.0 - self.filter_gain) * self.bwe + self.filter_gain * rate
        };
        self.sample_start = Some(now);
        self.sample_bytes = 0;
    }
}

impl Algorithm for Westwood {
    fn on_ack(&mut self, now: Instant, ack: &Ack, path: &PathState) {
        self.sample(now, ack.bytes, path);
        if self.recovery.acked(ack.sent) {
            return;
        }
        if ack.app_limited {
            return;
        }
        if self.window < self.ssthresh {
            self.window += ack.bytes;
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
        path: &PathState,
    ) {
        if !self.recovery.congestion(now, sent) {
            return;
        }
        let pipe = if self.bwe > 0.0 {
            window_of_rate(self.bwe as u64, path.min_rtt_or_srtt())
        } else {
            // No estimate yet (a loss in the first RTT): Reno's halving.
            self.window / 2
        };
        self.ssthresh = pipe.max(self.minimum_window());
        self.window = self.window.min(self.ssthresh);
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

    /// Full switching (Floo §3.4): congestion avoidance at the carried window with
    /// `ssthresh` = that window; the carried pacing rate seeds BWE, so a loss right after
    /// the switch already has a pipe size to fall back to.
    fn enter_converged(&mut self, _now: Instant, rate: SendingRate, path: &PathState) {
        self.window = rate.cwnd.max(self.minimum_window());
        self.ssthresh = self.window;
        self.recovery.clear();
        self.bytes_acked = 0;
        if self.bwe == 0.0 {
            self.bwe = if rate.pacing_rate > 0 {
                rate.pacing_rate as f64
            } else {
                rate_of_window(self.window, path.srtt) as f64
            };
        }
    }

    fn clone_box(&self) -> Box<dyn Algorithm> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cubic::{Cubic, CubicConfig};
    use crate::newreno::{NewReno, NewRenoConfig};
    use crate::testbed::{run, Bottleneck};

    fn path() -> PathState {
        PathState::new(1200, Duration::from_millis(333))
    }

    #[test]
    fn fills_a_10_and_a_50_mbit_bottleneck() {
        for mbit in [10.0, 50.0] {
            let mut c = Westwood::new(&WestwoodConfig::default(), 12_000, Instant::now(), &path());
            let out = run(
                &mut c,
                Bottleneck::new(mbit, 40, 1.0),
                Duration::from_secs(30),
                Duration::from_secs(5),
            );
            assert!(out.utilisation > 0.9, "{mbit} Mbit/s: utilisation {}", out.utilisation);
            let bwe = c.bandwidth_estimate() as f64;
            let rate = mbit * 1e6 / 8.0;
            assert!((bwe - rate).abs() / rate < 0.15, "BWE {bwe} B/s at {rate} B/s");
        }
    }

    #[test]
    fn random_loss_costs_westwood_less_than_newreno_and_cubic() {
        for loss in [0.01, 0.02] {
            let link = Bottleneck {
                loss,
                ..Bottleneck::new(10.0, 40, 1.0)
            };
            let t = Duration::from_secs(40);
            let w = run(
                &mut Westwood::new(&WestwoodConfig::default(), 12_000, Instant::now(), &path()),
                link,
                t,
                Duration::from_secs(5),
            );
            let r = run(
                &mut NewReno::new(&NewRenoConfig::default(), 12_000, Instant::now(), &path()),
                link,
                t,
                Duration::from_secs(5),
            );
            let c = run(
                &mut Cubic::new(&CubicConfig::default(), 12_000, Instant::now(), &path()),
                link,
                t,
                Duration::from_secs(5),
            );
            eprintln!(
                "loss {loss}: westwood {:.3}, newreno {:.3}, cubic {:.3}",
                w.utilisation, r.utilisation, c.utilisation
            );
            assert!(
                w.utilisation > r.utilisation && w.utilisation > c.utilisation,
                "loss {loss}: westwood {} newreno {} cubic {}",
                w.utilisation,
                r.utilisation,
                c.utilisation
            );
        }
    }

    #[test]
    fn a_loss_sets_ssthresh_to_the_estimated_pipe() {
        let t0 = Instant::now();
        let mut p = path();
        p.min_rtt = Duration::from_millis(40);
        let mut c = Westwood::new(&WestwoodConfig::default(), 100_000, t0, &p);
        c.enter_converged(
            t0,
            SendingRate {
                cwnd: 100_000,
                pacing_rate: 500_000,
            },
            &p,
        );
        c.on_congestion_event(
            t0 + Duration::from_millis(10),
            t0 + Duration::from_millis(5),
            false,
            1200,
            &p,
        );
        // 500 kB/s × 40 ms = 20 kB.
        assert_eq!(c.ssthresh(), Some(20_000));
        assert_eq!(c.window(), 20_000);
    }

    #[test]
    fn a_filter_gain_above_one_is_refused_by_name() {
        let e = WestwoodConfig {
            filter_gain: 2.0,
            ..WestwoodConfig::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.field, "westwood.filter_gain");
    }
}
