//! The path of each stream on a multipath client (SAILfish §4.2.1): the classical
//! stream schedulers SAILfish is judged against, one file each, behind the
//! [`PathGear`] shape.
//!
//! Every scheduler here is *stream-based*: the whole response of a request goes on
//! the one path chosen for it (SAILfish §5.2.3; per-packet schedulers split a stream
//! across paths, which gearbox's multipath, one QUIC connection per local path, does
//! not do). Each reads only the [`PathState`] the client hands it, the one place for
//! per-path state, plus the request's size and urgency ([`PathRequest`]); none reads
//! a clock or a socket.
//!
//! | name | rule | paper |
//! |---|---|---|
//! | `minrtt` | lowest sRTT among paths with room, else lowest sRTT | SAILfish §5.2.3, FStream's stream adaptation of MPTCP's default |
//! | `round-robin` | paths in turn | the simplest baseline |
//! | `single-best` | the path with the highest throughput estimate, kept for the whole load | the single-path baseline |
//! | `ecf` | Earliest Completion First on whole streams | Lim et al., CoNEXT 2017 |
//! | `blest` | BLocking ESTimation on whole streams | Ferlin et al., IFIP Networking 2016 |
//!
//! The learned scheduler, [`SailfishGear`] (SAILfish §4.2), needs a model directory, so
//! it is made by [`SailfishGear::load`] rather than by name.

mod blest;
mod ecf;
mod min_rtt;
mod round_robin;
pub mod sailfish;
mod single_best;

pub use blest::Blest;
pub use ecf::Ecf;
pub use gearbox_gear_api::{PathGear, PathRequest, PathState, SRTT_HISTORY};
pub use min_rtt::MinRtt;
pub use round_robin::RoundRobin;
pub use sailfish::SailfishGear;
pub use single_best::SingleBest;

/// Names of the schedulers [`scheduler`] makes, as `--scheduler` takes them.
pub const SCHEDULERS: [&str; 5] = ["minrtt", "round-robin", "single-best", "ecf", "blest"];

/// A scheduler name that is not one of [`SCHEDULERS`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown path scheduler {name:?}; the schedulers are: {}", SCHEDULERS.join(", "))]
pub struct UnknownScheduler {
    /// The name asked for.
    pub name: String,
}

/// The scheduler called `name` (one of [`SCHEDULERS`]), in its default configuration.
pub fn scheduler(name: &str) -> Result<Box<dyn PathGear>, UnknownScheduler> {
    Ok(match name {
        "minrtt" => Box::new(MinRtt),
        "round-robin" => Box::new(RoundRobin::default()),
        "single-best" => Box::new(SingleBest::default()),
        "ecf" => Box::new(Ecf::default()),
        "blest" => Box::new(Blest::default()),
        _ => {
            return Err(UnknownScheduler { name: name.to_string() });
        }
    })
}

/// Whether a path can take one more stream at once: the response bytes already in
/// flight on it fit in one window of the download ([`PathState::window_bytes`]; the
/// stream analogue of MPTCP's "the subflow's window is not full"). A path with no
/// window known yet has room.
pub(crate) fn has_room(path: &PathState) -> bool {
    path.window_bytes().is_none_or(|window| path.bytes_in_flight < window)
}

/// sRTT for ordering, milliseconds: unknown sorts last.
pub(crate) fn srtt_or_max(path: &PathState) -> f64 {
    path.srtt_ms.unwrap_or(f64::INFINITY)
}

/// Position in `paths` of the lowest sRTT among those `keep` accepts (ties: the
/// lower position); `None` when it accepts none.
pub(crate) fn lowest_rtt(paths: &[PathState], keep: impl Fn(&PathState) -> bool) -> Option<usize> {
    paths
        .iter()
        .enumerate()
        .filter(|(_, p)| keep(p))
        .min_by(|(_, a), (_, b)| srtt_or_max(a).total_cmp(&srtt_or_max(b)))
        .map(|(i, _)| i)
}

#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// A path with a measured sRTT, window and rate, nothing in flight.
    pub fn path(index: usize, srtt_ms: f64, cwnd_bytes: u64, rate_mbps: f64) -> PathState {
        PathState {
            index,
            local_addr: format!("10.0.{index}.1"),
            delivery_rate_bps: Some((rate_mbps * 1e6) as u64),
            srtt_ms: Some(srtt_ms),
            srtt_history_ms: vec![srtt_ms],
            min_rtt_ms: Some(srtt_ms),
            cwnd_bytes: Some(cwnd_bytes),
            ..PathState::default()
        }
    }

    /// A request for `bytes` at urgency 3.
    pub fn request(bytes: u64) -> PathRequest {
        PathRequest {
            url: "https://edge/x".into(),
            urgency: 3,
            expected_bytes: Some(bytes),
            workload_client: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_name_makes_a_scheduler_and_others_get_the_list() {
        for name in SCHEDULERS {
            assert!(scheduler(name).is_ok(), "{name}");
        }
        let err = scheduler("fastest").err().expect("unknown");
        let text = err.to_string();
        assert!(text.contains("\"fastest\""), "{text}");
        for name in SCHEDULERS {
            assert!(text.contains(name), "{text} lists {name}");
        }
    }

    #[test]
    fn a_path_with_its_window_full_of_response_bytes_has_no_room() {
        let mut p = testing::path(0, 10.0, 100_000, 10.0);
        assert!(has_room(&p));
        p.bytes_in_flight = 100_000;
        assert!(!has_room(&p));
    }
}
