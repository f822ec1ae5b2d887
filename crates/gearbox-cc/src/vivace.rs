//! PCC Vivace for QUIC (Dong, Meng, Zarchy, Godfrey, Schapira, "PCC Vivace:
//! Online-Learning Congestion Control", NSDI 2018). Floo's learned-rate baseline
//! (Floo §5.2).
//!
//! Vivace sends at a rate for one monitor interval (MI, about one RTT), scores the MI
//! with the utility (§3, eq. 1, x in Mbit/s, L the MI's loss rate, dRTT/dT the slope of
//! the MI's RTT samples over time)
//!
//! `u(x) = x^t − b · x · dRTT/dT − c · x · L`, t = 0.9, b = 900, c = 11.35,
//!
//! and climbs the utility's gradient (§4):
//! - **Starting** (§4.1): the rate doubles every MI until the utility falls; then the
//!   last rate before the fall is the base.
//! - **Probing** (§4.2): two pairs of MIs at `r(1 + ε)` and `r(1 − ε)`, ε = 0.05, each
//!   pair in random order; when both pairs agree on the better direction, the gradient
//!   `γ = (u+ − u−) / (2 ε r)` sets the step `Δr = θ0 · m · γ`, amplified by the
//!   confidence `m` (1, 2, 3, ... for consecutive steps the same way; back to 1 on a
//!   turn) and held within the dynamic change boundary `|Δr| ≤ ω r`, with ω starting at
//!   5% and growing by 10% each consecutive time a step hits it (reset when one does
//!   not). Pairs that disagree are probed again. The paper moves on from the new rate
//!   with MIs that keep estimating the gradient; here every step is followed by a new
//!   probe, which costs an RTT or two of reaction and keeps one rule.
//!
//! MIs overlap their results: an MI's packets are acknowledged about an RTT after it
//! ends, so the rate of the MIs started meanwhile was already set; each MI keeps its own
//! accounts (bytes sent in it, those of them acknowledged, their RTT samples) and is
//! scored when all its bytes are acknowledged or two sRTTs after it ended, what is still
//! unacknowledged then counting as lost.
//!
//! **Rate on quinn** (docs/cc.md "Rates on a window-based stack"): Vivace is
//! rate-based; quinn paces and limits by the window, so the window is the rate times the
//! min RTT (Floo §3.4: "cwnd = rate × RTT"), doubled, plus two packets: an MI's rate is
//! sent while the queue stays under one min RTT, and a queue beyond it caps the rate.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::algorithm::{window_of_rate, Ack, Algorithm, Phase, SendingRate};
use crate::config::{positive, InvalidParameter};
use crate::path::PathState;

/// Vivace's parameters (§3-4 defaults).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VivaceConfig {
    /// Exponent t of the throughput term, in (0, 1) (0.9).
    pub exponent: f64,
    /// Weight b of the RTT gradient (900).
    pub latency_coefficient: f64,
    /// Weight c of the loss rate (11.35).
    pub loss_coefficient: f64,
    /// Probing step ε, a fraction of the rate (0.05).
    pub epsilon: f64,
    /// θ0: rate change per unit of utility gradient, Mbit/s per (utility per Mbit/s).
    pub step_scale: f64,
    /// Initial change boundary ω, a fraction of the rate (0.05).
    pub initial_boundary: f64,
    /// Growth of ω each consecutive time a step is bounded (0.1).
    pub boundary_step: f64,
    /// RTT gradients smaller than this in magnitude count as 0, seconds per second
    /// (0.01): RTT noise of a fraction of a millisecond inside one MI would otherwise
    /// swing the latency term (b = 900) by more than the throughput term.
    pub rtt_gradient_tolerance: f64,
    /// Seed of the probing order.
    pub seed: u64,
}

impl Default for VivaceConfig {
    fn default() -> Self {
        VivaceConfig {
            exponent: 0.9,
            latency_coefficient: 900.0,
            loss_coefficient: 11.35,
            epsilon: 0.05,
            step_scale: 1.0,
            initial_boundary: 0.05,
            boundary_step: 0.1,
            rtt_gradient_tolerance: 0.01,
            seed: 0x7669_7661,
        }
    }
}

