//! Copa for QUIC (Arun & Balakrishnan, "Copa: Practical Delay-Based Congestion Control
//! for the Internet", NSDI 2018).
//!
//! Copa steers the sending rate toward a target that falls as the queue grows:
//! `λt = 1 / (δ · dq)` packets per second, with the queueing delay
//! `dq = RTTstanding − RTTmin` (§2.1). `RTTstanding` is the min RTT over the last half
//! sRTT (robust to ACK compression and jitter), `RTTmin` the min over 10 s (the
//! connection's [`PathState::min_rtt`]). The current rate is `λ = cwnd / RTTstanding`;
//! on every ACK the window moves by `v / (δ · cwnd)` packets per packet acknowledged
//! toward the target, up when `λ ≤ λt`, down otherwise (§2.1 step 3). "An ACK" is
//! one ACK frame, its RTT sample that of its most recently sent packet (see
//! [`AckFrame`]). The velocity `v` (§2.2) starts at 1 and
//! doubles once per RTT after the window has moved the same way for 3 RTTs, and goes
//! back to 1 when the direction changes; so the window converges quickly from far away
//! and oscillates by about `1/δ` packets around the target at equilibrium, which keeps
//! the queue at a few packets. A new flow starts in slow start, doubling the window
//! each RTT until the rate first exceeds the target (§2.1).
//!
//! Competitive mode (§2.3, off by default, `competitive_mode = true` turns it on): when
//! the queue was never nearly empty over 5 RTTs (its min below a tenth of the largest
//! standing queue seen), a buffer-filling flow shares the bottleneck, and Copa
//! competes by adjusting `1/δ` AIMD-style — +1 per RTT without loss, halved on a loss —
//! back to the configured δ when the queue empties again.
//!
//! Copa paces at `2 · cwnd / RTTstanding` in the paper; quinn paces every controller at
//! `1.25 · cwnd / sRTT`. The window still caps what is in flight, so the rate Copa
//! intends is what gets sent; only the spacing of packets within an RTT is quinn's
//! (docs/cc.md "Rates on a window-based stack"). Loss does not move the window outside
//! competitive mode (§2.1); persistent congestion takes it to 2 packets.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::algorithm::{Ack, Algorithm, Phase, SendingRate};
use crate::config::{positive, InvalidParameter};
use crate::loss_based::Recovery;
use crate::path::PathState;

/// Copa's parameters.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CopaConfig {
    /// δ: the weight of delay against throughput (§2.1; 0.5 by default), > 0.
    pub delta: f64,
    /// Competitive mode against buffer-filling flows (§2.3).
    pub competitive_mode: bool,
    /// Largest velocity, packets per ACK scale (the paper gives none; a cap keeps a
    /// long one-way run from overshooting by thousands of packets).
    pub max_velocity: f64,
}

impl Default for CopaConfig {
    fn default() -> Self {
        CopaConfig {
            delta: 0.5,
            competitive_mode: false,
            max_velocity: 256.0,
        }
    }
}

impl CopaConfig {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), InvalidParameter> {
        positive("copa.delta", self.delta)?;
        positive("copa.max_velocity", self.max_velocity)?;
        if self.max_velocity < 1.0 {
            return Err(InvalidParameter::new(
                "copa.max_velocity",
                self.max_velocity,
                "must be at least 1",
            ));
        }
        Ok(())
    }
}

/// Which way the window moved over the last RTT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Up,
    Down,
}

/// Copa.
#[derive(Debug, Clone)]
pub struct Copa {
    config: CopaConfig,
    /// Max datagram size, bytes.
    mtu: u64,
    /// Congestion window, bytes (fractional, as the per-ACK steps are).
    window: f64,
    slow_start: bool,
    /// 1/δ in use (the configured one, or competitive mode's).
    inv_delta: f64,
    competitive: bool,
    /// Velocity v.
    velocity: f64,
    direction: Option<Direction>,
    /// RTTs the window has kept its direction.
    same_direction_rtts: u32,
    /// Window and time at the start of the current RTT.
    rtt_start_window: f64,
    rtt_start: Option<Instant>,
    /// RTT samples of the last half sRTT, for RTTstanding: (time, rtt).
    recent: VecDeque<(Instant, Duration)>,
    /// Standing queueing delays of the last 5 RTTs, for competitive mode's "nearly
    /// empty" test: (time, dq).
    recent_dq: VecDeque<(Instant, Duration)>,
    /// The loss event being handled (competitive mode halves once per event).
    recovery: Recovery,
    /// The ACK frame being delivered (between the first `on_ack` and `on_end_acks`).
    frame: Option<AckFrame>,
}

