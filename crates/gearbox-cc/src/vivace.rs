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
//!   last rate before the fall is the base. A Starting MI's RTT gradient counts only
//!   when it lifts the RTT by more than 30% of the min RTT over the MI, so that RTT
//!   jitter on an idle path cannot end it (a doubling past the bottleneck lifts it by
//!   half an MI or more, and loss ends it too).
//! - **Probing** (§4.2): two pairs of MIs at `r(1 + ε)` and `r(1 − ε)`, ε = 0.05, a
//!   randomized controlled trial: the first pair's order drawn at random, the second's
//!   the opposite (as PCC's own implementation does), so that an effect of an MI's
//!   place cannot make the pairs agree; each connection draws its own orders, so
//!   competing flows do not probe in step. When both pairs agree on the better
//!   direction, the gradient `γ = (u+ − u−) / (2 ε r)` sets the step `Δr = θ0 · m · γ`
//!   from the better probe's rate. Pairs that disagree are probed again.
//! - **Moving** (§4.2): the rate then keeps stepping that way, one step per MI scored at
//!   the new rate, the gradient re-estimated from the last two steps' utilities, while
//!   the utility keeps improving; when it does not, back to the better of the two rates
//!   and probe again. The confidence amplifier `m` counts the consecutive steps one way
//!   (1, 2, 3, ...; back to 1 on a turn), and the dynamic change boundary holds every
//!   step within `|Δr| ≤ ω r`, ω = ω0 + k·δ (5% + k · 10%), k the consecutive steps it
//!   held back (a step that fits lowers k to the smallest that holds it). No step is
//!   smaller than the probes' ε: a smaller one would be judged on a utility difference
//!   below what the probes can tell from noise.
//!
//! Two readings of eq. 1 for this stack, both measured (docs/cc.md "Validation"): x is
//! the MI's sending rate as its rate and window shape it (the chosen rate, or window /
//! RTT when a standing queue holds the window-limited sender below it), not a count of
//! the bytes it happened to send (at a few packets per MI the count of whole packets
//! swings by more than ε); and only a rising RTT counts (a falling one is a queue that
//! earlier MIs built draining, and rewarding it made the probes' verdicts follow the
//! bursts at MI starts, not the rates). Starting (§4.1) ends only when a doubled rate
//! scores below the best, never on two MIs at one rate.
//!
//! MIs overlap their results: an MI's packets are acknowledged about an RTT after it
//! ends, so the rate of the MIs started meanwhile was already set; each MI keeps its own
//! accounts (bytes sent in it, those of them acknowledged, their RTT samples) and is
//! scored when all its bytes are acknowledged or two sRTTs after it ended, what is still
//! unacknowledged then counting as lost. An MI lasts an sRTT, and at least ten packets
//! at its rate.
//!
//! **Rate on quinn** (docs/cc.md "Rates on a window-based stack"): Vivace is
//! rate-based; quinn paces and limits by the window, so the window is the MI's rate
//! times the min RTT (Floo §3.4: "cwnd = rate × RTT") plus two packets (for ACKs that
//! quinn's peer delays to every second packet). Sized on the min RTT, not the sRTT:
//! with the sRTT a queue the rate built raised the window that fed it, the rate's
//! excess over the bottleneck ran the buffer full, and Vivace settled at 5-13% loss
//! (measured in the simulator); on the min RTT a rate above the bottleneck builds a
//! queue of `(rate / capacity − 1) × min RTT` and no more, which is the RTT gradient
//! the next probes see.

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
    /// Seed of the probing order, mixed with each connection's first RTT sample (so that
    /// competing connections draw different orders).
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

/// RTT rise over a Starting MI, as a fraction of the min RTT, below which its RTT
/// gradient does not count (0.3: a doubling that overshoots the bottleneck by half
/// raises the RTT by half an MI's length, well above it; the ms of jitter an idle path
/// and quinn's pacing bursts give, far below it at any rate).
const STARTING_RTT_INFLATION: f64 = 0.3;