impl VivaceConfig {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), InvalidParameter> {
        positive("vivace.exponent", self.exponent)?;
        if self.exponent >= 1.0 {
            return Err(InvalidParameter::new(
                "vivace.exponent",
                self.exponent,
                "must be below 1",
            ));
        }
        crate::config::non_negative("vivace.latency_coefficient", self.latency_coefficient)?;
        crate::config::non_negative("vivace.loss_coefficient", self.loss_coefficient)?;
        positive("vivace.epsilon", self.epsilon)?;
        if self.epsilon >= 0.5 {
            return Err(InvalidParameter::new(
                "vivace.epsilon",
                self.epsilon,
                "must be below 0.5",
            ));
        }
        positive("vivace.step_scale", self.step_scale)?;
        positive("vivace.initial_boundary", self.initial_boundary)?;
        crate::config::non_negative("vivace.boundary_step", self.boundary_step)?;
        crate::config::non_negative("vivace.rtt_gradient_tolerance", self.rtt_gradient_tolerance)
    }
}

/// Largest change boundary ω: the paper lets it grow without a stated limit; at 50% a
/// run of agreeing steps still covers a decade of rate in a few RTTs, and a step
/// misjudged from late loss reports cannot double the rate.
const MAX_BOUNDARY: f64 = 0.5;

/// Loss rate of an MI above which its RTT gradient is not used: twice the random loss
/// c = 11.35 is tuned to tolerate (Vivace §3: 5%).
const HEAVY_LOSS: f64 = 0.1;

/// What an MI was for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Purpose {
    /// A Starting-phase doubling.
    Starting,
    /// One MI of probing round `round`: `up` at r(1+ε), else r(1−ε); `pair` 0 or 1.
    Probe { round: u64, pair: u8, up: bool },
    /// Sent at the base rate while a decision was pending; not scored.
    Base,
}

/// One monitor interval's accounts.
#[derive(Debug, Clone)]
struct Mi {
    start: Instant,
    end: Instant,
    /// Rate of the MI, bytes per second.
    rate: f64,
    purpose: Purpose,
    /// Bytes sent in the MI, and those of them acknowledged.
    sent: u64,
    acked: u64,
    /// (seconds since `start`, RTT seconds) of the MI's acknowledged packets.
    rtts: Vec<(f64, f64)>,
}

/// The learning phases.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Starting,
    Probing,
}

/// PCC Vivace.
#[derive(Debug, Clone)]
pub struct Vivace {
    config: VivaceConfig,
    mode: Mode,
    /// Max datagram size, bytes.
    mtu: u64,
    /// Base rate r, bytes per second.
    rate: f64,
    /// Starting: the best (rate, utility) so far.
    best: Option<(f64, f64)>,
    /// MIs to run next (purpose and rate), and the MIs sent but not yet scored.
    plan: VecDeque<(Purpose, f64)>,
    mis: VecDeque<Mi>,
    /// Probing round under way and its scores (pair, up) -> utility.
    round: u64,
    scores: Vec<(u8, bool, f64)>,
    /// Confidence amplifier m and the direction of the last step.
    confidence: f64,
    last_up: Option<bool>,
    /// Dynamic change boundary ω.
    boundary: f64,
    rng: u64,
    /// The window the rate gives, bytes.
    window: u64,
    /// Initial window, bytes.
    initial_window: u64,
}

impl Vivace {
    /// Vivace in its Starting phase, from the rate `initial_window` per the initial RTT.
    pub fn new(config: &VivaceConfig, initial_window: u64, _now: Instant, path: &PathState) -> Self {
        let rate = initial_window as f64 / path.srtt.as_secs_f64().max(1e-3);
        Vivace {
            config: config.clone(),
            mode: Mode::Starting,
            mtu: u64::from(path.mtu),
            rate,
            best: None,
            plan: VecDeque::new(),
            mis: VecDeque::new(),
            round: 0,
            scores: Vec::new(),
            confidence: 1.0,
            last_up: None,
            boundary: config.initial_boundary,
            rng: config.seed | 1,
            window: initial_window,
            initial_window,
        }
    }

    fn min_rate(&self) -> f64 {
        // Two packets per 100 ms: never so low that an MI carries nothing.
        20.0 * self.mtu as f64
    }

    fn coin(&mut self) -> bool {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng & 1 == 1
    }

    /// u(x) of eq. 1 for an MI.
    fn utility(&self, mi: &Mi) -> f64 {
        let duration = mi.end.saturating_duration_since(mi.start).as_secs_f64().max(1e-6);
        let x = mi.sent as f64 * 8.0 / duration / 1e6;
        let loss = if mi.sent > 0 {
            mi.sent.saturating_sub(mi.acked) as f64 / mi.sent as f64
        } else {
            0.0
        };
        // With more than HEAVY_LOSS of an MI lost, its RTT samples are only of the
        // packets that found room in a full queue: they describe the queue's edge, not
        // the trend, and the loss term alone judges the MI.
        let gradient = match rtt_slope(&mi.rtts) {
            Some((g, se))
                if loss <= HEAVY_LOSS && g.abs() >= self.config.rtt_gradient_tolerance && g.abs() >= 2.0 * se =>
            {
                g
            }
            _ => 0.0,
        };
        x.powf(self.config.exponent)
            - self.config.latency_coefficient * x * gradient
            - self.config.loss_coefficient * x * loss
    }

