//! BLEST, BLocking ESTimation, on whole streams. S. Ferlin, Ö. Alay, O. Mehani,
//! R. Boreli, "BLEST: Blocking Estimation-based MPTCP Scheduler for Heterogeneous
//! Networks", IFIP Networking 2016, §III.
//!
//! BLEST's rule, per packet in the paper: when the fastest subflow `f` (lowest sRTT)
//! has room, send on it. Otherwise, before sending on the slower subflow `s`, estimate
//! how much `f` could send while one packet crosses `s`: with `rtts = rtt_s / rtt_f`
//! rounds of `f` and its window growing by one MSS per round,
//!
//! `X = MSS_f · (cwnd_f + (rtts − 1) / 2) · rtts`   (cwnd_f in packets),
//!
//! and if `X · λ > |send window| − MSS_s · (inflight_s + 1)`, sending on `s` would
//! block the connection's window (head-of-line blocking at the receiver): skip `s` and
//! wait for `f`. Otherwise send on `s`. `λ` scales the estimate (the paper adapts it
//! by observed blocking, starting at 1).
//!
//! Adapted to whole streams: what could block is not a shared send window but the
//! stream itself, so the window the stream must fit is "what `f` delivers within one
//! round of `s`": if `X · λ ≥` the response bytes already in flight on `f` plus the
//! stream's expected size, the stream would arrive no later by waiting behind `f`, so
//! it is queued on `f`; otherwise it goes on `s`. Windows are in bytes (`cwnd_f` is
//! [`PathState::window_bytes`], on the client the BDP of `f`'s measured delivery rate), so
//! `X = (cwnd_f + MSS · (rtts − 1) / 2) · rtts` with MSS 1200 bytes (QUIC's minimum
//! datagram, quinn's initial MTU). `λ` stays at 1: the client sees no receive-window
//! blocking to adapt it by. "Room" is [`super::has_room`]; with more than two paths,
//! `s` is the lowest-sRTT path other than `f` with room; with none, the stream goes on
//! `f`.

use std::time::Instant;

use gearbox_gear_api::{Decision, PathGear, PathRequest, PathState};

use super::{has_room, lowest_rtt};

/// Segment size in BLEST's estimate, bytes.
pub const BLEST_MSS_BYTES: f64 = 1200.0;

/// BLEST on whole streams.
#[derive(Debug, Clone)]
pub struct Blest {
    /// Scale of the estimate of what the fast path sends in one slow round (the
    /// paper's λ).
    pub lambda: f64,
}

impl Default for Blest {
    fn default() -> Self {
        Blest { lambda: 1.0 }
    }
}

impl Blest {
    /// Bytes the fast path delivers during one RTT of the slow path (the paper's X).
    pub fn fast_bytes_in_slow_round(cwnd_f_bytes: f64, rtt_f_ms: f64, rtt_s_ms: f64) -> f64 {
        let rounds = rtt_s_ms / rtt_f_ms.max(1e-3);
        (cwnd_f_bytes + BLEST_MSS_BYTES * (rounds - 1.0) / 2.0) * rounds
    }
}

impl PathGear for Blest {
    fn choose(&mut self, request: &PathRequest, paths: &[PathState], _now: Instant) -> Decision<usize> {
        let f = lowest_rtt(paths, |_| true).unwrap_or(0);
        let fast = &paths[f];
        if has_room(fast) {
            return Decision::new(f, format!("blest:fast-has-room:{}", fast.index));
        }
        let Some(s) = lowest_rtt(paths, |p| p.index != fast.index && has_room(p)) else {
            return Decision::new(f, format!("blest:no-other-room:{}", fast.index));
        };
        let slow = &paths[s];
        let (Some(rtt_f), Some(rtt_s), Some(cwnd_f)) = (fast.srtt_ms, slow.srtt_ms, fast.window_bytes()) else {
            return Decision::new(s, format!("blest:slow-unmeasured:{}", slow.index));
        };
        let x = Blest::fast_bytes_in_slow_round(cwnd_f as f64, rtt_f, rtt_s);
        let queued = fast.bytes_in_flight as f64 + request.expected_bytes.unwrap_or(0) as f64;
        if x * self.lambda >= queued {
            return Decision::new(f, format!("blest:slow-would-block:{}", fast.index));
        }
        Decision::new(s, format!("blest:slow:{}", slow.index))
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
    fn the_estimate_is_the_papers_x() {
        // rtts = 4: (10 000 + 1200·1.5)·4 = 47 200 bytes.
        assert_eq!(Blest::fast_bytes_in_slow_round(10_000.0, 10.0, 40.0), 47_200.0);
        // Equal RTTs: one window.
        assert_eq!(Blest::fast_bytes_in_slow_round(10_000.0, 10.0, 10.0), 10_000.0);
    }

    #[test]
    fn a_fast_path_with_room_takes_the_stream() {
        let paths = [path(0, 50.0, 20_000, 1.0), path(1, 10.0, 20_000, 1.0)];
        assert_eq!(Blest::default().choose(&request(1), &paths, Instant::now()).choice, 1);
    }

    #[test]
    fn waits_for_the_fast_path_when_it_delivers_the_stream_within_one_slow_round() {
        // X = 47 200 bytes ≥ 20 000 in flight + 20 000: queue on f.
        let paths = [path(0, 40.0, 20_000, 1.0), busy(path(1, 10.0, 10_000, 1.0), 20_000)];
        let d = Blest::default().choose(&request(20_000), &paths, Instant::now());
        assert_eq!((d.choice, d.reason.as_str()), (1, "blest:slow-would-block:1"));
    }

    #[test]
    fn uses_the_slow_path_when_the_fast_one_cannot_deliver_it_in_one_slow_round() {
        let paths = [path(0, 40.0, 20_000, 1.0), busy(path(1, 10.0, 10_000, 1.0), 40_000)];
        let d = Blest::default().choose(&request(20_000), &paths, Instant::now());
        assert_eq!((d.choice, d.reason.as_str()), (0, "blest:slow:0"));
    }

    #[test]
    fn a_larger_lambda_waits_more() {
        let paths = [path(0, 40.0, 20_000, 1.0), busy(path(1, 10.0, 10_000, 1.0), 40_000)];
        let mut cautious = Blest { lambda: 2.0 };
        assert_eq!(cautious.choose(&request(20_000), &paths, Instant::now()).choice, 1);
    }
}
