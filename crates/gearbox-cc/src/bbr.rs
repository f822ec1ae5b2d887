//! BBR v1 for QUIC (Cardwell, Cheng, Gunn, Hassas Yeganeh, Jacobson, "BBR:
//! Congestion-Based Congestion Control", ACM Queue 14(5), 2016; the state machine of
//! draft-cardwell-iccrg-bbr-congestion-control-00 §4). The BBR Floo switches among
//! (Floo §2.1, §3.4, Fig. 12).
//!
//! BBR models the path by two numbers: the bottleneck bandwidth `BtlBw` (the max
//! delivery rate over the last 10 rounds, kept at connection level in
//! [`PathState::btl_bw`]) and the round-trip propagation time `RTprop` (the min RTT over
//! 10 s, kept here with its own stamp so that a 10 s stretch without a new minimum
//! triggers ProbeRTT, §4.3.5). Its states:
//! - **Startup** (§4.3.2): gain 2/ln 2 ≈ 2.885 until the bandwidth stops growing by 25%
//!   for 3 rounds (the pipe is full);
//! - **Drain** (§4.3.3): gain ln 2 / 2.885 until what is in flight is down to one BDP;
//! - **ProbeBW** (§4.3.4): the 8-phase gain cycle 1.25, 0.75, 1 × 6, one min RTT each,
//!   starting at a random phase other than 0.75;
//! - **ProbeRTT** (§4.3.5): when RTprop is 10 s old, 4 packets in flight for at least
//!   200 ms and one round, then back.
//!
//! **Rates on quinn** (docs/cc.md "Rates on a window-based stack"): quinn 0.11 paces by
//! the window alone (1.25 × window / sRTT) and ignores a controller's pacing rate, so
//! BBR's pacing gains act through the window: in ProbeBW, Drain and ProbeRTT the window
//! is `pacing_gain × BtlBw × RTprop` plus 3 packets of headroom for delayed and
//! aggregated ACKs, capped by `cwnd_gain × BDP`. Without a queue, a window of
//! `g × BDP` sends `g × BtlBw`, which is what pacing at `g × BtlBw` would do: the 1.25
//! phase builds a quarter BDP of queue, the 0.75 phase drains it, the 1.0 phases hold
//! a queue of at most the headroom. In Startup the window grows by the bytes
//! acknowledged up to `high_gain × BDP`, as in the draft's `BBRSetCwnd`.
//!
//! **Loss** (§4.2.3.4, "Modulating cwnd in Loss Recovery"): the first round of a
//! recovery conserves packets (window = what is in flight plus what is acknowledged),
//! and the window before recovery is restored when it ends. A persistent congestion
//! takes the window to 4 packets.

use std::time::{Duration, Instant};

use crate::algorithm::{window_of_rate, Ack, Algorithm, Phase, SendingRate};
use crate::config::{positive, InvalidParameter};
use crate::loss_based::Recovery;
use crate::path::PathState;

/// BBR's parameters (the draft's constants).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BbrConfig {
    /// Pacing and window gain of Startup (2/ln 2).
    pub high_gain: f64,
    /// Pacing gain of Drain (ln 2 / 2.885, the inverse of `high_gain`).
    pub drain_gain: f64,
    /// Cap on the window in ProbeBW, in BDPs (2).
    pub cwnd_gain: f64,
    /// The ProbeBW gain cycle, one phase per min RTT (1.25, 0.75, 1 × 6).
    pub probe_bw_gains: Vec<f64>,
    /// Time ProbeRTT holds the window at its minimum, ms (200).
    pub probe_rtt_ms: f64,
    /// Age at which RTprop is refreshed by ProbeRTT, s (10).
    pub min_rtt_window_s: f64,
    /// Growth of the bandwidth that counts as still growing in Startup (1.25).
    pub full_bw_threshold: f64,
    /// Rounds without that growth after which the pipe is full (3).
    pub full_bw_rounds: u32,
    /// Headroom over `pacing_gain × BDP` in the window, packets (3: delayed and
    /// aggregated ACKs).
    pub headroom_packets: u64,
    /// Seed of the random first ProbeBW phase.
    pub seed: u64,
}