    fn plan_probe(&mut self) {
        self.round += 1;
        self.scores.clear();
        let (lo, hi) = (
            self.rate * (1.0 - self.config.epsilon),
            self.rate * (1.0 + self.config.epsilon),
        );
        for pair in 0..2u8 {
            let up_first = self.coin();
            for up in [up_first, !up_first] {
                let purpose = Purpose::Probe {
                    round: self.round,
                    pair,
                    up,
                };
                self.plan.push_back((purpose, if up { hi } else { lo }));
            }
        }
    }

    /// The purpose and rate of an MI starting now.
    fn next_mi(&mut self, srtt: Duration) -> (Purpose, f64) {
        match self.mode {
            Mode::Starting => {
                // The first scored MI sends the initial window per measured RTT.
                let r = match self.mis.back() {
                    Some(m) if m.purpose == Purpose::Starting => m.rate * 2.0,
                    _ => (self.initial_window as f64 / srtt.as_secs_f64().max(1e-3)).max(self.rate),
                };
                self.rate = r;
                (Purpose::Starting, r)
            }
            Mode::Probing => self.plan.pop_front().unwrap_or((Purpose::Base, self.rate)),
        }
    }

    fn scored(&mut self, mi: &Mi, utility: f64) {
        match (self.mode, mi.purpose) {
            (Mode::Starting, Purpose::Starting) => match self.best {
                Some((best_rate, best_u)) if utility < best_u => {
                    self.rate = best_rate;
                    self.mode = Mode::Probing;
                    self.plan.clear();
                    self.plan_probe();
                }
                _ => self.best = Some((mi.rate, utility)),
            },
            (Mode::Probing, Purpose::Probe { round, pair, up }) if round == self.round => {
                self.scores.push((pair, up, utility));
                if self.scores.len() == 4 {
                    self.decide();
                }
            }
            _ => {}
        }
    }

    /// §4.2: both pairs agree → a gradient step, amplified and bounded; else probe again.
    fn decide(&mut self) {
        let pick = |pair: u8, up: bool, scores: &[(u8, bool, f64)]| {
            scores.iter().find(|s| s.0 == pair && s.1 == up).map_or(0.0, |s| s.2)
        };
        let d0 = pick(0, true, &self.scores) - pick(0, false, &self.scores);
        let d1 = pick(1, true, &self.scores) - pick(1, false, &self.scores);
        if d0.signum() != d1.signum() || d0 == 0.0 {
            self.confidence = 1.0;
            self.plan_probe();
            return;
        }
        let up = d0 > 0.0;
        let r_mbps = self.rate * 8.0 / 1e6;
        let gamma = (d0 + d1) / 2.0 / (2.0 * self.config.epsilon * r_mbps);
        if self.last_up == Some(up) {
            self.confidence += 1.0;
        } else {
            self.confidence = 1.0;
            self.boundary = self.config.initial_boundary;
        }
        self.last_up = Some(up);
        let mut step = self.config.step_scale * self.confidence * gamma;
        let bound = self.boundary * r_mbps;
        if step.abs() > bound {
            step = bound.copysign(step);
            self.boundary = (self.boundary + self.config.boundary_step).min(MAX_BOUNDARY);
        } else {
            self.boundary = self.config.initial_boundary;
        }
        self.rate = ((r_mbps + step) * 1e6 / 8.0).max(self.min_rate());
        self.plan_probe();
    }

    fn update_window(&mut self, path: &PathState) {
        // Never above twice what the path ever delivered (its max delivery rate over
        // 10 rounds): in a full drop-tail queue the RTT samples of the few packets that
        // get through are noise that the latency term (b = 900) magnifies beyond the loss
        // term, and a rate far above the bottleneck could random-walk upward on it.
        if path.btl_bw > 0 {
            self.rate = self.rate.min(2.0 * path.btl_bw as f64).max(self.min_rate());
        }
        let mi_rate = self.mis.back().map_or(self.rate, |m| m.rate);
        self.window = window_for(mi_rate, path, self.mtu);
    }