/// What one ACK frame acknowledged.
#[derive(Debug, Clone, Copy)]
struct AckFrame {
    /// Bytes newly acknowledged.
    bytes: u64,
    /// The frame's RTT sample: the least of its packets' samples, which is the most
    /// recently sent packet's (RFC 9002 §5.1 takes the sample from the largest
    /// acknowledged). An older packet in the same frame waited for the frame: a
    /// handshake-time packet first acknowledged with the response measured 82 ms on
    /// a 40 ms path, which alone ended slow start at 11 packets.
    rtt: Duration,
}

impl Copa {
    /// Copa in slow start from `initial_window` bytes.
    pub fn new(config: &CopaConfig, initial_window: u64, _now: Instant, path: &PathState) -> Self {
        Copa {
            config: config.clone(),
            mtu: u64::from(path.mtu),
            window: initial_window as f64,
            slow_start: true,
            inv_delta: 1.0 / config.delta,
            competitive: false,
            velocity: 1.0,
            direction: None,
            same_direction_rtts: 0,
            rtt_start_window: initial_window as f64,
            rtt_start: None,
            recent: VecDeque::new(),
            recent_dq: VecDeque::new(),
            recovery: Recovery::default(),
            frame: None,
        }
    }

    fn min_window(&self) -> f64 {
        2.0 * self.mtu as f64
    }

    /// RTTstanding: min RTT over the last sRTT / 2.
    fn rtt_standing(&mut self, now: Instant, rtt: Duration, srtt: Duration) -> Duration {
        let half = (srtt / 2).max(Duration::from_millis(1));
        self.recent.push_back((now, rtt));
        while self
            .recent
            .front()
            .is_some_and(|&(t, _)| now.saturating_duration_since(t) > half)
        {
            self.recent.pop_front();
        }
        self.recent.iter().map(|&(_, r)| r).min().unwrap_or(rtt)
    }

    /// Once per RTT: the velocity rule of §2.2 and competitive mode's 1/δ.
    fn end_of_rtt(&mut self, now: Instant) {
        let dir = if self.window >= self.rtt_start_window {
            Direction::Up
        } else {
            Direction::Down
        };
        if self.direction == Some(dir) {
            self.same_direction_rtts += 1;
            if self.same_direction_rtts >= 3 {
                self.velocity = (self.velocity * 2.0).min(self.config.max_velocity);
            }
        } else {
            self.direction = Some(dir);
            self.same_direction_rtts = 0;
            self.velocity = 1.0;
        }
        if self.competitive {
            self.inv_delta += 1.0;
        }
        self.rtt_start = Some(now);
        self.rtt_start_window = self.window;
    }

    /// §2.3: is the queue ever nearly empty over the last 5 RTTs?
    fn update_mode(&mut self, now: Instant, dq: Duration, srtt: Duration) {
        self.recent_dq.push_back((now, dq));
        while self
            .recent_dq
            .front()
            .is_some_and(|&(t, _)| now.saturating_duration_since(t) > srtt * 5)
        {
            self.recent_dq.pop_front();
        }
        let min = self.recent_dq.iter().map(|&(_, d)| d).min().unwrap_or(dq);
        let max = self.recent_dq.iter().map(|&(_, d)| d).max().unwrap_or(dq);
        let nearly_empty = min <= max / 10;
        if nearly_empty && self.competitive {
            self.competitive = false;
            self.inv_delta = 1.0 / self.config.delta;
        } else if !nearly_empty && !self.competitive && self.recent_dq.len() > 10 {
            self.competitive = true;
        }
    }

    /// δ in use.
    pub fn delta(&self) -> f64 {
        1.0 / self.inv_delta
    }