impl Default for BbrConfig {
    fn default() -> Self {
        let high_gain = 2.0 / std::f64::consts::LN_2;
        BbrConfig {
            high_gain,
            drain_gain: 1.0 / high_gain,
            cwnd_gain: 2.0,
            probe_bw_gains: vec![1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
            probe_rtt_ms: 200.0,
            min_rtt_window_s: 10.0,
            full_bw_threshold: 1.25,
            full_bw_rounds: 3,
            headroom_packets: 3,
            seed: 0x6262_7231,
        }
    }
}

impl BbrConfig {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), InvalidParameter> {
        positive("bbr.high_gain", self.high_gain)?;
        positive("bbr.drain_gain", self.drain_gain)?;
        positive("bbr.cwnd_gain", self.cwnd_gain)?;
        if self.probe_bw_gains.is_empty() {
            return Err(InvalidParameter::new(
                "bbr.probe_bw_gains",
                "[]",
                "needs at least one gain",
            ));
        }
        for (i, g) in self.probe_bw_gains.iter().enumerate() {
            positive(&format!("bbr.probe_bw_gains[{i}]"), *g)?;
        }
        positive("bbr.probe_rtt_ms", self.probe_rtt_ms)?;
        positive("bbr.min_rtt_window_s", self.min_rtt_window_s)?;
        if !(self.full_bw_threshold.is_finite() && self.full_bw_threshold > 1.0) {
            return Err(InvalidParameter::new(
                "bbr.full_bw_threshold",
                self.full_bw_threshold,
                "must be a finite number above 1",
            ));
        }
        if self.full_bw_rounds == 0 {
            return Err(InvalidParameter::new("bbr.full_bw_rounds", 0, "must be at least 1"));
        }
        Ok(())
    }
}

/// BBR's states (draft §4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Startup,
    Drain,
    ProbeBw,
    ProbeRtt,
}

/// BBR v1.
#[derive(Debug, Clone)]
pub struct Bbr {
    config: BbrConfig,
    state: State,
    /// Max datagram size, bytes.
    mtu: u64,
    /// Congestion window, bytes.
    window: u64,
    /// Window saved on entering recovery or ProbeRTT, restored after, bytes.
    prior_window: u64,
    /// Initial window, bytes.
    initial_window: u64,
    /// Current pacing gain.
    pacing_gain: f64,
    /// RTprop: min RTT seen since `rtprop_stamp`.
    rtprop: Duration,
    /// When RTprop was last set.
    rtprop_stamp: Option<Instant>,
    /// Bandwidth carried by a switch, used until the path has its own sample, bytes/s.
    bw_seed: u64,
    /// Startup's full-pipe test: the bandwidth to beat and the rounds without.
    full_bw: u64,
    full_bw_count: u32,
    filled_pipe: bool,
    /// ProbeBW: current phase and when it began.
    cycle_index: usize,
    cycle_stamp: Option<Instant>,
    /// ProbeRTT: when the minimum window has been held long enough, and the round it
    /// must also outlast.
    probe_rtt_done: Option<Instant>,
    probe_rtt_round: Option<u64>,
    /// Loss recovery (RFC 9002's period) and the round of packet conservation.
    recovery: Recovery,
    conservation_round: Option<u64>,
    /// xorshift state for the first ProbeBW phase.
    rng: u64,
    /// Whether `rng` has taken in the connection's first RTT sample.
    rng_mixed: bool,
}

impl Bbr {
    /// BBR in Startup from `initial_window` bytes.
    pub fn new(config: &BbrConfig, initial_window: u64, _now: Instant, path: &PathState) -> Self {
        Bbr {
            config: config.clone(),
            state: State::Startup,
            mtu: u64::from(path.mtu),
            window: initial_window,
            prior_window: initial_window,
            initial_window,
            pacing_gain: config.high_gain,
            rtprop: Duration::MAX,
            rtprop_stamp: None,
            bw_seed: 0,
            full_bw: 0,
            full_bw_count: 0,
            filled_pipe: false,
            cycle_index: 0,
            cycle_stamp: None,
            probe_rtt_done: None,
            probe_rtt_round: None,
            recovery: Recovery::default(),
            conservation_round: None,
            rng: config.seed | 1,
            rng_mixed: false,
        }
    }