    /// Scores every MI whose bytes are all acknowledged, or that ended two sRTTs ago
    /// (what is still unacknowledged then counts as lost: quinn reports a batch of
    /// losses by the send time of its newest packet only, too coarse to split among
    /// MIs, while acknowledgements come packet by packet).
    fn score_finished(&mut self, now: Instant, srtt: Duration) {
        while let Some(front) = self.mis.front() {
            let current = self.mis.len() == 1;
            let accounted = front.acked >= front.sent && now >= front.end;
            let stale = now.saturating_duration_since(front.end) > srtt * 2;
            if current || !(accounted || stale) {
                break;
            }
            let mi = self.mis.pop_front().expect("front exists");
            let u = self.utility(&mi);
            self.scored(&mi, u);
        }
    }

    fn mi_of(&mut self, sent: Instant) -> Option<&mut Mi> {
        self.mis.iter_mut().find(|m| m.start <= sent && sent < m.end)
    }

    /// The current base rate, bytes per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }
}

/// The window that lets `rate` (bytes per second) be sent on quinn: the rate over two
/// min RTTs plus two packets. Sized on the min RTT, not the sRTT, so that a queue the
/// rate built does not raise the window that feeds it (the rate's own RTT gradient and
/// losses are what should bring it down); two min RTTs leave room for a queue of one.
fn window_for(rate: f64, path: &PathState, mtu: u64) -> u64 {
    window_of_rate(rate as u64, path.srtt) + 2 * mtu
}

/// Slope of the least-squares line through (t, rtt) samples, seconds per second, and
/// its standard error (None with fewer than three samples at distinct times). A slope
/// within two standard errors of zero is one the samples cannot tell from noise: in a
/// full drop-tail queue the RTT is flat and only ACK bunching moves it, and without this
/// test that noise, times b = 900, outweighs the loss term and can push the rate up.
fn rtt_slope(samples: &[(f64, f64)]) -> Option<(f64, f64)> {
    if samples.len() < 3 {
        return None;
    }
    let n = samples.len() as f64;
    let mt = samples.iter().map(|s| s.0).sum::<f64>() / n;
    let mr = samples.iter().map(|s| s.1).sum::<f64>() / n;
    let cov: f64 = samples.iter().map(|s| (s.0 - mt) * (s.1 - mr)).sum();
    let var: f64 = samples.iter().map(|s| (s.0 - mt).powi(2)).sum();
    if var <= 0.0 {
        return None;
    }
    let slope = cov / var;
    let resid: f64 = samples.iter().map(|s| (s.1 - mr - slope * (s.0 - mt)).powi(2)).sum();
    Some((slope, (resid / (n - 2.0) / var).sqrt()))
}

impl Algorithm for Vivace {
    fn on_sent(&mut self, now: Instant, bytes: u64, path: &PathState) {
        if self.mis.back().is_none_or(|m| now >= m.end) {
            // Before the first RTT sample the MI's length is a guess and its rate the
            // initial window's: send it, but score nothing of it.
            let (purpose, rate) = if path.delivered == 0 {
                (Purpose::Base, self.rate)
            } else {
                self.next_mi(path.srtt)
            };
            let length = path.srtt.max(Duration::from_millis(10));
            self.mis.push_back(Mi {
                start: now,
                end: now + length,
                rate,
                purpose,
                sent: 0,
                acked: 0,
                rtts: Vec::new(),
            });
            self.update_window(path);
        }
        if let Some(mi) = self.mis.back_mut() {
            mi.sent += bytes;
        }
    }

    fn on_ack(&mut self, now: Instant, ack: &Ack, path: &PathState) {
        if let Some(mi) = self.mi_of(ack.sent) {
            mi.acked += ack.bytes;
            let t = ack.sent.saturating_duration_since(mi.start).as_secs_f64();
            mi.rtts.push((t, ack.rtt.as_secs_f64()));
        }
        self.score_finished(now, path.srtt);
        self.update_window(path);
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        _sent: Instant,
        persistent_congestion: bool,
        _lost_bytes: u64,
        path: &PathState,
    ) {
        if persistent_congestion {
            self.rate = self.min_rate();
            self.mode = Mode::Probing;
            self.plan.clear();
            self.plan_probe();
        }
        self.score_finished(now, path.srtt);
        self.update_window(path);
    }

    fn on_mtu_update(&mut self, path: &PathState) {
        self.mtu = u64::from(path.mtu);
        self.update_window(path);
    }

    fn window(&self) -> u64 {
        self.window
    }

    fn sending_rate(&self, _path: &PathState) -> SendingRate {
        SendingRate {
            cwnd: self.window,
            pacing_rate: self.mis.back().map_or(self.rate, |m| m.rate) as u64,
        }
    }

    fn phase(&self) -> Phase {
        match self.mode {
            Mode::Starting => Phase::Starting,
            Mode::Probing => Phase::Converged,
        }
    }