    /// One ACK frame: `bytes` newly acknowledged, `rtt` its RTT sample (§2.1 step 3,
    /// "on every ACK").
    fn on_ack_frame(&mut self, now: Instant, rtt: Duration, bytes: u64, path: &PathState) {
        let srtt = path.srtt;
        let standing = self.rtt_standing(now, rtt, srtt);
        let min_rtt = path.min_rtt_or_srtt().min(standing);
        let dq = standing.saturating_sub(min_rtt);
        if self.config.competitive_mode {
            self.update_mode(now, dq, srtt);
        }
        let mss = self.mtu as f64;
        let cwnd_pkts = self.window / mss;
        // λ = cwnd / RTTstanding and λt = 1 / (δ dq), both in packets per second.
        let rate = cwnd_pkts / standing.as_secs_f64().max(1e-6);
        let target = if dq.is_zero() {
            f64::INFINITY
        } else {
            self.inv_delta / dq.as_secs_f64()
        };
        if self.slow_start {
            if rate <= target {
                self.window += bytes as f64;
            } else {
                self.slow_start = false;
            }
        } else {
            let step = self.velocity * self.inv_delta / cwnd_pkts.max(1.0) * bytes as f64;
            if rate <= target {
                self.window += step;
            } else {
                self.window -= step;
            }
        }
        self.window = self.window.max(self.min_window());
        match self.rtt_start {
            None => {
                self.rtt_start = Some(now);
                self.rtt_start_window = self.window;
            }
            Some(start) if now.saturating_duration_since(start) >= srtt => self.end_of_rtt(now),
            Some(_) => {}
        }
    }
}

impl Algorithm for Copa {
    /// Collects the frame's ACKs; the window moves once per frame, in `on_end_acks`.
    fn on_ack(&mut self, _now: Instant, ack: &Ack, _path: &PathState) {
        let frame = self.frame.get_or_insert(AckFrame { bytes: 0, rtt: ack.rtt });
        frame.bytes += ack.bytes;
        frame.rtt = frame.rtt.min(ack.rtt);
    }

    fn on_end_acks(&mut self, now: Instant, _in_flight: u64, _app_limited: bool, path: &PathState) {
        if let Some(frame) = self.frame.take() {
            self.on_ack_frame(now, frame.rtt, frame.bytes, path);
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
        if persistent_congestion {
            self.window = self.min_window();
            return;
        }
        if !self.recovery.congestion(now, sent) {
            return;
        }
        if self.competitive {
            self.inv_delta = (self.inv_delta / 2.0).max(1.0 / self.config.delta);
        }
    }

    fn on_mtu_update(&mut self, path: &PathState) {
        self.mtu = u64::from(path.mtu);
        self.window = self.window.max(self.min_window());
    }

    fn window(&self) -> u64 {
        self.window as u64
    }

    fn sending_rate(&self, path: &PathState) -> SendingRate {
        SendingRate::from_window(self.window(), path.min_rtt_or_srtt())
    }

    fn phase(&self) -> Phase {
        if self.slow_start {
            Phase::Starting
        } else {
            Phase::Converged
        }
    }

    fn phase_name(&self) -> &'static str {
        match (self.slow_start, self.competitive) {
            (true, _) => "slow_start",
            (false, true) => "competitive",
            (false, false) => "steady",
        }
    }

    /// Full switching (Floo §3.4): the steady state at the carried window, velocity 1.
    fn enter_converged(&mut self, now: Instant, rate: SendingRate, _path: &PathState) {
        self.window = (rate.cwnd as f64).max(self.min_window());
        self.slow_start = false;
        self.velocity = 1.0;
        self.direction = None;
        self.same_direction_rtts = 0;
        self.rtt_start = Some(now);
        self.rtt_start_window = self.window;
    }

    fn clone_box(&self) -> Box<dyn Algorithm> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::newreno::{NewReno, NewRenoConfig};
    use crate::testbed::{run, Bottleneck};

    fn copa(config: &CopaConfig) -> Copa {
        Copa::new(
            config,
            12_000,
            Instant::now(),
            &PathState::new(1200, Duration::from_millis(333)),
        )
    }

