//! What a connection knows about its path, kept once for every algorithm.
//!
//! Floo §3.4 Table 3 calls these the observation variables: bottleneck bandwidth, min
//! RTT and smoothed RTT. BBR needs them (Cardwell et al., ACM Queue 2016), Westwood+
//! and Copa read them too, and Floo's monitor (§3.2 Table 2) reports them; kept here,
//! at connection level, they survive a switch of algorithm.
//!
//! The delivery rate follows the sampling of draft-cheng-iccrg-delivery-rate-estimation
//! §3 (what BBR's own implementations do): each send remembers how much had been
//! delivered when it left, and its ACK turns the bytes delivered since over the time
//! elapsed into one rate sample. quinn gives no per-packet hook, so the state is kept per
//! `on_sent` call (one per datagram batch, all with the same send time) and found again
//! by the send time an ACK carries.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Rounds over which the bottleneck bandwidth is the max of the delivery-rate samples
/// (BBR's `BtlBwFilterLen`, ACM Queue 2016: "10 round trips").
pub const BTL_BW_WINDOW_ROUNDS: u64 = 10;

/// Time over which the min RTT is the min of the RTT samples (BBR's `RTpropFilterLen`,
/// 10 s).
pub const MIN_RTT_WINDOW: Duration = Duration::from_secs(10);

/// Connection-level observations, updated by [`crate::Switchable`] before each event is
/// handed to the algorithm.
#[derive(Debug, Clone, PartialEq)]
pub struct PathState {
    /// Current maximum datagram size, bytes.
    pub mtu: u16,
    /// Smoothed RTT (quinn's, ACK delay removed; RFC 9002 §5.3).
    pub srtt: Duration,
    /// Latest RTT sample (ACK arrival minus send time of the newest acked packet).
    pub latest_rtt: Duration,
    /// RTT variation, RFC 6298 §2 estimator over this connection's samples.
    pub rttvar: Duration,
    /// Min RTT over the last [`MIN_RTT_WINDOW`] (BBR's RTprop); `Duration::MAX`
    /// before the first sample.
    pub min_rtt: Duration,
    /// When [`Self::min_rtt`] was last lowered or refreshed.
    pub min_rtt_stamp: Option<Instant>,
    /// Bottleneck bandwidth: max delivery rate over the last [`BTL_BW_WINDOW_ROUNDS`]
    /// rounds, bytes per second (0 before the first sample).
    pub btl_bw: u64,
    /// Latest delivery-rate sample, bytes per second.
    pub delivery_rate: u64,
    /// Whether the latest delivery-rate sample was taken while app-limited.
    pub delivery_rate_app_limited: bool,
    /// Round trips counted so far (a round ends when a packet sent after the previous
    /// round's end is acknowledged).
    pub round_count: u64,
    /// Whether the ACK being processed started a new round.
    pub round_start: bool,
    /// Bytes acknowledged since the connection started.
    pub delivered: u64,
    /// Bytes sent since the connection started.
    pub sent: u64,
    /// Bytes declared lost since the connection started.
    pub lost: u64,
    /// Congestion events (losses or ECN-CE marks) since the connection started.
    pub congestion_events: u64,
    /// Bytes in flight after the latest ACK frame.
    pub bytes_in_flight: u64,
    /// Whether the sender was app-limited at the latest ACK frame.
    pub app_limited: bool,
}

impl PathState {
    /// The state of a connection that has sent nothing yet.
    pub fn new(mtu: u16, initial_rtt: Duration) -> Self {
        PathState {
            mtu,
            srtt: initial_rtt,
            latest_rtt: initial_rtt,
            rttvar: initial_rtt / 2,
            min_rtt: Duration::MAX,
            min_rtt_stamp: None,
            btl_bw: 0,
            delivery_rate: 0,
            delivery_rate_app_limited: false,
            round_count: 0,
            round_start: false,
            delivered: 0,
            sent: 0,
            lost: 0,
            congestion_events: 0,
            bytes_in_flight: 0,
            app_limited: false,
        }
    }

    /// Min RTT if one was measured, else the smoothed RTT.
    pub fn min_rtt_or_srtt(&self) -> Duration {
        if self.min_rtt == Duration::MAX {
            self.srtt
        } else {
            self.min_rtt
        }
    }

    /// Bandwidth-delay product from the bottleneck bandwidth and min RTT, bytes (None
    /// before both are measured).
    pub fn bdp(&self) -> Option<u64> {
        if self.btl_bw == 0 || self.min_rtt == Duration::MAX {
            return None;
        }
        Some(crate::algorithm::window_of_rate(self.btl_bw, self.min_rtt))
    }
}

