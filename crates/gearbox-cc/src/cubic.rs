//! CUBIC for QUIC, RFC 9438, with HyStart++ (RFC 9406) ending slow start before it
//! overflows the queue.
//!
//! - Congestion avoidance (RFC 9438 §4.2): the window follows
//!   `W_cubic(t) = C (t - K)^3 + W_max`, `K = cbrt(W_max (1 - β) / C)`, in segments,
//!   with `t` the time since the congestion event; the target one RTT ahead,
//!   `W_cubic(t + RTT)`, clamped to `[cwnd, 1.5 cwnd]` (§4.2), gives the per-ACK growth.
//! - The Reno-friendly region (§4.3): `W_est` grows by `α_cubic = 3 (1 - β) / (1 + β)`
//!   segments per window acknowledged; the window is never below it.
//! - On a congestion event (§4.6): `ssthresh = cwnd = max(β cwnd, 2 segments)` with
//!   β = 0.7, one reduction per recovery period (RFC 9002 §7.3.2); fast convergence
//!   (§4.7) lowers `W_max` further when the window shrank since the last event.
//! - Persistent congestion (RFC 9002 §7.6.2): the window drops to 2 segments and the
//!   epoch restarts.
//! - Slow start with HyStart++ (RFC 9406 §4): per round, the min RTT of the first
//!   `N_RTT_SAMPLE` ACKs; when it rises above the last round's by `clamp(last / 8,
//!   4 ms, 16 ms)`, slow start continues as Conservative Slow Start (growth divided by
//!   `CSS_GROWTH_DIVISOR`) for `CSS_ROUNDS` rounds, then ends; an RTT back below the
//!   baseline returns to slow start. Rounds are the connection's ([`PathState`]
//!   `round_start`, a round ending when a packet sent after the previous round's end is
//!   acknowledged, RFC 9406 §4.2's definition).
//!
//! quinn's own Cubic has no HyStart++ and cannot be switched; it stays available as
//! `quinn-cubic` to compare with (docs/cc.md).

use std::time::{Duration, Instant};

use crate::algorithm::{Ack, Algorithm, Phase, SendingRate};
use crate::config::{positive, InvalidParameter};
use crate::loss_based::{self, Recovery};
use crate::path::PathState;

/// CUBIC's and HyStart++'s parameters (RFC 9438 §4, RFC 9406 §4.3 defaults).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CubicConfig {
    /// C, segments per second cubed (RFC 9438 §4.2: 0.4).
    pub c: f64,
    /// β_cubic, the window's multiplicative decrease (§4.6: 0.7), in (0, 1).
    pub beta: f64,
    /// Fast convergence (§4.7).
    pub fast_convergence: bool,
    /// HyStart++ in slow start (RFC 9406).
    pub hystart: bool,
    /// RTT samples per round before HyStart++ compares rounds (N_RTT_SAMPLE: 8).
    pub hystart_rtt_samples: u32,
    /// Lower bound of the RTT increase that ends slow start, ms (MIN_RTT_THRESH: 4).
    pub hystart_min_rtt_thresh_ms: f64,
    /// Upper bound of that increase, ms (MAX_RTT_THRESH: 16).
    pub hystart_max_rtt_thresh_ms: f64,
    /// Growth divisor in Conservative Slow Start (CSS_GROWTH_DIVISOR: 4).
    pub hystart_css_growth_divisor: f64,
    /// Rounds of Conservative Slow Start before congestion avoidance (CSS_ROUNDS: 5).
    pub hystart_css_rounds: u32,
}

impl Default for CubicConfig {
    fn default() -> Self {
        CubicConfig {
            c: 0.4,
            beta: 0.7,
            fast_convergence: true,
            hystart: true,
            hystart_rtt_samples: 8,
            hystart_min_rtt_thresh_ms: 4.0,
            hystart_max_rtt_thresh_ms: 16.0,
            hystart_css_growth_divisor: 4.0,
            hystart_css_rounds: 5,
        }
    }
}