    #[test]
    fn fills_a_10_and_a_50_mbit_bottleneck() {
        for mbit in [10.0, 50.0] {
            for bdps in [1.0, 4.0] {
                let mut c = copa(&CopaConfig::default());
                let out = run(
                    &mut c,
                    Bottleneck::new(mbit, 40, bdps),
                    Duration::from_secs(30),
                    Duration::from_secs(5),
                );
                eprintln!(
                    "{mbit} Mbit/s {bdps} BDP: utilisation {:.3}, queue {:.1} ms",
                    out.utilisation,
                    out.mean_queue_delay.as_secs_f64() * 1e3
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
    fn keeps_a_deep_buffer_far_emptier_than_newreno() {
        let link = Bottleneck::new(10.0, 40, 4.0);
        let c = run(
            &mut copa(&CopaConfig::default()),
            link,
            Duration::from_secs(30),
            Duration::from_secs(5),
        );
        let path = PathState::new(1200, Duration::from_millis(333));
        let mut reno = NewReno::new(&NewRenoConfig::default(), 12_000, Instant::now(), &path);
        let r = run(&mut reno, link, Duration::from_secs(30), Duration::from_secs(5));
        let (cq, rq) = (
            c.mean_queue_delay.as_secs_f64() * 1e3,
            r.mean_queue_delay.as_secs_f64() * 1e3,
        );
        eprintln!("queue: copa {cq:.1} ms, newreno {rq:.1} ms");
        assert!(cq < rq / 3.0, "copa {cq:.1} ms vs newreno {rq:.1} ms");
        assert_eq!(c.loss_rate, 0.0, "Copa never overflows the buffer");
    }

    /// The handshake-time packet of the emulator trace: sent 41 ms before the
    /// response, acknowledged in the same frame as the response's first packet.
    #[test]
    fn an_old_packet_in_a_fresh_ack_frame_is_not_read_as_queueing() {
        let t0 = Instant::now();
        let mut path = PathState::new(1200, Duration::from_millis(40));
        path.min_rtt = Duration::from_millis(40);
        let ack = |sent: Instant, now: Instant| Ack {
            sent,
            bytes: 1200,
            app_limited: false,
            rtt: now - sent,
        };
        let now = t0 + Duration::from_millis(81);
        let mut c = copa(&CopaConfig::default());
        c.on_ack(now, &ack(t0, now), &path);
        c.on_ack(now, &ack(t0 + Duration::from_millis(41), now), &path);
        c.on_end_acks(now, 0, false, &path);
        assert_eq!(
            c.phase(),
            Phase::Starting,
            "one frame, one 40 ms sample: still in slow start"
        );
        assert_eq!(c.window(), 12_000 + 2 * 1200);

        // The old sample alone (what every packet used to give) is 81 ms: a 41 ms queue.
        let mut alone = copa(&CopaConfig::default());
        alone.on_ack(now, &ack(t0, now), &path);
        alone.on_end_acks(now, 0, false, &path);
        assert_eq!(alone.phase(), Phase::Converged);
    }

    #[test]
    fn velocity_doubles_after_three_rtts_one_way_and_resets_on_a_turn() {
        let t0 = Instant::now();
        let mut c = copa(&CopaConfig::default());
        c.slow_start = false;
        c.rtt_start = Some(t0);
        let mut now = t0;
        let mut seen = Vec::new();
        for _ in 0..6 {
            c.window += 1200.0;
            now += Duration::from_millis(40);
            c.end_of_rtt(now);
            seen.push(c.velocity);
        }
        assert_eq!(seen, vec![1.0, 1.0, 1.0, 2.0, 4.0, 8.0]);
        c.window -= 1200.0;
        c.end_of_rtt(now + Duration::from_millis(40));
        assert_eq!(c.velocity, 1.0);
    }

    #[test]
    fn entering_the_steady_state_keeps_the_carried_window() {
        let mut c = copa(&CopaConfig::default());
        c.enter_converged(
            Instant::now(),
            SendingRate {
                cwnd: 48_000,
                pacing_rate: 1_200_000,
            },
            &PathState::new(1200, Duration::from_millis(40)),
        );
        assert_eq!((c.window(), c.phase(), c.velocity), (48_000, Phase::Converged, 1.0));
    }

    #[test]
    fn delta_of_zero_or_less_is_refused_by_name() {
        for delta in [0.0, -1.0] {
            let e = CopaConfig {
                delta,
                ..CopaConfig::default()
            }
            .validate()
            .unwrap_err();
            assert_eq!(e.field, "copa.delta");
        }
    }
}