/// Delivery state remembered per send (draft-cheng-iccrg-delivery-rate-estimation §3.2).
#[derive(Debug, Clone, Copy)]
struct SendRecord {
    sent_time: Instant,
    delivered: u64,
    delivered_time: Instant,
    first_sent_time: Instant,
    app_limited: bool,
}

/// Keeps [`PathState`] up to date from quinn's events: RTT, delivery rate, rounds and
/// the windowed filters.
#[derive(Debug, Clone)]
pub struct PathEstimator {
    records: VecDeque<SendRecord>,
    delivered_time: Option<Instant>,
    first_sent_time: Option<Instant>,
    next_round_delivered: u64,
    /// Monotonic deque of (round, rate): front is the max of the window.
    bw_window: VecDeque<(u64, u64)>,
    /// Monotonic deque of (time, rtt): front is the min of the window.
    rtt_window: VecDeque<(Instant, Duration)>,
    has_rttvar_sample: bool,
    app_limited_until: u64,
}

/// Most send records kept: far beyond any window quinn allows at 1200-byte datagrams
/// (bounded so a peer that never acknowledges cannot grow it without limit).
const MAX_RECORDS: usize = 1 << 16;

impl Default for PathEstimator {
    fn default() -> Self {
        PathEstimator::new()
    }
}

impl PathEstimator {
    /// An estimator with no samples.
    pub fn new() -> Self {
        PathEstimator {
            records: VecDeque::new(),
            delivered_time: None,
            first_sent_time: None,
            next_round_delivered: 0,
            bw_window: VecDeque::new(),
            rtt_window: VecDeque::new(),
            has_rttvar_sample: false,
            app_limited_until: 0,
        }
    }

    /// A batch of `bytes` left at `now`; `app_limited` says the application had nothing
    /// more to send when it left.
    pub fn on_sent(&mut self, path: &mut PathState, now: Instant, bytes: u64, app_limited: bool) {
        if path.bytes_in_flight == 0 || self.delivered_time.is_none() {
            // Nothing in flight: the next sample's interval starts now (draft §3.2).
            self.delivered_time = Some(now);
            self.first_sent_time = Some(now);
        }
        if app_limited {
            self.app_limited_until = path.delivered + path.bytes_in_flight + bytes;
        }
        path.sent += bytes;
        path.bytes_in_flight += bytes;
        if self.records.back().is_some_and(|r| r.sent_time == now) {
            return;
        }
        if self.records.len() >= MAX_RECORDS {
            self.records.pop_front();
        }
        self.records.push_back(SendRecord {
            sent_time: now,
            delivered: path.delivered,
            delivered_time: self.delivered_time.unwrap_or(now),
            first_sent_time: self.first_sent_time.unwrap_or(now),
            app_limited: self.app_limited_until > path.delivered,
        });
    }

    /// One packet sent at `sent` carrying `bytes` was acknowledged at `now`; `srtt` is
    /// quinn's smoothed RTT after it. Updates RTT, delivery rate, rounds and filters.
    pub fn on_ack(&mut self, path: &mut PathState, now: Instant, sent: Instant, bytes: u64, srtt: Duration) {
        let rtt = now.saturating_duration_since(sent);
        path.latest_rtt = rtt;
        path.srtt = srtt;
        self.update_rttvar(path, rtt);
        self.update_min_rtt(path, now, rtt);

        path.delivered += bytes;
        path.bytes_in_flight = path.bytes_in_flight.saturating_sub(bytes);
        path.round_start = false;
        self.delivered_time = Some(now);

        while self.records.front().is_some_and(|r| r.sent_time < sent) {
            self.records.pop_front();
        }
        let Some(rec) = self.records.front().copied().filter(|r| r.sent_time == sent) else {
            return;
        };
        self.first_sent_time = Some(rec.sent_time);
        if rec.delivered >= self.next_round_delivered {
            self.next_round_delivered = path.delivered;
            path.round_count += 1;
            path.round_start = true;
        }
        let send_elapsed = rec.sent_time.saturating_duration_since(rec.first_sent_time);
        let ack_elapsed = now.saturating_duration_since(rec.delivered_time);
        let interval = send_elapsed.max(ack_elapsed);
        // An interval shorter than the min RTT comes from ACK compression; skip it
        // (draft §3.3).
        if interval.is_zero() || (path.min_rtt != Duration::MAX && interval < path.min_rtt) {
            return;
        }
        let rate = ((path.delivered - rec.delivered) as f64 / interval.as_secs_f64()) as u64;
        path.delivery_rate = rate;
        path.delivery_rate_app_limited = rec.app_limited;
        if !rec.app_limited || rate >= path.btl_bw {
            self.update_btl_bw(path, rate);
        }
    }