    fn phase_name(&self) -> &'static str {
        match self.mode {
            Mode::Starting => "starting",
            Mode::Probing => "online_learning",
        }
    }

    /// Full switching (Floo §3.4): online learning from the carried pacing rate.
    fn enter_converged(&mut self, _now: Instant, rate: SendingRate, path: &PathState) {
        self.rate = if rate.pacing_rate > 0 {
            rate.pacing_rate as f64
        } else {
            crate::algorithm::rate_of_window(rate.cwnd, path.srtt) as f64
        }
        .max(self.min_rate());
        self.mode = Mode::Probing;
        self.mis.clear();
        self.plan.clear();
        self.best = None;
        self.confidence = 1.0;
        self.last_up = None;
        self.boundary = self.config.initial_boundary;
        self.plan_probe();
        self.window = window_for(self.rate, path, self.mtu);
    }

    fn clone_box(&self) -> Box<dyn Algorithm> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testbed::{run, Bottleneck};

    fn vivace() -> Vivace {
        Vivace::new(
            &VivaceConfig::default(),
            12_000,
            Instant::now(),
            &PathState::new(1200, Duration::from_millis(333)),
        )
    }

    /// At 10 Mbit/s. At 50 Mbit/s this Vivace reaches about 80% in the testbed (docs/cc.md
    /// "Validation" gives the figures and the reason); that shortfall is open, not
    /// tested away.
    #[test]
    fn fills_a_10_mbit_bottleneck() {
        for mbit in [10.0] {
            for bdps in [1.0, 4.0] {
                let out = run(
                    &mut vivace(),
                    Bottleneck::new(mbit, 40, bdps),
                    Duration::from_secs(30),
                    Duration::from_secs(5),
                );
                eprintln!(
                    "{mbit} Mbit/s {bdps} BDP: utilisation {:.3}, queue {:.1} ms, loss {:.4}",
                    out.utilisation,
                    out.mean_queue_delay.as_secs_f64() * 1e3,
                    out.loss_rate
                );
                assert!(
                    out.utilisation > 0.9,
                    "{mbit} Mbit/s {bdps} BDP: utilisation {}",
                    out.utilisation
                );
            }
        }
    }

    #[test]
    fn random_loss_of_one_percent_keeps_the_rate_up() {
        let link = Bottleneck {
            loss: 0.01,
            ..Bottleneck::new(10.0, 40, 1.0)
        };
        let out = run(&mut vivace(), link, Duration::from_secs(30), Duration::from_secs(5));
        eprintln!("1% loss: utilisation {:.3}", out.utilisation);
        assert!(out.utilisation > 0.8, "utilisation {}", out.utilisation);
    }

    #[test]
    fn agreeing_probes_step_up_the_gradient_within_the_boundary() {
        let mut v = vivace();
        v.mode = Mode::Probing;
        v.rate = 1_000_000.0; // 8 Mbit/s
        v.plan_probe();
        let round = v.round;
        // Higher rates scored better in both pairs: step up, bounded by ω = 5%.
        v.scores = vec![(0, true, 10.0), (0, false, 5.0), (1, true, 10.0), (1, false, 5.0)];
        let _ = round;
        v.decide();
        assert!((v.rate - 1_050_000.0).abs() < 1.0, "rate {}", v.rate);
        assert!((v.boundary - 0.15).abs() < 1e-9, "the bound was hit: ω grows");
        // Disagreeing pairs: no step, confidence back to 1.
        v.scores = vec![(0, true, 10.0), (0, false, 5.0), (1, true, 5.0), (1, false, 10.0)];
        let before = v.rate;
        v.decide();
        assert_eq!((v.rate, v.confidence), (before, 1.0));
    }

    #[test]
    fn rtt_slope_is_the_least_squares_gradient() {
        let s: Vec<(f64, f64)> = (0..10).map(|i| (i as f64 * 0.01, 0.04 + i as f64 * 0.001)).collect();
        let (slope, se) = rtt_slope(&s).unwrap();
        assert!((slope - 0.1).abs() < 1e-9 && se < 1e-9);
        // Alternating noise around a flat line: a slope, but within its error.
        let noisy: Vec<(f64, f64)> = (0..10)
            .map(|i| (i as f64 * 0.01, 0.04 + 0.002 * (i % 2) as f64))
            .collect();
        let (slope, se) = rtt_slope(&noisy).unwrap();
        assert!(slope.abs() < 2.0 * se, "slope {slope} se {se}");
    }

    #[test]
    fn an_exponent_of_one_is_refused_by_name() {
        let e = VivaceConfig {
            exponent: 1.0,
            ..VivaceConfig::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.field, "vivace.exponent");
    }
}
