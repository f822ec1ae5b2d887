//! A path's state through one page load (the scheduling epoch, SAILfish §5.1.4), built
//! from readings of its QUIC connection's statistics and from the streams scheduled on
//! it: the one place that turns readings into the [`PathState`] every path scheduler
//! reads. Sans-IO: the client feeds it readings of quinn's statistics, the simulator
//! readings of quinn-proto's, each with its `now`.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::path::{PathState, SRTT_HISTORY};

/// How many delivery-rate samples the windowed maximum keeps (BBR's bandwidth filter
/// spans 10 round trips).
pub const RATE_SAMPLES: usize = 10;
/// Shortest interval a delivery-rate sample is taken over: shorter ones measure the
/// arrival of single datagrams, not the path's rate.
pub const MIN_RATE_INTERVAL: Duration = Duration::from_millis(10);

/// One reading of a path's QUIC connection statistics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PathSample {
    /// Smoothed RTT, ms.
    pub srtt_ms: f64,
    /// Minimum RTT, ms.
    pub min_rtt_ms: f64,
    /// Congestion window, bytes.
    pub cwnd_bytes: u64,
    /// Packets sent so far on the connection.
    pub sent_packets: u64,
    /// Packets declared lost so far.
    pub lost_packets: u64,
    /// UDP bytes received so far.
    pub rx_bytes: u64,
}

/// One path's state through a load, built from its [`PathSample`]s and the streams
/// scheduled on it; sans-IO (every reading comes with its `now`), so its rules are
/// tested with invented readings.
#[derive(Debug, Clone)]
pub struct PathMonitor {
    /// The path's position in the client's list of paths.
    pub index: usize,
    /// The local address its connection is bound to (may be learnt after the first
    /// reading).
    pub local_addr: String,
    /// Counters at the start of the epoch (the load).
    baseline: Option<PathSample>,
    /// The last reading and when it was taken, with whether streams were in flight then.
    last: Option<(Instant, PathSample, bool)>,
    latest: Option<PathSample>,
    history: VecDeque<f64>,
    rates: VecDeque<f64>,
    bytes_in_flight: u64,
    streams_in_flight: usize,
}

impl PathMonitor {
    /// A monitor of path `index` bound to `local_addr`, with nothing read yet.
    pub fn new(index: usize, local_addr: impl Into<String>) -> Self {
        PathMonitor {
            index,
            local_addr: local_addr.into(),
            baseline: None,
            last: None,
            latest: None,
            history: VecDeque::new(),
            rates: VecDeque::new(),
            bytes_in_flight: 0,
            streams_in_flight: 0,
        }
    }

    /// A reading of the path's connection. The first one starts the epoch. A
    /// delivery-rate sample is taken over the interval since the previous reading when
    /// it is at least [`MIN_RATE_INTERVAL`] long and streams were in flight at both
    /// ends of it (an idle path's rate says nothing about the path: BBR's app-limited
    /// rule).
    pub fn observe(&mut self, now: Instant, sample: PathSample) {
        if self.baseline.is_none() {
            self.baseline = Some(sample);
        }
        if self.history.back() != Some(&sample.srtt_ms) {
            self.history.push_back(sample.srtt_ms);
            while self.history.len() > SRTT_HISTORY {
                self.history.pop_front();
            }
        }
        let busy = self.streams_in_flight > 0;
        match self.last {
            Some((at, prev, was_busy)) => {
                let dt = now.saturating_duration_since(at);
                if dt >= MIN_RATE_INTERVAL {
                    if busy && was_busy {
                        let bits = sample.rx_bytes.saturating_sub(prev.rx_bytes) as f64 * 8.0;
                        self.rates.push_back(bits / dt.as_secs_f64());
                        while self.rates.len() > RATE_SAMPLES {
                            self.rates.pop_front();
                        }
                    }
                    self.last = Some((now, sample, busy));
                }
            }
            None => self.last = Some((now, sample, busy)),
        }
        self.latest = Some(sample);
    }

    /// A stream of `expected_bytes` was scheduled on the path.
    pub fn stream_started(&mut self, expected_bytes: u64) {
        self.streams_in_flight += 1;
        self.bytes_in_flight += expected_bytes;
    }

    /// A stream of `expected_bytes` scheduled on the path ended (done or failed).
    pub fn stream_ended(&mut self, expected_bytes: u64) {
        self.streams_in_flight = self.streams_in_flight.saturating_sub(1);
        self.bytes_in_flight = self.bytes_in_flight.saturating_sub(expected_bytes);
    }