impl CubicConfig {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), InvalidParameter> {
        positive("cubic.c", self.c)?;
        positive("cubic.beta", self.beta)?;
        if self.beta >= 1.0 {
            return Err(InvalidParameter::new("cubic.beta", self.beta, "must be below 1"));
        }
        positive("cubic.hystart_min_rtt_thresh_ms", self.hystart_min_rtt_thresh_ms)?;
        positive("cubic.hystart_max_rtt_thresh_ms", self.hystart_max_rtt_thresh_ms)?;
        if self.hystart_max_rtt_thresh_ms < self.hystart_min_rtt_thresh_ms {
            return Err(InvalidParameter::new(
                "cubic.hystart_max_rtt_thresh_ms",
                self.hystart_max_rtt_thresh_ms,
                "must be at least cubic.hystart_min_rtt_thresh_ms",
            ));
        }
        if self.hystart_css_growth_divisor < 1.0 || !self.hystart_css_growth_divisor.is_finite() {
            return Err(InvalidParameter::new(
                "cubic.hystart_css_growth_divisor",
                self.hystart_css_growth_divisor,
                "must be a finite number, 1 or above",
            ));
        }
        if self.hystart_rtt_samples == 0 {
            return Err(InvalidParameter::new(
                "cubic.hystart_rtt_samples",
                0,
                "must be at least 1",
            ));
        }
        Ok(())
    }
}

/// HyStart++ state (RFC 9406 §4.2).
#[derive(Debug, Clone, Copy, PartialEq)]
enum SlowStart {
    /// Standard slow start.
    Standard,
    /// Conservative Slow Start: `rounds` rounds done, entered when the round's min RTT
    /// was `baseline`.
    Conservative { rounds: u32, baseline: Duration },
    /// Slow start is over (a loss or HyStart++ ended it).
    Done,
}

/// RFC 9438 CUBIC.
#[derive(Debug, Clone)]
pub struct Cubic {
    config: CubicConfig,
    /// Max datagram size, bytes.
    mtu: u64,
    /// Congestion window, bytes.
    window: u64,
    /// Slow-start threshold, bytes (`u64::MAX` before the first reduction).
    ssthresh: u64,
    /// W_max: window before the last reduction, bytes.
    w_max: f64,
    /// K, seconds: when W_cubic regrows to W_max.
    k: f64,
    /// Start of the current congestion-avoidance epoch (None: none yet).
    epoch_start: Option<Instant>,
    /// W_est of the Reno-friendly region, bytes.
    w_est: f64,
    /// Bytes acknowledged in congestion avoidance not yet turned into growth.
    cwnd_inc: f64,
    /// RFC 9002's recovery period.
    recovery: Recovery,
    slow_start: SlowStart,
    /// HyStart++: min RTT of the current and of the last round, and the samples taken.
    round_min_rtt: Duration,
    last_round_min_rtt: Duration,
    round_samples: u32,
}

impl Cubic {
    /// CUBIC in slow start from `initial_window` bytes.
    pub fn new(config: &CubicConfig, initial_window: u64, _now: Instant, path: &PathState) -> Self {
        Cubic {
            config: config.clone(),
            mtu: u64::from(path.mtu),
            window: initial_window,
            ssthresh: u64::MAX,
            w_max: 0.0,
            k: 0.0,
            epoch_start: None,
            w_est: 0.0,
            cwnd_inc: 0.0,
            recovery: Recovery::default(),
            slow_start: if config.hystart {
                SlowStart::Standard
            } else {
                SlowStart::Done
            },
            round_min_rtt: Duration::MAX,
            last_round_min_rtt: Duration::MAX,
            round_samples: 0,
        }
    }

    fn minimum_window(&self) -> u64 {
        2 * self.mtu
    }

    fn in_slow_start(&self) -> bool {
        self.window < self.ssthresh
    }

    /// K of RFC 9438 §4.2 (Figure 2), seconds, for the current W_max and window.
    fn compute_k(&self) -> f64 {
        let mss = self.mtu as f64;
        let w = self.window as f64;
        if self.w_max <= w {
            return 0.0;
        }
        ((self.w_max - w) / mss / self.config.c).cbrt()
    }

    /// W_cubic(t) in bytes (RFC 9438 §4.2 Figure 1).
    fn w_cubic(&self, t: f64) -> f64 {
        let mss = self.mtu as f64;
        self.config.c * (t - self.k).powi(3) * mss + self.w_max
    }

    /// Starts a congestion-avoidance epoch at `now` from the current window.
    fn start_epoch(&mut self, now: Instant) {
        self.epoch_start = Some(now);
        self.k = self.compute_k();
        self.w_est = self.window as f64;
        self.cwnd_inc = 0.0;
    }