    fn min_window(&self) -> u64 {
        4 * self.mtu
    }

    fn btl_bw(&self, path: &PathState) -> u64 {
        if path.btl_bw > 0 {
            path.btl_bw
        } else {
            self.bw_seed
        }
    }

    fn rtprop_or(&self, path: &PathState) -> Duration {
        if self.rtprop == Duration::MAX {
            path.min_rtt_or_srtt()
        } else {
            self.rtprop
        }
    }

    /// `gain × BtlBw × RTprop`, bytes (None before a bandwidth sample).
    fn bdp(&self, gain: f64, path: &PathState) -> Option<u64> {
        let bw = self.btl_bw(path);
        (bw > 0).then(|| (window_of_rate(bw, self.rtprop_or(path)) as f64 * gain) as u64)
    }

    /// The window BBR aims at in its current state.
    fn target_window(&self, path: &PathState) -> Option<u64> {
        let headroom = self.config.headroom_packets * self.mtu;
        match self.state {
            State::Startup => self.bdp(self.config.high_gain, path),
            State::ProbeRtt => Some(self.min_window()),
            State::Drain | State::ProbeBw => {
                let shaped = self.bdp(self.pacing_gain, path)? + headroom;
                let cap = self.bdp(self.config.cwnd_gain, path)? + headroom;
                Some(shaped.min(cap))
            }
        }
    }

