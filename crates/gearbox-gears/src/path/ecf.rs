//! ECF, Earliest Completion First, on whole streams. Y. Lim, E. M. Nahum, D. Towsley,
//! R. J. Gibbens, "ECF: An MPTCP Path Scheduler to Manage Heterogeneous Paths",
//! CoNEXT 2017, §3 (Algorithm 1).
//!
//! ECF's rule, per packet in the paper: let `f` be the fastest subflow (lowest sRTT)
//! and `s` the fastest other one with room in its window; `k` the data waiting to be
//! sent; `n = 1 + k / cwnd_f` the rounds `f` needs for it; `δ = max(σ_f, σ_s)` the
//! larger RTT deviation; `β = 0.25` the hysteresis while waiting.
//!
//! 1. If `f` has room in its window, send on `f`.
//! 2. Else if `n·rtt_f < (1 + waiting·β)·(rtt_s + δ)` (waiting for `f` finishes before
//!    one round on `s` would):
//!    - if `(k / cwnd_s)·rtt_s ≥ 2·rtt_f + δ` (on `s` it would take longer than two
//!      rounds of `f`): wait for `f`, `waiting = 1`;
//!    - else send on `s`.
//! 3. Else send on `s`, `waiting = 0`.
//!
//! Adapted to whole streams: "wait for `f`" is "queue the stream on `f`" (a stream
//! scheduler cannot hold a stream back, and the stream then goes out as soon as `f`
//! has room); `k` is the response bytes already in flight on the path plus the new
//! stream's expected size (each path's own queue: `f`'s in `n`, `s`'s in the slow
//! estimate); windows are the paths' download windows in bytes
//! ([`PathState::window_bytes`]: on the client, the BDP of the measured delivery rate); `σ` is the spread
//! of the path's recent sRTT samples ([`PathState::rtt_spread_ms`]). "Room" is
//! [`super::has_room`]. With more than two paths, `s` is the lowest-sRTT path other
//! than `f` that has room; with none, the stream goes on `f`.

use std::time::Instant;

use gearbox_gear_api::{Decision, PathGear, PathRequest, PathState};

use super::{has_room, lowest_rtt};

/// ECF's hysteresis while waiting for the fast path (the paper's β).
pub const ECF_BETA: f64 = 0.25;

/// ECF on whole streams.
#[derive(Debug, Clone, Default)]
pub struct Ecf {
    /// The paper's `waiting` flag: the previous decision waited for the fast path.
    waiting: bool,
}