    /// The path's state for the scheduler.
    pub fn state(&self) -> PathState {
        let latest = self.latest;
        let base = self.baseline;
        let since = |f: fn(&PathSample) -> u64| match (latest, base) {
            (Some(l), Some(b)) => f(&l).saturating_sub(f(&b)),
            _ => 0,
        };
        let lost = since(|s| s.lost_packets);
        PathState {
            index: self.index,
            local_addr: self.local_addr.clone(),
            delivery_rate_bps: self.rates.iter().copied().reduce(f64::max).map(|r| r as u64),
            srtt_ms: latest.map(|s| s.srtt_ms),
            srtt_history_ms: self.history.iter().copied().collect(),
            min_rtt_ms: latest.map(|s| s.min_rtt_ms),
            cwnd_bytes: latest.map(|s| s.cwnd_bytes),
            bytes_in_flight: self.bytes_in_flight,
            streams_in_flight: self.streams_in_flight,
            lost_packets: lost,
            retransmitted_packets: lost,
            sent_packets: since(|s| s.sent_packets),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(srtt_ms: f64, sent: u64, lost: u64, rx_bytes: u64) -> PathSample {
        PathSample {
            srtt_ms,
            min_rtt_ms: 5.0,
            cwnd_bytes: 12_000,
            sent_packets: sent,
            lost_packets: lost,
            rx_bytes,
        }
    }

    #[test]
    fn packet_counters_cover_the_epoch_only() {
        let mut m = PathMonitor::new(1, "10.0.1.1");
        let t = Instant::now();
        m.observe(t, sample(20.0, 100, 3, 0));
        m.observe(t + Duration::from_millis(50), sample(20.0, 160, 5, 0));
        let s = m.state();
        assert_eq!((s.sent_packets, s.lost_packets, s.retransmitted_packets), (60, 2, 2));
        assert_eq!(
            (s.index, s.local_addr.as_str(), s.cwnd_bytes),
            (1, "10.0.1.1", Some(12_000))
        );
    }

    #[test]
    fn delivery_rate_is_the_largest_busy_sample_and_idle_intervals_do_not_count() {
        let mut m = PathMonitor::new(0, "a");
        let t = Instant::now();
        m.observe(t, sample(20.0, 0, 0, 0));
        // Idle: 1 MB in 100 ms would be 80 Mbit/s, but nothing was in flight.
        m.observe(t + Duration::from_millis(100), sample(20.0, 0, 0, 1_000_000));
        assert_eq!(m.state().delivery_rate_bps, None);
        m.stream_started(500_000);
        m.observe(t + Duration::from_millis(110), sample(20.0, 0, 0, 1_000_000));
        // Busy at both ends: 125 000 bytes in 100 ms = 10 Mbit/s, then 5 Mbit/s.
        m.observe(t + Duration::from_millis(210), sample(20.0, 0, 0, 1_125_000));
        m.observe(t + Duration::from_millis(310), sample(20.0, 0, 0, 1_187_500));
        assert_eq!(m.state().delivery_rate_bps, Some(10_000_000));
        assert_eq!((m.state().streams_in_flight, m.state().bytes_in_flight), (1, 500_000));
        m.stream_ended(500_000);
        assert_eq!((m.state().streams_in_flight, m.state().bytes_in_flight), (0, 0));
    }

    #[test]
    fn readings_closer_than_the_minimum_interval_give_no_rate() {
        let mut m = PathMonitor::new(0, "a");
        m.stream_started(1);
        let t = Instant::now();
        m.observe(t, sample(20.0, 0, 0, 0));
        m.observe(t + Duration::from_millis(2), sample(20.0, 0, 0, 100_000));
        assert_eq!(m.state().delivery_rate_bps, None);
    }

    #[test]
    fn srtt_history_keeps_the_last_changes_oldest_first() {
        let mut m = PathMonitor::new(0, "a");
        let t = Instant::now();
        for (i, rtt) in [10.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0, 19.0]
            .into_iter()
            .enumerate()
        {
            m.observe(t + Duration::from_millis(i as u64), sample(rtt, 0, 0, 0));
        }
        let s = m.state();
        assert_eq!(s.srtt_history_ms, vec![12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0, 19.0]);
        assert_eq!(s.srtt_ms, Some(19.0));
    }
}