    /// The random ProbeBW phase is there so that flows sharing a bottleneck do not probe
    /// in step (draft §4.3.4.4); with one configured seed every connection would draw the
    /// same phases. So the seed takes in the first RTT sample's nanoseconds, which differ
    /// between real connections and stay reproducible in virtual time (as Vivace's probe
    /// order does).
    fn mix_first_rtt(&mut self, rtt: Duration) {
        if !self.rng_mixed {
            self.rng ^= (rtt.as_nanos() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            self.rng |= 1;
            self.rng_mixed = true;
        }
    }

    fn next_random(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    fn enter_startup(&mut self) {
        self.state = State::Startup;
        self.pacing_gain = self.config.high_gain;
    }

    fn enter_probe_bw(&mut self, now: Instant) {
        self.state = State::ProbeBw;
        // A random phase other than the draining one (draft §4.3.4.4).
        let n = self.config.probe_bw_gains.len();
        let mut index = (self.next_random() % n as u64) as usize;
        if n > 1 && self.config.probe_bw_gains[index] < 1.0 {
            index = (index + 1) % n;
        }
        self.cycle_index = index;
        self.cycle_stamp = Some(now);
        self.pacing_gain = self.config.probe_bw_gains[index];
    }

    fn enter_probe_rtt(&mut self) {
        self.state = State::ProbeRtt;
        self.pacing_gain = 1.0;
        self.prior_window = self.prior_window.max(self.window);
        self.probe_rtt_done = None;
        self.probe_rtt_round = None;
    }

    fn check_full_pipe(&mut self, path: &PathState) {
        if self.filled_pipe || !path.round_start || path.delivery_rate_app_limited {
            return;
        }
        let bw = self.btl_bw(path);
        if bw as f64 >= self.full_bw as f64 * self.config.full_bw_threshold {
            self.full_bw = bw;
            self.full_bw_count = 0;
            return;
        }
        self.full_bw_count += 1;
        if self.full_bw_count >= self.config.full_bw_rounds {
            self.filled_pipe = true;
        }
    }

    fn advance_cycle(&mut self, now: Instant, path: &PathState) {
        let Some(stamp) = self.cycle_stamp else {
            self.cycle_stamp = Some(now);
            return;
        };
        let elapsed = now.saturating_duration_since(stamp) > self.rtprop_or(path);
        let inflight = path.bytes_in_flight;
        let bdp = self.bdp(1.0, path).unwrap_or(0);
        let next = if self.pacing_gain > 1.0 {
            // Probe until the pipe held gain × BDP or a loss said it cannot.
            elapsed && (self.recovery.is_active() || inflight >= self.bdp(self.pacing_gain, path).unwrap_or(0))
        } else if self.pacing_gain < 1.0 {
            // Drain for a round, or less if the queue is already gone.
            elapsed || inflight <= bdp
        } else {
            elapsed
        };
        if next {
            self.cycle_index = (self.cycle_index + 1) % self.config.probe_bw_gains.len();
            self.cycle_stamp = Some(now);
            self.pacing_gain = self.config.probe_bw_gains[self.cycle_index];
        }
    }

    fn update_rtprop(&mut self, now: Instant, rtt: Duration) -> bool {
        let window = Duration::from_secs_f64(self.config.min_rtt_window_s);
        let expired = self
            .rtprop_stamp
            .is_some_and(|s| now.saturating_duration_since(s) > window);
        // Only a strictly lower RTT renews the stamp (equal ones do not), so a path whose
        // min RTT never improves is still probed every `min_rtt_window_s`; an expired
        // RTprop takes the current sample, so a longer path is learnt (draft §4.3.5).
        if rtt < self.rtprop || expired || self.rtprop_stamp.is_none() {
            self.rtprop = rtt;
            self.rtprop_stamp = Some(now);
        }
        expired
    }

    fn handle_probe_rtt(&mut self, now: Instant, path: &PathState) {
        if self.probe_rtt_done.is_none() && path.bytes_in_flight <= self.min_window() + self.mtu {
            self.probe_rtt_done = Some(now + Duration::from_secs_f64(self.config.probe_rtt_ms / 1e3));
            self.probe_rtt_round = Some(path.round_count + 1);
        }
        let (Some(done), Some(round)) = (self.probe_rtt_done, self.probe_rtt_round) else {
            return;
        };
        if now >= done && path.round_count >= round {
            self.rtprop_stamp = Some(now);
            self.window = self.window.max(self.prior_window);
            if self.filled_pipe {
                self.enter_probe_bw(now);
            } else {
                self.enter_startup();
            }
        }
    }
}

impl Algorithm for Bbr {
    fn on_ack(&mut self, now: Instant, ack: &Ack, path: &PathState) {
        self.mix_first_rtt(ack.rtt);
        let rtprop_expired = self.update_rtprop(now, ack.rtt);
        let recovering = self.recovery.is_active();
        if recovering && !self.recovery.acked(ack.sent) {
            self.conservation_round = None;
            self.window = self.window.max(self.prior_window);
        }
        self.check_full_pipe(path);
        match self.state {
            State::Startup if self.filled_pipe => {
                self.state = State::Drain;
                self.pacing_gain = self.config.drain_gain;
            }
            State::ProbeBw => self.advance_cycle(now, path),
            _ => {}
        }
        if self.state == State::Drain && path.bytes_in_flight <= self.bdp(1.0, path).unwrap_or(u64::MAX) {
            self.enter_probe_bw(now);
        }
        if rtprop_expired && self.state != State::ProbeRtt {
            self.enter_probe_rtt();
        }
        if self.state == State::ProbeRtt {
            self.handle_probe_rtt(now, path);
        }

        // The window (draft §4.2.3, shaped as the module doc says).
        if self.conservation_round.is_some_and(|r| path.round_count <= r) {
            self.window = self.window.max(path.bytes_in_flight + ack.bytes);
            return;
        }
        match self.target_window(path) {
            None => self.window += ack.bytes,
            Some(target) => {
                if self.filled_pipe || self.state == State::ProbeRtt {
                    self.window = (self.window + ack.bytes).min(target);
                } else if self.window < target || path.delivered < self.initial_window {
                    self.window += ack.bytes;
                }
            }
        }
        self.window = self.window.max(self.min_window());
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        persistent_congestion: bool,
        _lost_bytes: u64,
        path: &PathState,
    ) {
        if persistent_congestion {
            self.prior_window = self.prior_window.max(self.window);
            self.window = self.min_window();
            return;
        }
        if !self.recovery.congestion(now, sent) {
            return;
        }
        self.prior_window = if self.state == State::ProbeRtt {
            self.prior_window.max(self.window)
        } else {
            self.window
        };
        self.conservation_round = Some(path.round_count + 1);
        self.window = path.bytes_in_flight.max(self.min_window());
    }

    fn on_mtu_update(&mut self, path: &PathState) {
        self.mtu = u64::from(path.mtu);
        self.window = self.window.max(self.min_window());
    }

    fn window(&self) -> u64 {
        self.window
    }

    fn sending_rate(&self, path: &PathState) -> SendingRate {
        let bw = self.btl_bw(path);
        if bw == 0 {
            return SendingRate::from_window(self.window, path.srtt);
        }
        SendingRate {
            cwnd: self.window,
            pacing_rate: (bw as f64 * self.pacing_gain) as u64,
        }
    }

    fn phase(&self) -> Phase {
        match self.state {
            State::Startup => Phase::Starting,
            State::Drain => Phase::Draining,
            State::ProbeBw => Phase::Converged,
            State::ProbeRtt => Phase::ProbingRtt,
        }
    }

    fn phase_name(&self) -> &'static str {
        match self.state {
            State::Startup => "startup",
            State::Drain => "drain",
            State::ProbeBw => "probe_bw",
            State::ProbeRtt => "probe_rtt",
        }
    }

    /// Full switching (Floo §3.4, Fig. 12d): the pipe counts as full, the carried
    /// pacing rate seeds the bandwidth until the path has a sample of its own, and BBR
    /// enters ProbeRTT first (to measure RTprop the old algorithm's queue may have
    /// hidden), then ProbeBW with the carried window restored.
    fn enter_converged(&mut self, now: Instant, rate: SendingRate, path: &PathState) {
        self.filled_pipe = true;
        self.bw_seed = if rate.pacing_rate > 0 {
            rate.pacing_rate
        } else {
            crate::algorithm::rate_of_window(rate.cwnd, path.srtt)
        };
        if path.min_rtt != Duration::MAX {
            self.rtprop = path.min_rtt;
        }
        self.rtprop_stamp = Some(now);
        self.window = rate.cwnd.max(self.min_window());
        self.prior_window = self.window;
        self.cycle_stamp = Some(now);
        self.enter_probe_rtt();
        self.window = self.min_window();
    }

    fn clone_box(&self) -> Box<dyn Algorithm> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cubic::{Cubic, CubicConfig};
    use crate::testbed::{run, Bottleneck};

    fn bbr() -> Bbr {
        let path = PathState::new(1200, Duration::from_millis(333));
        Bbr::new(&BbrConfig::default(), 12_000, Instant::now(), &path)
    }

    #[test]
    fn connections_with_different_first_rtts_draw_different_probe_bw_phases() {
        let first_phase = |rtt_us: u64| {
            let mut c = bbr();
            c.mix_first_rtt(Duration::from_micros(rtt_us));
            c.mix_first_rtt(Duration::from_micros(1)); // only the first sample counts
            c.enter_probe_bw(Instant::now());
            c.cycle_index
        };
        let phases: std::collections::BTreeSet<usize> = (0..16).map(|i| first_phase(40_000 + 137 * i)).collect();
        assert!(phases.len() >= 4, "16 connections drew the phases {phases:?}");
        assert_eq!(first_phase(40_000), first_phase(40_000), "reproducible");
    }

    #[test]
    fn fills_10_and_50_mbit_bottlenecks_with_shallow_and_deep_buffers() {
        for mbit in [10.0, 50.0] {
            for bdps in [1.0, 4.0] {
                let mut c = bbr();
                let out = run(
                    &mut c,
                    Bottleneck::new(mbit, 40, bdps),
                    Duration::from_secs(30),
                    Duration::from_secs(5),
                );
                assert!(
                    out.utilisation > 0.9,
                    "{mbit} Mbit/s, {bdps} BDP: utilisation {}",
                    out.utilisation
                );
            }
        }
    }

    #[test]
    fn after_startup_the_queue_stays_near_empty_where_cubic_fills_it() {
        let link = Bottleneck::new(10.0, 40, 4.0);
        let b = run(&mut bbr(), link, Duration::from_secs(30), Duration::from_secs(5));
        let path = PathState::new(1200, Duration::from_millis(333));
        let mut cubic = Cubic::new(&CubicConfig::default(), 12_000, Instant::now(), &path);
        let c = run(&mut cubic, link, Duration::from_secs(30), Duration::from_secs(5));
        let (bq, cq) = (
            b.mean_queue_delay.as_secs_f64() * 1e3,
            c.mean_queue_delay.as_secs_f64() * 1e3,
        );
        eprintln!("mean queueing delay: bbr {bq:.1} ms, cubic {cq:.1} ms");
        assert!(bq < 0.25 * 40.0, "bbr queue {bq:.1} ms");
        assert!(bq < cq / 3.0, "bbr {bq:.1} ms vs cubic {cq:.1} ms");
    }

    #[test]
    fn probe_rtt_comes_about_every_ten_seconds() {
        let mut c = bbr();
        let out = run(
            &mut c,
            Bottleneck::new(10.0, 40, 1.0),
            Duration::from_secs(35),
            Duration::ZERO,
        );
        // ProbeRTT is the only time the window is 4 packets.
        let mut entries = 0;
        let mut inside = false;
        for s in &out.samples {
            let low = s.cwnd <= 4 * 1200 + 1200;
            if low && !inside && s.t > Duration::from_secs(1) {
                entries += 1;
            }
            inside = low;
        }
        assert!((2..=4).contains(&entries), "{entries} ProbeRTT entries in 35 s");
    }

    #[test]
    fn random_loss_barely_slows_it() {
        for loss in [0.01, 0.02] {
            let link = Bottleneck {
                loss,
                ..Bottleneck::new(10.0, 40, 1.0)
            };
            let out = run(&mut bbr(), link, Duration::from_secs(30), Duration::from_secs(5));
            eprintln!("loss {loss}: bbr utilisation {:.3}", out.utilisation);
            assert!(out.utilisation > 0.8, "loss {loss}: utilisation {}", out.utilisation);
        }
    }

    #[test]
    fn a_switch_into_bbr_probes_rtt_first_then_probes_bandwidth() {
        let t0 = Instant::now();
        let mut path = PathState::new(1200, Duration::from_millis(40));
        path.min_rtt = Duration::from_millis(40);
        let mut c = bbr();
        c.enter_converged(
            t0,
            SendingRate {
                cwnd: 60_000,
                pacing_rate: 1_250_000,
            },
            &path,
        );
        assert_eq!((c.phase(), c.window()), (Phase::ProbingRtt, 4 * 1200));
        path.bytes_in_flight = 4 * 1200;
        let ack = |sent| Ack {
            sent,
            bytes: 1200,
            app_limited: false,
            rtt: Duration::from_millis(40),
        };
        c.on_ack(t0 + Duration::from_millis(10), &ack(t0), &path);
        path.round_count += 2;
        c.on_ack(t0 + Duration::from_millis(250), &ack(t0), &path);
        assert_eq!(c.phase(), Phase::Converged);
        assert!(c.window() >= 50_000, "the carried window is back: {}", c.window());
        assert_eq!(c.sending_rate(&path).pacing_rate as f64, 1_250_000.0 * c.pacing_gain);
    }

    #[test]
    fn bad_gains_are_refused_by_name() {
        let e = BbrConfig {
            probe_bw_gains: vec![1.25, -1.0],
            ..BbrConfig::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.field, "bbr.probe_bw_gains[1]");
    }
}
