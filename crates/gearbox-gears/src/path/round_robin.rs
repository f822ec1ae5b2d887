//! Round-robin: each new stream on the next path in turn, whatever the paths' state.
//! The baseline that uses every path equally; it shows what scheduling on path state
//! buys over none at all.

use std::time::Instant;

use gearbox_gear_api::{Decision, PathGear, PathRequest, PathState};

/// Round-robin over the paths that are up, by path index.
#[derive(Debug, Clone, Default)]
pub struct RoundRobin {
    /// Path index of the previous stream (`None`: no stream yet).
    last: Option<usize>,
}

impl PathGear for RoundRobin {
    fn choose(&mut self, _request: &PathRequest, paths: &[PathState], _now: Instant) -> Decision<usize> {
        // The next path index after the previous one among those up, wrapping round:
        // a path that went down is skipped without upsetting the order of the others.
        let next = match self.last {
            None => None,
            Some(last) => paths
                .iter()
                .enumerate()
                .filter(|(_, p)| p.index > last)
                .min_by_key(|(_, p)| p.index)
                .map(|(i, _)| i),
        };
        let i = next.unwrap_or_else(|| {
            paths
                .iter()
                .enumerate()
                .min_by_key(|(_, p)| p.index)
                .map_or(0, |(i, _)| i)
        });
        self.last = Some(paths[i].index);
        Decision::new(i, format!("round-robin:turn:{}", paths[i].index))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{path, request};
    use super::*;

    #[test]
    fn takes_the_paths_in_turn_whatever_their_state() {
        let paths = [path(0, 5.0, 1, 1.0), path(1, 500.0, 1, 1.0), path(2, 50.0, 1, 1.0)];
        let mut rr = RoundRobin::default();
        let picks: Vec<usize> = (0..7)
            .map(|_| rr.choose(&request(1), &paths, Instant::now()).choice)
            .collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn a_path_that_went_down_is_skipped_and_the_turn_goes_on() {
        let mut rr = RoundRobin::default();
        let all = [path(0, 5.0, 1, 1.0), path(1, 5.0, 1, 1.0), path(2, 5.0, 1, 1.0)];
        assert_eq!(rr.choose(&request(1), &all, Instant::now()).choice, 0);
        let without_1 = [path(0, 5.0, 1, 1.0), path(2, 5.0, 1, 1.0)];
        let d = rr.choose(&request(1), &without_1, Instant::now());
        assert_eq!(without_1[d.choice].index, 2);
        let d = rr.choose(&request(1), &without_1, Instant::now());
        assert_eq!(without_1[d.choice].index, 0);
    }
}