impl PathGear for Ecf {
    fn choose(&mut self, request: &PathRequest, paths: &[PathState], _now: Instant) -> Decision<usize> {
        let f = lowest_rtt(paths, |_| true).unwrap_or(0);
        let fast = &paths[f];
        if has_room(fast) {
            return Decision::new(f, format!("ecf:fast-has-room:{}", fast.index));
        }
        let Some(s) = lowest_rtt(paths, |p| p.index != fast.index && has_room(p)) else {
            return Decision::new(f, format!("ecf:no-other-room:{}", fast.index));
        };
        let slow = &paths[s];
        let (Some(rtt_f), Some(rtt_s), Some(cwnd_f), Some(cwnd_s)) =
            (fast.srtt_ms, slow.srtt_ms, fast.window_bytes(), slow.window_bytes())
        else {
            // Nothing measured on the other path: it has room and is what ECF falls
            // back to when waiting is not shown to pay.
            return Decision::new(s, format!("ecf:slow-unmeasured:{}", slow.index));
        };
        let size = request.expected_bytes.unwrap_or(0) as f64;
        let k_f = fast.bytes_in_flight as f64 + size;
        let k_s = slow.bytes_in_flight as f64 + size;
        let n = 1.0 + k_f / cwnd_f.max(1) as f64;
        let delta = fast.rtt_spread_ms().max(slow.rtt_spread_ms());
        let beta = if self.waiting { ECF_BETA } else { 0.0 };
        if n * rtt_f < (1.0 + beta) * (rtt_s + delta) {
            if (k_s / cwnd_s.max(1) as f64) * rtt_s >= 2.0 * rtt_f + delta {
                self.waiting = true;
                return Decision::new(f, format!("ecf:wait-for-fast:{}", fast.index));
            }
            return Decision::new(s, format!("ecf:slow-finishes-soon:{}", slow.index));
        }
        self.waiting = false;
        Decision::new(s, format!("ecf:slow-earlier:{}", slow.index))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{path, request};
    use super::*;

    fn busy(mut p: PathState, bytes: u64) -> PathState {
        p.bytes_in_flight = bytes;
        p
    }

    #[test]
    fn a_fast_path_with_room_takes_the_stream() {
        let paths = [path(0, 100.0, 50_000, 1.0), path(1, 10.0, 50_000, 1.0)];
        let d = Ecf::default().choose(&request(500_000), &paths, Instant::now());
        assert_eq!((d.choice, d.reason.as_str()), (1, "ecf:fast-has-room:1"));
    }

    #[test]
    fn waits_for_a_much_faster_path_rather_than_use_a_slow_one() {
        // f: 10 ms, 60 kB in flight of a 50 kB window; 10 kB more: n = 2.4 rounds =
        // 24 ms < one 100 ms round on s, and s needs (10 kB / 20 kB)·100 = 50 ms ≥
        // 2·10 ms: wait.
        let paths = [path(0, 100.0, 20_000, 1.0), busy(path(1, 10.0, 50_000, 1.0), 60_000)];
        let mut ecf = Ecf::default();
        let d = ecf.choose(&request(10_000), &paths, Instant::now());
        assert_eq!((d.choice, d.reason.as_str()), (1, "ecf:wait-for-fast:1"));
        assert!(ecf.waiting);
    }

    #[test]
    fn sends_on_the_slow_path_when_the_fast_queue_would_finish_later() {
        // f: 1 MB queued on a 50 kB window: n = 21 rounds of 10 ms = 210 ms, longer
        // than one 30 ms round on s: send on s, waiting cleared.
        let paths = [path(0, 30.0, 50_000, 1.0), busy(path(1, 10.0, 50_000, 1.0), 1_000_000)];
        let mut ecf = Ecf { waiting: true };
        let d = ecf.choose(&request(10_000), &paths, Instant::now());
        assert_eq!((d.choice, d.reason.as_str()), (0, "ecf:slow-earlier:0"));
        assert!(!ecf.waiting);
    }

    #[test]
    fn a_small_stream_goes_on_the_slow_path_when_it_finishes_there_within_two_fast_rounds() {
        // n·rtt_f = (1 + 55/50)·10 = 21 ms < 30 ms, but on s: (5/50)·30 = 3 ms < 20 ms.
        let paths = [path(0, 30.0, 50_000, 1.0), busy(path(1, 10.0, 50_000, 1.0), 50_000)];
        let d = Ecf::default().choose(&request(5_000), &paths, Instant::now());
        assert_eq!((d.choice, d.reason.as_str()), (0, "ecf:slow-finishes-soon:0"));
    }

    #[test]
    fn hysteresis_keeps_waiting_a_little_longer_once_waiting() {
        // n·rtt_f = (1 + 110/50)·10 = 32 ms: over rtt_s = 30 ms, under 1.25·30 = 37.5 ms.
        let paths = [path(0, 30.0, 10_000, 1.0), busy(path(1, 10.0, 50_000, 1.0), 100_000)];
        let fresh = Ecf::default().choose(&request(10_000), &paths, Instant::now());
        assert_eq!(fresh.choice, 0);
        let waiting = Ecf { waiting: true }.choose(&request(10_000), &paths, Instant::now());
        assert_eq!(waiting.choice, 1, "{}", waiting.reason);
    }
}
