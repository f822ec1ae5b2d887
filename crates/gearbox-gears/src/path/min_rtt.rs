//! Stream-based MinRTT: SAILfish's main baseline (SAILfish §5.2.3), the adaptation of
//! MPTCP's default scheduler to whole streams introduced by FStream.
//!
//! Rule (MPTCP's default, per stream instead of per packet): among the paths whose
//! congestion window is not full, send the stream on the one with the lowest smoothed
//! RTT; when every window is full, on the lowest sRTT path anyway (a stream must go
//! somewhere, and a stream scheduler cannot wait for a window the way a packet
//! scheduler does). "Window not full" for a stream is [`super::has_room`]: the response
//! bytes already in flight on the path fit in its window. Ties go to the lower path
//! index; a path with no RTT sample yet sorts last.

use std::time::Instant;

use gearbox_gear_api::{Decision, PathGear, PathRequest, PathState};

use super::{has_room, lowest_rtt};

/// Stream-based MinRTT (stateless).
#[derive(Debug, Clone, Copy, Default)]
pub struct MinRtt;

impl PathGear for MinRtt {
    fn choose(&mut self, _request: &PathRequest, paths: &[PathState], _now: Instant) -> Decision<usize> {
        if let Some(i) = lowest_rtt(paths, has_room) {
            return Decision::new(i, format!("minrtt:lowest-srtt-with-room:{}", paths[i].index));
        }
        let i = lowest_rtt(paths, |_| true).unwrap_or(0);
        Decision::new(i, format!("minrtt:all-full-lowest-srtt:{}", paths[i].index))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{path, request};
    use super::*;

    #[test]
    fn picks_the_lowest_rtt_path_while_its_window_has_room() {
        let paths = [path(0, 40.0, 50_000, 5.0), path(1, 10.0, 50_000, 5.0)];
        let d = MinRtt.choose(&request(10_000), &paths, Instant::now());
        assert_eq!(d.choice, 1);
        assert!(d.reason.contains("lowest-srtt-with-room"), "{}", d.reason);
    }

    #[test]
    fn skips_a_fast_path_whose_window_is_full() {
        let mut fast = path(1, 10.0, 50_000, 5.0);
        fast.bytes_in_flight = 60_000;
        let paths = [path(0, 40.0, 50_000, 5.0), fast];
        assert_eq!(MinRtt.choose(&request(10_000), &paths, Instant::now()).choice, 0);
    }

    #[test]
    fn with_every_window_full_it_still_takes_the_lowest_rtt() {
        let mut a = path(0, 40.0, 50_000, 5.0);
        let mut b = path(1, 10.0, 50_000, 5.0);
        a.bytes_in_flight = 60_000;
        b.bytes_in_flight = 60_000;
        let d = MinRtt.choose(&request(10_000), &[a, b], Instant::now());
        assert_eq!(d.choice, 1);
        assert!(d.reason.contains("all-full"), "{}", d.reason);
    }

    #[test]
    fn a_path_without_an_rtt_sample_comes_after_measured_ones() {
        let mut unknown = path(0, 1.0, 50_000, 5.0);
        unknown.srtt_ms = None;
        let paths = [unknown, path(1, 30.0, 50_000, 5.0)];
        assert_eq!(MinRtt.choose(&request(1), &paths, Instant::now()).choice, 1);
    }
}
