//! Single best path: every stream on one path, the one with the highest throughput
//! estimate when the first stream is scheduled; what a single-path client on the
//! better of the two interfaces would get, and the baseline that shows whether using
//! a second path helps at all.
//!
//! Rule: at the first stream, take the path with the highest
//! [`PathState::rate_bps`] (measured delivery rate, else cwnd / sRTT; ties and paths
//! with no estimate: lowest sRTT, then lowest index) and keep it for every later
//! stream while it is up; if it goes down, choose again the same way.

use std::time::Instant;

use gearbox_gear_api::{Decision, PathGear, PathRequest, PathState};

use super::srtt_or_max;

/// The single best path, chosen once and kept while it is up.
#[derive(Debug, Clone, Default)]
pub struct SingleBest {
    /// Path index of the chosen path.
    chosen: Option<usize>,
}

impl PathGear for SingleBest {
    fn choose(&mut self, _request: &PathRequest, paths: &[PathState], _now: Instant) -> Decision<usize> {
        if let Some(i) = self.chosen.and_then(|c| paths.iter().position(|p| p.index == c)) {
            return Decision::new(i, format!("single-best:kept:{}", paths[i].index));
        }
        let i = (0..paths.len())
            .max_by(|&a, &b| {
                let (pa, pb) = (&paths[a], &paths[b]);
                let rate = |p: &PathState| p.rate_bps().unwrap_or(-1.0);
                rate(pa)
                    .total_cmp(&rate(pb))
                    // Higher is better for rate; for sRTT and index lower is better.
                    .then(srtt_or_max(pb).total_cmp(&srtt_or_max(pa)))
                    .then(b.cmp(&a))
            })
            .unwrap_or(0);
        self.chosen = Some(paths[i].index);
        Decision::new(i, format!("single-best:chosen:{}", paths[i].index))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{path, request};
    use super::*;

    #[test]
    fn chooses_the_fastest_path_and_keeps_it_when_another_looks_better_later() {
        let mut best = SingleBest::default();
        let paths = [path(0, 10.0, 50_000, 5.0), path(1, 30.0, 50_000, 40.0)];
        assert_eq!(best.choose(&request(1), &paths, Instant::now()).choice, 1);
        let later = [path(0, 10.0, 50_000, 90.0), path(1, 30.0, 50_000, 40.0)];
        let d = best.choose(&request(1), &later, Instant::now());
        assert_eq!(d.choice, 1);
        assert!(d.reason.contains("kept"), "{}", d.reason);
    }

    #[test]
    fn chooses_again_when_its_path_goes_down() {
        let mut best = SingleBest::default();
        let paths = [path(0, 10.0, 50_000, 5.0), path(1, 30.0, 50_000, 40.0)];
        best.choose(&request(1), &paths, Instant::now());
        let only_0 = [path(0, 10.0, 50_000, 5.0)];
        let d = best.choose(&request(1), &only_0, Instant::now());
        assert_eq!((d.choice, d.reason.contains("chosen")), (0, true));
    }

    #[test]
    fn without_rate_estimates_the_lower_rtt_wins() {
        let mut a = path(0, 30.0, 50_000, 1.0);
        let mut b = path(1, 10.0, 50_000, 1.0);
        for p in [&mut a, &mut b] {
            p.delivery_rate_bps = None;
            p.cwnd_bytes = None;
        }
        assert_eq!(
            SingleBest::default()
                .choose(&request(1), &[a, b], Instant::now())
                .choice,
            1
        );
    }
}