    /// Packets carrying `lost_bytes` were declared lost.
    pub fn on_congestion_event(&mut self, path: &mut PathState, lost_bytes: u64) {
        path.lost += lost_bytes;
        path.congestion_events += 1;
        path.bytes_in_flight = path.bytes_in_flight.saturating_sub(lost_bytes);
    }

    /// An ACK frame's packets are all processed; quinn tells the bytes still in flight.
    pub fn on_end_acks(&mut self, path: &mut PathState, in_flight: u64, app_limited: bool) {
        path.bytes_in_flight = in_flight;
        path.app_limited = app_limited;
    }

    fn update_rttvar(&mut self, path: &mut PathState, rtt: Duration) {
        if !self.has_rttvar_sample {
            self.has_rttvar_sample = true;
            path.rttvar = rtt / 2;
            return;
        }
        // RFC 6298 §2.3: RTTVAR <- 3/4 RTTVAR + 1/4 |SRTT - R'|.
        let dev = path.srtt.abs_diff(rtt);
        path.rttvar = (path.rttvar * 3 + dev) / 4;
    }

    fn update_min_rtt(&mut self, path: &mut PathState, now: Instant, rtt: Duration) {
        while self.rtt_window.back().is_some_and(|&(_, r)| r >= rtt) {
            self.rtt_window.pop_back();
        }
        self.rtt_window.push_back((now, rtt));
        while self
            .rtt_window
            .front()
            .is_some_and(|&(t, _)| now.saturating_duration_since(t) > MIN_RTT_WINDOW)
        {
            self.rtt_window.pop_front();
        }
        let (stamp, min) = self.rtt_window.front().copied().unwrap_or((now, rtt));
        path.min_rtt = min;
        path.min_rtt_stamp = Some(stamp);
    }

    fn update_btl_bw(&mut self, path: &mut PathState, rate: u64) {
        let round = path.round_count;
        while self.bw_window.back().is_some_and(|&(_, r)| r <= rate) {
            self.bw_window.pop_back();
        }
        self.bw_window.push_back((round, rate));
        while self
            .bw_window
            .front()
            .is_some_and(|&(r, _)| round.saturating_sub(r) >= BTL_BW_WINDOW_ROUNDS)
        {
            self.bw_window.pop_front();
        }
        path.btl_bw = self.bw_window.front().map_or(rate, |&(_, r)| r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A steady flow: one 1200-byte packet every `gap`, each acknowledged `rtt` later.
    fn steady(gap: Duration, rtt: Duration, packets: u32) -> PathState {
        let t0 = Instant::now();
        let mut path = PathState::new(1200, Duration::from_millis(333));
        let mut est = PathEstimator::new();
        let mut acks: VecDeque<Instant> = VecDeque::new();
        for i in 0..packets {
            let now = t0 + gap * i;
            while acks.front().is_some_and(|&s| s + rtt <= now) {
                let s = acks.pop_front().unwrap();
                est.on_ack(&mut path, s + rtt, s, 1200, rtt);
            }
            est.on_sent(&mut path, now, 1200, false);
            acks.push_back(now);
        }
        path
    }

    #[test]
    fn delivery_rate_is_the_sending_rate_of_a_steady_flow() {
        // 1200 B per ms = 1.2 MB/s.
        let path = steady(Duration::from_millis(1), Duration::from_millis(40), 2000);
        let err = (path.btl_bw as f64 - 1.2e6).abs() / 1.2e6;
        assert!(err < 0.05, "btl_bw {} B/s", path.btl_bw);
        assert_eq!(path.min_rtt, Duration::from_millis(40));
        // 2000 ms of sending, 40 ms per round.
        assert!((45..=51).contains(&path.round_count), "rounds {}", path.round_count);
        assert!(path.rttvar < Duration::from_millis(1));
    }

    #[test]
    fn min_rtt_forgets_samples_older_than_its_window() {
        let t0 = Instant::now();
        let mut path = PathState::new(1200, Duration::from_millis(100));
        let mut est = PathEstimator::new();
        est.on_sent(&mut path, t0, 1200, false);
        est.on_ack(
            &mut path,
            t0 + Duration::from_millis(20),
            t0,
            1200,
            Duration::from_millis(20),
        );
        assert_eq!(path.min_rtt, Duration::from_millis(20));
        let t1 = t0 + Duration::from_secs(11);
        est.on_sent(&mut path, t1, 1200, false);
        est.on_ack(
            &mut path,
            t1 + Duration::from_millis(50),
            t1,
            1200,
            Duration::from_millis(30),
        );
        assert_eq!(path.min_rtt, Duration::from_millis(50));
    }
}