    fn congestion_avoidance(&mut self, now: Instant, bytes: u64, path: &PathState) {
        let start = self.epoch_start.unwrap_or(now);
        let mss = self.mtu as f64;
        let cwnd = self.window as f64;
        let t = now.saturating_duration_since(start).as_secs_f64();
        let rtt = path.srtt.as_secs_f64();
        // RFC 9438 §4.2: target = clamp(W_cubic(t + RTT), cwnd, 1.5 cwnd).
        let target = self.w_cubic(t + rtt).clamp(cwnd, 1.5 * cwnd);
        // §4.3: W_est += α_cubic × bytes / cwnd (segments per window acknowledged).
        let beta = self.config.beta;
        let alpha = 3.0 * (1.0 - beta) / (1.0 + beta);
        self.w_est += alpha * mss * bytes as f64 / cwnd;
        let next = if self.w_cubic(t) < self.w_est {
            // Reno-friendly region: follow W_est.
            self.w_est.max(cwnd)
        } else {
            // Concave or convex region: grow by (target - cwnd) / cwnd per MSS acked.
            self.cwnd_inc += (target - cwnd) / cwnd * bytes as f64;
            let grow = self.cwnd_inc.floor();
            self.cwnd_inc -= grow;
            cwnd + grow
        };
        self.window = (next as u64).max(self.window);
    }

    /// RFC 9406 §4.2: the RTT test of one ACK in slow start.
    fn hystart_on_ack(&mut self, ack: &Ack, path: &PathState) {
        if path.round_start {
            self.last_round_min_rtt = self.round_min_rtt;
            self.round_min_rtt = Duration::MAX;
            self.round_samples = 0;
            if let SlowStart::Conservative { rounds, baseline } = self.slow_start {
                let rounds = rounds + 1;
                if rounds >= self.config.hystart_css_rounds {
                    // CSS done: congestion avoidance from here (§4.2).
                    self.ssthresh = self.window;
                    self.slow_start = SlowStart::Done;
                    return;
                }
                self.slow_start = SlowStart::Conservative { rounds, baseline };
            }
        }
        self.round_min_rtt = self.round_min_rtt.min(ack.rtt);
        self.round_samples += 1;
        if self.round_samples < self.config.hystart_rtt_samples || self.last_round_min_rtt == Duration::MAX {
            return;
        }
        match self.slow_start {
            SlowStart::Standard => {
                let lo = Duration::from_secs_f64(self.config.hystart_min_rtt_thresh_ms / 1e3);
                let hi = Duration::from_secs_f64(self.config.hystart_max_rtt_thresh_ms / 1e3);
                let thresh = (self.last_round_min_rtt / 8).clamp(lo, hi);
                if self.round_min_rtt >= self.last_round_min_rtt + thresh {
                    self.slow_start = SlowStart::Conservative {
                        rounds: 0,
                        baseline: self.round_min_rtt,
                    };
                }
            }
            SlowStart::Conservative { baseline, .. } => {
                if self.round_min_rtt < baseline {
                    // The RTT went back down: the increase was spurious (§4.2).
                    self.slow_start = SlowStart::Standard;
                }
            }
            SlowStart::Done => {}
        }
    }
}