/// Loss rate of an MI above which its RTT gradient is not used: twice the random loss
/// c = 11.35 is tuned to tolerate (Vivace §3: 5%). Without this exemption an MI that
/// drains part of a full drop-tail queue (and so sees its RTT climb back) pays more
/// than one that overflows it, and the rate settles deeper in loss (measured in the
/// simulator: 21% against 13% at 10 Mbit/s, 1 BDP).
const HEAVY_LOSS: f64 = 0.1;

/// Fewest packets an MI is long enough to carry at its rate.
const MIN_MI_PACKETS: f64 = 10.0;

/// What an MI was for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Purpose {
    /// A Starting-phase doubling.
    Starting,
    /// One MI of probing round `round`: `up` at r(1+ε), else r(1−ε); `pair` 0 or 1.
    Probe { round: u64, pair: u8, up: bool },
    /// Sent at the rate of the moving phase's step `step`.
    Moving { step: u64 },
    /// Sent at the base rate while a decision was pending; not scored.
    Base,
    /// Sent before the first RTT sample, at the initial window's rate; not scored, and
    /// ended by the first sample (its length, the initial RTT guess of 333 ms, would
    /// otherwise hold the Starting phase back by as long).
    Initial,
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
    /// Stepping in the direction the last conclusive probe chose, one step per scored
    /// MI, while the utility keeps improving that way.
    Moving,
}

/// The moving phase's latest sample and step.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Moving {
    /// Index of the current step: the MIs sent at its rate carry it.
    step: u64,
    /// Direction of the moves: up or down.
    up: bool,
    /// Rate (bytes per second) and utility of the sample before the current step.
    last: (f64, f64),
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
    /// The moving phase's state (`Mode::Moving` only).
    moving: Option<Moving>,
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
            moving: None,
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
    ///
    /// The RTT gradient counts only when it is positive: a falling RTT inside an MI is
    /// a queue that earlier MIs built draining, credit no rate choice of this MI earned
    /// (with it, whichever probe happened to follow a burst scored hundreds of utility
    /// units above its pair at 50 Mbit/s, b · x · |dRTT/dT| = 900 · 50 · 0.01 = 450
    /// against x^t ≈ 34, and the probes' verdicts were the queue's history, not the
    /// rates'). A growing queue, the one signal the term is there for, still counts.
    /// In the Starting phase the gradient must also lift the RTT by more than
    /// [`STARTING_RTT_INFLATION`] of the min RTT over the MI: the rate doubles until a
    /// real queue or loss says stop, not until the jitter of an idle path does.
    fn utility(&self, mi: &Mi, min_rtt: Duration) -> f64 {
        let duration = mi.end.saturating_duration_since(mi.start).as_secs_f64().max(1e-6);
        // x is the MI's sending rate (§3), derived from what shapes it rather than
        // counted: on quinn the window releases whole packets in pacing bursts, and at
        // a few packets per MI their count swings by more than the probes' ε. The MI
        // sends at its chosen rate unless its window, sized on the min RTT, runs out
        // first: a window-limited sender sends window / RTT, so with a standing queue
        // (mean RTT of the MI's packets above the min RTT) x is that. On the chosen
        // rate alone a rate above the bottleneck was credited in full though the queue
        // held its excess back: a flow that left Starting at 1.7x a 10 Mbit/s link
        // kept its rate, and the other flow's share, for the whole download (Jain's
        // index 0.61-0.76 in 3 of 8 runs, docs/cc.md "Fairness").
        let mut x = mi.rate * 8.0 / 1e6;
        if !mi.rtts.is_empty() {
            let mean_rtt = mi.rtts.iter().map(|s| s.1).sum::<f64>() / mi.rtts.len() as f64;
            let window = window_of_rate(mi.rate as u64, min_rtt) + 2 * self.mtu;
            x = x.min(window as f64 / mean_rtt.max(1e-6) * 8.0 / 1e6);
        }
        let loss = if mi.sent > 0 {
            mi.sent.saturating_sub(mi.acked) as f64 / mi.sent as f64
        } else {
            0.0
        };
        let starting = mi.purpose == Purpose::Starting;
        let inflation_floor = if starting {
            STARTING_RTT_INFLATION * min_rtt.as_secs_f64() / duration
        } else {
            0.0
        };
        // With more than HEAVY_LOSS of an MI lost, its RTT samples are only of the
        // packets that found room in a full queue: they describe the queue's edge, not
        // the trend, and the loss term alone judges the MI.
        let gradient = match rtt_slope(&mi.rtts) {
            Some((g, se))
                if loss <= HEAVY_LOSS
                    && g >= self.config.rtt_gradient_tolerance
                    && g >= 2.0 * se
                    && g > inflation_floor =>
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
        self.mode = Mode::Probing;
        self.moving = None;
        self.round += 1;
        self.scores.clear();
        self.plan.clear();
        let (lo, hi) = (
            self.rate * (1.0 - self.config.epsilon),
            self.rate * (1.0 + self.config.epsilon),
        );
        // The first pair's order is random, the second's the opposite (up, down, down, up
        // or down, up, up, down): each rate holds each place once, so whatever the place
        // itself does to a score (the queue the MI before left, the window's step at the
        // MI's start) favours each rate in one pair and cannot make the pairs agree.
        let up_first = self.coin();
        for pair in 0..2u8 {
            let up_first = up_first ^ (pair == 1);
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
            Mode::Moving => {
                let step = self.moving.map_or(0, |m| m.step);
                (Purpose::Moving { step }, self.rate)
            }
        }
    }

    fn scored(&mut self, mi: &Mi, utility: f64) {
        match (self.mode, mi.purpose) {
            (Mode::Starting, Purpose::Starting) => match self.best {
                // Only a doubling can end Starting: an MI the delivery-rate cap held at
                // the best's rate differs from it by noise alone (one random loss in a
                // dozen packets), and PCC's own implementation compares only a higher
                // rate with the last.
                Some((best_rate, _)) if mi.rate <= best_rate => {}
                Some((best_rate, best_u)) if utility < best_u => {
                    // §4.1: back to the last rate before the fall, and learn from there.
                    self.rate = best_rate;
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
            (Mode::Moving, Purpose::Moving { step }) => {
                let Some(moving) = self.moving else { return };
                // Only the first MI scored at the current step's rate is a new sample;
                // the others at that rate went out while it was being scored.
                if step != moving.step {
                    return;
                }
                let (last_rate, last_u) = moving.last;
                let dr_mbps = (mi.rate - last_rate) * 8.0 / 1e6;
                let gamma = if dr_mbps == 0.0 {
                    0.0
                } else {
                    (utility - last_u) / dr_mbps
                };
                if gamma == 0.0 || (gamma > 0.0) != moving.up {
                    // The utility no longer improves this way: back to the better of the
                    // two rates and probe again (§4.2).
                    self.rate = if utility > last_u { mi.rate } else { last_rate };
                    self.confidence = 1.0;
                    self.last_up = None;
                    self.boundary = self.config.initial_boundary;
                    self.plan_probe();
                    return;
                }
                self.step(gamma, mi.rate, (mi.rate, utility));
            }
            _ => {}
        }
    }

    /// §4.2: both pairs agree → a gradient step, and the moving phase from the better
    /// probe's rate; else probe again.
    fn decide(&mut self) {
        let pick = |pair: u8, up: bool, scores: &[(u8, bool, f64)]| {
            scores.iter().find(|s| s.0 == pair && s.1 == up).map_or(0.0, |s| s.2)
        };
        let d0 = pick(0, true, &self.scores) - pick(0, false, &self.scores);
        let d1 = pick(1, true, &self.scores) - pick(1, false, &self.scores);
        if d0.signum() != d1.signum() || d0 == 0.0 {
            self.confidence = 1.0;
            self.last_up = None;
            self.plan_probe();
            return;
        }
        let up = d0 > 0.0;
        let r_mbps = self.rate * 8.0 / 1e6;
        let gamma = (d0 + d1) / 2.0 / (2.0 * self.config.epsilon * r_mbps);
        // The moving phase starts from the probe rate that won, with its mean utility
        // as the sample the first step is judged against.
        let from = self.rate
            * if up {
                1.0 + self.config.epsilon
            } else {
                1.0 - self.config.epsilon
            };
        let u = (pick(0, up, &self.scores) + pick(1, up, &self.scores)) / 2.0;
        self.step(gamma, from, (from, u));
    }

    /// One gradient step from `from` (bytes per second): `Δr = θ0 · m · γ`, with the
    /// confidence amplifier m counting the consecutive steps in one direction, held
    /// within the dynamic change boundary `|Δr| ≤ ω · r` (§4.2). ω = ω0 + k·δ, k the
    /// number of consecutive steps the boundary held back; a step that fits lowers k to
    /// the smallest that still holds it, so one unbounded step after a run of bounded
    /// ones does not throw away what the run learnt. Then the next moving sample.
    fn step(&mut self, gamma: f64, from: f64, last: (f64, f64)) {
        let up = gamma > 0.0;
        if self.last_up == Some(up) {
            self.confidence += 1.0;
        } else {
            self.confidence = 1.0;
            self.boundary = self.config.initial_boundary;
        }
        self.last_up = Some(up);
        let r_mbps = from * 8.0 / 1e6;
        let mut change = self.config.step_scale * self.confidence * gamma.abs();
        let bound = self.boundary * r_mbps;
        if change > bound {
            change = bound;
            self.boundary = (self.boundary + self.config.boundary_step).min(MAX_BOUNDARY);
        } else if self.config.boundary_step > 0.0 {
            let needed = ((change / r_mbps - self.config.initial_boundary) / self.config.boundary_step)
                .ceil()
                .max(0.0);
            self.boundary = self.config.initial_boundary + needed * self.config.boundary_step;
        }
        // Never a step smaller than the probes' spacing: a smaller one would be judged
        // on a utility difference below what the probes could tell from noise.
        let change = change.max(self.config.epsilon * r_mbps);
        let to = if up { r_mbps + change } else { r_mbps - change };
        self.rate = (to * 1e6 / 8.0).max(self.min_rate());
        let step = self.moving.map_or(0, |m| m.step) + 1;
        self.mode = Mode::Moving;
        self.plan.clear();
        self.moving = Some(Moving { step, up, last });
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
    fn score_finished(&mut self, now: Instant, path: &PathState) {
        let srtt = path.srtt;
        while let Some(front) = self.mis.front() {
            let current = self.mis.len() == 1;
            let accounted = front.acked >= front.sent && now >= front.end;
            let stale = now.saturating_duration_since(front.end) > srtt * 2;
            if current || !(accounted || stale) {
                break;
            }
            let mi = self.mis.pop_front().expect("front exists");
            let u = self.utility(&mi, path.min_rtt_or_srtt());
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

/// The window that lets `rate` (bytes per second) be sent on quinn: the rate over one
/// min RTT plus two packets (module docs, "Rate on quinn").
fn window_for(rate: f64, path: &PathState, mtu: u64) -> u64 {
    window_of_rate(rate as u64, path.min_rtt_or_srtt()) + 2 * mtu
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
        let sampled = path.delivered > 0;
        if let Some(m) = self.mis.back_mut() {
            if m.purpose == Purpose::Initial && sampled && now < m.end {
                m.end = now;
                // Competing flows must not probe in step: each connection's RCTs are
                // its own random draws (§4.2), so the configured seed is mixed with the
                // first RTT sample's nanoseconds, which differ between real connections
                // and stay reproducible in virtual time.
                self.rng ^= (path.srtt.as_nanos() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                self.rng |= 1;
            }
        }
        if self.mis.back().is_none_or(|m| now >= m.end) {
            // Before the first RTT sample the MI's length is a guess and its rate the
            // initial window's: send it, but score nothing of it.
            let (purpose, mut rate) = if sampled {
                self.next_mi(path.srtt)
            } else {
                (Purpose::Initial, self.rate)
            };
            // Never above twice what the path ever delivered (see `update_window`),
            // Starting's doublings included, as slow start's are; but never below the
            // initial window per RTT either, which is where Starting begins (the
            // handshake's few packets are no measure of the path).
            if path.btl_bw > 0 {
                let floor = self.initial_window as f64 / path.srtt.as_secs_f64().max(1e-3);
                rate = rate.min((2.0 * path.btl_bw as f64).max(floor)).max(self.min_rate());
            }
            // An sRTT (§4: an MI of about an RTT), and at least MIN_MI_PACKETS at the
            // MI's rate, so that a low rate still gives each MI a loss rate and an RTT
            // trend to score.
            let length = path
                .srtt
                .max(Duration::from_secs_f64(
                    MIN_MI_PACKETS * self.mtu as f64 / rate.max(1.0),
                ))
                .max(Duration::from_millis(10));
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
        self.score_finished(now, path);
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
            self.confidence = 1.0;
            self.last_up = None;
            self.boundary = self.config.initial_boundary;
            self.plan_probe();
        }
        self.score_finished(now, path);
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
            Mode::Probing | Mode::Moving => Phase::Converged,
        }
    }

    fn phase_name(&self) -> &'static str {
        match self.mode {
            Mode::Starting => "starting",
            Mode::Probing | Mode::Moving => "online_learning",
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
        self.mis.clear();
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
    use crate::testbed::{jain, run, run_flows, Bottleneck, Flow};

    fn vivace() -> Vivace {
        seeded(VivaceConfig::default().seed)
    }

    fn seeded(seed: u64) -> Vivace {
        Vivace::new(
            &VivaceConfig {
                seed,
                ..VivaceConfig::default()
            },
            12_000,
            Instant::now(),
            &PathState::new(1200, Duration::from_millis(333)),
        )
    }

    /// Two Vivace flows through one 1-BDP bottleneck, started together or the second
    /// 3 s after the first (into a link the first already fills), at 10 and 50 Mbit/s:
    /// Jain's index of what each delivered from 8 s to 30 s at least 0.9 (the issue's
    /// bound), and the link still used. Before the MI's rate was scored as what its
    /// window sends, the late start gave 0.711 at 50 Mbit/s in this testbed (one flow
    /// 0.18, the other 0.82 of the link) and 0.909 at 10 (docs/cc.md "Fairness").
    #[test]
    fn two_flows_share_a_bottleneck_fairly_even_when_one_starts_late() {
        let mut bad = Vec::new();
        for mbit in [10.0, 50.0] {
            for late in [0, 3] {
                for seed in 1..=3u64 {
                    let (mut a, mut b) = (seeded(seed * 7919), seeded(seed * 104_729 + 3));
                    let outs = run_flows(
                        vec![
                            Flow {
                                algo: &mut a,
                                start: Duration::ZERO,
                            },
                            Flow {
                                algo: &mut b,
                                start: Duration::from_secs(late),
                            },
                        ],
                        Bottleneck::new(mbit, 40, 1.0),
                        Duration::from_secs(30),
                        Duration::from_secs(8),
                    );
                    let (j, total) = (jain(&outs), outs[0].utilisation + outs[1].utilisation);
                    let line = format!(
                        "{mbit} Mbit/s, second flow {late} s late, seed {seed}: Jain {j:.3} ({:.2} + {:.2} of the link)",
                        outs[0].utilisation, outs[1].utilisation
                    );
                    eprintln!("{line}");
                    if j < 0.9 || total < 0.8 {
                        bad.push(line);
                    }
                }
            }
        }
        assert!(bad.is_empty(), "{bad:?}");
    }

    #[test]
    fn starting_ends_only_when_a_higher_rate_scores_lower() {
        let mut v = vivace();
        let mut mi = mi_at(500_000.0, 0);
        mi.purpose = Purpose::Starting;
        v.scored(&mi, 4.0);
        // Held at the same rate (the delivery-rate cap) and scored lower by a random
        // loss: no verdict on a doubling, Starting goes on.
        v.scored(&mi, 1.0);
        assert_eq!(v.mode, Mode::Starting);
        // The doubling scores lower: back to the best rate, and probe.
        let mut doubled = mi_at(1_000_000.0, 0);
        doubled.purpose = Purpose::Starting;
        v.scored(&doubled, 3.0);
        assert_eq!((v.mode, v.rate), (Mode::Probing, 500_000.0));
    }

    #[test]
    fn the_two_probe_pairs_run_in_opposite_orders() {
        let mut v = vivace();
        let mut firsts = Vec::new();
        for _ in 0..20 {
            v.plan_probe();
            let ups: Vec<bool> = v
                .plan
                .iter()
                .map(|(p, _)| match p {
                    Purpose::Probe { up, .. } => *up,
                    other => panic!("{other:?}"),
                })
                .collect();
            assert_eq!(ups.len(), 4);
            assert!(ups[0] != ups[1] && ups[2] == ups[1] && ups[3] == ups[0], "{ups:?}");
            firsts.push(ups[0]);
        }
        // Which rate goes first is still drawn at random.
        assert!(firsts.contains(&true) && firsts.contains(&false));
    }

    /// At 10 and 50 Mbit/s, with a 1-BDP and a 4-BDP buffer: most of the link, a
    /// short queue and next to no loss, whatever the buffer. This testbed acknowledges
    /// every packet at once and has no headers, and here Vivace settles where its upper
    /// probe, r(1 + ε), just starts a queue: 0.91 of the link at 10 Mbit/s and 0.88 at 50
    /// (measured; 0.90 and 0.93 before the MI's rate was scored as what its window
    /// sends), with under 2 ms of queue. The 90% is checked on real QUIC, in
    /// gearbox-sim and gearbox-emu (docs/cc.md "Validation"); before the fix of docs/cc.md
    /// this testbed gave 0.93 / 1.00 at 10 Mbit/s with the buffer full (22 / 152 ms of
    /// queue, 8% / 14% loss) and 0.80 at 50.
    #[test]
    fn uses_most_of_a_10_and_a_50_mbit_bottleneck_with_a_short_queue_and_no_loss() {
        let mut bad = Vec::new();
        for mbit in [10.0, 50.0] {
            for bdps in [1.0, 4.0] {
                let out = run(
                    &mut vivace(),
                    Bottleneck::new(mbit, 40, bdps),
                    Duration::from_secs(30),
                    Duration::from_secs(5),
                );
                let queue_ms = out.mean_queue_delay.as_secs_f64() * 1e3;
                eprintln!(
                    "{mbit} Mbit/s {bdps} BDP: utilisation {:.3}, queue {queue_ms:.1} ms, loss {:.4}",
                    out.utilisation, out.loss_rate
                );
                if out.utilisation < 0.85 || queue_ms > 10.0 || out.loss_rate > 0.01 {
                    bad.push(format!(
                        "{mbit} Mbit/s {bdps} BDP: utilisation {:.3}, queue {queue_ms:.1} ms, loss {:.4}",
                        out.utilisation, out.loss_rate
                    ));
                }
            }
        }
        assert!(bad.is_empty(), "{bad:?}");
    }

    /// 1-3% random loss on the 10 Mbit/s, 40 ms, 1-BDP path: most of the link kept
    /// (c = 11.35 makes the utility rise with the rate up to about 6% loss at this rate,
    /// §3), over three probing seeds. At 2-3% the per-MI loss count (about 42 packets
    /// an MI) is noise larger than the probes' rate difference, so the rate walks below
    /// the bottleneck; this bounds how far (measured: docs/cc.md "Random loss").
    #[test]
    fn random_loss_of_one_to_three_percent_keeps_most_of_the_link() {
        let mut bad = Vec::new();
        for loss in [0.01, 0.02, 0.03] {
            for seed in 1..=3u64 {
                let link = Bottleneck {
                    loss,
                    ..Bottleneck::new(10.0, 40, 1.0)
                };
                let out = run(
                    &mut seeded(seed * 7919),
                    link,
                    Duration::from_secs(30),
                    Duration::from_secs(5),
                );
                eprintln!("{loss} loss, seed {seed}: utilisation {:.3}", out.utilisation);
                if out.utilisation < 0.75 {
                    bad.push(format!("{loss} loss, seed {seed}: {:.3}", out.utilisation));
                }
            }
        }
        assert!(bad.is_empty(), "{bad:?}");
    }

    #[test]
    fn agreeing_probes_step_up_the_gradient_within_the_boundary() {
        let mut v = vivace();
        v.rate = 1_000_000.0; // 8 Mbit/s
        v.plan_probe();
        // Higher rates scored better in both pairs: move up from the winning probe,
        // r(1 + ε) = 8.4 Mbit/s, by at most ω = 5% of it, and ω grows.
        v.scores = vec![(0, true, 10.0), (0, false, 5.0), (1, true, 10.0), (1, false, 5.0)];
        v.decide();
        assert_eq!(v.mode, Mode::Moving);
        assert!((v.rate - 1_102_500.0).abs() < 1.0, "rate {}", v.rate);
        assert!((v.boundary - 0.15).abs() < 1e-9, "the bound was hit: ω grows");
        // Disagreeing pairs: no step, confidence back to 1, probe again.
        v.plan_probe();
        v.scores = vec![(0, true, 10.0), (0, false, 5.0), (1, true, 5.0), (1, false, 10.0)];
        let before = v.rate;
        v.decide();
        assert_eq!((v.rate, v.confidence, v.mode), (before, 1.0, Mode::Probing));
    }

    fn mi_at(rate: f64, step: u64) -> Mi {
        let t = Instant::now();
        Mi {
            start: t,
            end: t + Duration::from_millis(40),
            rate,
            purpose: Purpose::Moving { step },
            sent: 0,
            acked: 0,
            rtts: Vec::new(),
        }
    }

    #[test]
    fn moving_keeps_stepping_while_the_utility_improves_and_probes_when_it_falls() {
        let mut v = vivace();
        v.rate = 1_000_000.0;
        v.plan_probe();
        v.scores = vec![(0, true, 10.0), (0, false, 5.0), (1, true, 10.0), (1, false, 5.0)];
        v.decide();
        let (first, step) = (v.rate, v.moving.unwrap().step);
        // The first MI at the new rate scores better than the winning probe: a bigger
        // step the same way (m = 2).
        v.scored(&mi_at(first, step), 12.0);
        assert_eq!(v.mode, Mode::Moving);
        assert!(
            v.rate > first && v.confidence == 2.0,
            "rate {} m {}",
            v.rate,
            v.confidence
        );
        // A second MI of the old step is no new sample.
        let second = v.rate;
        v.scored(&mi_at(first, step), -100.0);
        assert_eq!(v.rate, second);
        // The next step scores worse: back to the better rate, and probe.
        v.scored(&mi_at(second, step + 1), 11.0);
        assert_eq!((v.mode, v.rate, v.confidence), (Mode::Probing, first, 1.0));
    }

    #[test]
    fn a_falling_rtt_earns_no_utility_and_a_rising_one_costs() {
        let v = vivace();
        let mut mi = mi_at(1_000_000.0, 0);
        mi.purpose = Purpose::Base;
        mi.sent = 40_000;
        mi.acked = 40_000;
        let flat = v.utility(&mi, Duration::from_millis(40));
        assert!((flat - 8f64.powf(0.9)).abs() < 1e-9, "{flat}");
        // Falling by 1.9 ms to the min RTT: within the window's two packets of slack,
        // so the rate is the chosen one, and the fall earns nothing.
        mi.rtts = (0..20)
            .map(|i| (i as f64 * 0.002, 0.0419 - i as f64 * 0.0001))
            .collect();
        assert_eq!(v.utility(&mi, Duration::from_millis(40)), flat);
        mi.rtts = (0..20).map(|i| (i as f64 * 0.002, 0.040 + i as f64 * 0.0005)).collect();
        assert!(v.utility(&mi, Duration::from_millis(40)) < flat - 1000.0);
    }

    /// A window-limited MI sends window / RTT, not its chosen rate: behind a standing
    /// queue that doubles the RTT, x is about half the chosen rate (§3's sending rate).
    #[test]
    fn a_standing_queue_holds_the_scored_rate_to_what_the_window_sends() {
        let v = vivace();
        let mut mi = mi_at(1_000_000.0, 0);
        mi.purpose = Purpose::Base;
        mi.sent = 40_000;
        mi.acked = 40_000;
        mi.rtts = (0..20).map(|i| (i as f64 * 0.002, 0.080)).collect();
        let u = v.utility(&mi, Duration::from_millis(40));
        // window = 1 MB/s × 40 ms + 2 × 1200 B = 42.4 kB, sent per 80 ms: 4.24 Mbit/s.
        assert!((u - 4.24f64.powf(0.9)).abs() < 1e-6, "{u}");
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