impl Algorithm for Cubic {
    fn on_ack(&mut self, now: Instant, ack: &Ack, path: &PathState) {
        if self.recovery.acked(ack.sent) {
            return;
        }
        if ack.app_limited {
            return;
        }
        if self.in_slow_start() {
            if self.slow_start != SlowStart::Done {
                self.hystart_on_ack(ack, path);
            }
            let growth = match self.slow_start {
                SlowStart::Conservative { .. } => (ack.bytes as f64 / self.config.hystart_css_growth_divisor) as u64,
                _ => ack.bytes,
            };
            self.window += growth;
            if !self.in_slow_start() {
                self.start_epoch(now);
            }
            return;
        }
        if self.epoch_start.is_none() {
            self.start_epoch(now);
        }
        self.congestion_avoidance(now, ack.bytes, path);
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
        self.slow_start = SlowStart::Done;
        let cwnd = self.window as f64;
        // §4.7 fast convergence: a window below the last W_max releases bandwidth.
        self.w_max = if self.config.fast_convergence && cwnd < self.w_max {
            cwnd * (1.0 + self.config.beta) / 2.0
        } else {
            cwnd
        };
        self.window = ((cwnd * self.config.beta) as u64).max(self.minimum_window());
        self.ssthresh = self.window;
        self.start_epoch(now);
        if persistent_congestion {
            self.window = self.minimum_window();
            self.epoch_start = None;
            self.w_est = 0.0;
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
        let starting = match self.slow_start {
            SlowStart::Conservative { .. } => "conservative_slow_start",
            _ => "slow_start",
        };
        loss_based::phase_name(self.phase(), starting)
    }

    /// Full switching (Floo §3.4): congestion avoidance at the carried window, as if
    /// a congestion epoch began there with `W_max` = that window, so `K` = 0 and the
    /// window starts on CUBIC's plateau and probes beyond it convexly.
    fn enter_converged(&mut self, now: Instant, rate: SendingRate, _path: &PathState) {
        self.window = rate.cwnd.max(self.minimum_window());
        self.ssthresh = self.window;
        self.w_max = self.window as f64;
        self.recovery.clear();
        self.slow_start = SlowStart::Done;
        self.start_epoch(now);
    }

    fn clone_box(&self) -> Box<dyn Algorithm> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testbed::{run, Bottleneck};

    fn cubic(config: &CubicConfig) -> Cubic {
        let path = PathState::new(1200, Duration::from_millis(333));
        Cubic::new(config, 12_000, Instant::now(), &path)
    }

    #[test]
    fn fills_a_10_and_a_50_mbit_bottleneck() {
        for mbit in [10.0, 50.0] {
            let mut c = cubic(&CubicConfig::default());
            let out = run(
                &mut c,
                Bottleneck::new(mbit, 40, 1.0),
                Duration::from_secs(30),
                Duration::from_secs(5),
            );
            assert!(out.utilisation > 0.9, "{mbit} Mbit/s: utilisation {}", out.utilisation);
        }
    }

    #[test]
    fn hystart_leaves_slow_start_before_a_deep_buffer_overflows() {
        let link = Bottleneck::new(10.0, 40, 4.0);
        let mut with = cubic(&CubicConfig::default());
        let a = run(&mut with, link, Duration::from_secs(6), Duration::ZERO);
        let mut without = cubic(&CubicConfig {
            hystart: false,
            ..CubicConfig::default()
        });
        let b = run(&mut without, link, Duration::from_secs(6), Duration::ZERO);
        assert!(
            a.loss_rate * 4.0 < b.loss_rate,
            "loss with HyStart++ {} vs without {}",
            a.loss_rate,
            b.loss_rate
        );
        assert!(with.ssthresh().is_some(), "HyStart++ ended slow start");
    }

    #[test]
    fn a_loss_takes_the_window_to_beta_and_it_regrows_to_w_max_after_k() {
        let t0 = Instant::now();
        // A large window on a long RTT, so the cubic curve and not the Reno-friendly
        // W_est (which grows 0.53 segments per RTT, §4.3) sets the window.
        let rtt = Duration::from_millis(100);
        let mut path = PathState::new(1200, rtt);
        path.srtt = rtt;
        let config = CubicConfig {
            hystart: false,
            ..CubicConfig::default()
        };
        let mut c = Cubic::new(&config, 1_200_000, t0, &path);
        c.on_congestion_event(t0, t0, false, 1200, &path);
        assert_eq!(c.window(), 840_000);
        // K = cbrt(W_max (1 - β) / C) in segments: cbrt(1000 × 0.3 / 0.4) = 9.086 s.
        assert!((c.k - 9.086).abs() < 0.01, "K {}", c.k);
        // Half-way to K the window is in the concave region, below W_max.
        // Feed ACKs of a full window per RTT until K.
        let mut now = t0;
        let sent_after = t0 + Duration::from_millis(1);
        let mut half = 0;
        while now < t0 + Duration::from_secs_f64(9.086) {
            if half == 0 && now >= t0 + Duration::from_secs_f64(4.54) {
                half = c.window();
            }
            now += rtt;
            let acks = c.window() / 1200;
            for _ in 0..acks {
                let ack = Ack {
                    sent: sent_after,
                    bytes: 1200,
                    app_limited: false,
                    rtt,
                };
                c.on_ack(now, &ack, &path);
            }
        }
        // W_cubic(K/2) = W_max - C (K/2)^3 segments = 1000 - 37.5 = 962.5 segments.
        assert!(
            (half as f64 - 1_155_000.0).abs() / 1_155_000.0 < 0.03,
            "window at K/2: {half}"
        );
        let w = c.window() as f64;
        assert!((w - 1_200_000.0).abs() / 1_200_000.0 < 0.02, "window at K: {w}");
    }

    #[test]
    fn entering_congestion_avoidance_keeps_the_carried_window() {
        let mut c = cubic(&CubicConfig::default());
        let path = PathState::new(1200, Duration::from_millis(40));
        c.enter_converged(
            Instant::now(),
            SendingRate {
                cwnd: 60_000,
                pacing_rate: 1_500_000,
            },
            &path,
        );
        assert_eq!((c.window(), c.phase()), (60_000, Phase::Converged));
        assert_eq!(c.k, 0.0);
    }

    #[test]
    fn a_beta_of_one_is_refused_by_name() {
        let e = CubicConfig {
            beta: 1.0,
            ..CubicConfig::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.field, "cubic.beta");
    }
}
