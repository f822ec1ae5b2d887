//! The cost-jump rule (gearbox's addition to §III-C and §III-E, issue 19): leave the
//! current protocol when its recent requests suddenly cost many more round trips than
//! its own recent history and than the other protocol's last known requests.
//!
//! §III-E says why the paper has a Rollback Checker at all: "it is challenging for
//! Network Monitor and Probe Agent to capture the possible UDP/QUIC block and rate
//! limit and react to the instant changes". But the checker only watches the 10 s
//! after a switch; a UDP rate limit that starts while the gear sits on QUIC is seen by
//! no part of the paper's design except the model, and the model did not see it in the
//! lab (a QUIC path throttled to 1 Mbit/s answers slowly rather than failing, so the
//! failover does not act either: docs/wisetrans.md, `block` class). This rule is the
//! checker's before/after comparison applied at any moment, with the switch's "before"
//! replaced by the two things the gear knows without an experiment:
//!
//! - **own history**: the current protocol's requests in the `window` before its latest
//!   [`RECENT`] (when it has fewer than [`MIN_HISTORY`] there, the gear has just moved to
//!   it and the move itself is the change: only the other protocol's costs count, the
//!   Rollback Checker's comparison without its 10 s wait);
//! - **the other protocol's last known costs**: its last click, the requests (probe,
//!   verification or exploitation) that finished within [`CLICK`] of its latest one, at
//!   most [`MEMORY`] old. A whole click, not its latest three: a click's requests finish in
//!   queue order, so the latest ones are its tail and cost several round trips more than
//!   its front on any protocol (in the lab a QUIC jump to 8.6-10.8 round trips went unseen
//!   against TCP's last three at 3.6-7.3, median 6.9); and one click, not a whole 10 s
//!   window, which mixed QUIC's probes from before a rate limit into its "last known" costs
//!   and sent the gear back to a blocked QUIC.
//!
//! It fires when the median of the latest [`RECENT`] exceeds `factor` times both
//! medians (medians: one slow request is not a jump; two of three are). Costs are
//! counted in **round trips** (size-normalised cost, [`super::request_cost`], over the
//! smoothed RTT at the request's end): a path whose RTT doubles for both protocols (a
//! mobile handover) doubles every cost in milliseconds but not in round trips, while a
//! policer that drops one protocol's packets makes its requests take many round trips
//! of an RTT that does not grow (the `cost_rtt_ratio` feature's reasoning). A failed
//! request counts as infinitely many.
//!
//! The gear then switches at once (as the failover does) and the switch goes on
//! probation with the Rollback Checker, the jumped requests on the left protocol's side:
//! if the other protocol is no better now (the whole path got worse), the checker and its
//! verification bring the gear back. Why switch rather than explore: an exploration on a
//! throttled protocol sends half a click burst through the throttle (in the lab each such
//! request took over a second), and the other protocol's last known costs already say
//! what an exploration would measure of it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::Transport;

/// Requests that make a jump: the latest this many of the current protocol (three, as the
/// Probe Agent's and the verification's samples, §III-D).
pub const RECENT: usize = 3;

/// Requests of the current protocol's own history needed for the history to count (with
/// fewer, only the other protocol's costs are compared).
pub const MIN_HISTORY: usize = 3;

/// How old the other protocol's last known costs may be (the Rollback Checker's
/// `rollback_hold_ms` default: six of its intervals).
pub const MEMORY: Duration = Duration::from_secs(60);

/// The span of one click's answers (§III-D: a click's ~13.5 requests complete in about
/// 1.5 s).
pub const CLICK: Duration = Duration::from_secs(2);

/// Most requests kept per protocol.
const MAX_KEPT: usize = 64;

/// A request measured on one protocol.
#[derive(Debug, Clone, Copy)]
struct Entry {
    at: Instant,
    /// Round trips: size-normalised cost / SRTT (infinite for a failure).
    rounds: f64,
    /// The size-normalised cost, ms (what the Rollback Checker compares).
    cost: f64,
}

/// What the rule found.
#[derive(Debug, Clone, PartialEq)]
pub struct Jump {
    /// Median round trips of the current protocol's latest [`RECENT`].
    pub recent: f64,
    /// Median round trips of its own history before them (None: too few, the gear has
    /// just moved to this protocol).
    pub history: Option<f64>,
    /// Median round trips of the other protocol's last known requests.
    pub other: f64,
    /// The latest [`RECENT`] requests' costs, ms (for the Rollback Checker's before side).
    pub costs: Vec<f64>,
}

/// Each protocol's recent requests, in round trips.
#[derive(Debug, Clone, Default)]
pub struct CostLog {
    entries: [VecDeque<Entry>; 2],
    /// The last SRTT seen per protocol, for a record without one.
    last_rtt: [Option<f64>; 2],
}

fn side(t: Transport) -> usize {
    usize::from(t == Transport::Quic)
}

impl CostLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// A request on `t` finished at `now` with size-normalised `cost` (ms), the
    /// connection's smoothed RTT at its end `rtt_ms` (None: the protocol's last one),
    /// `failed` when it failed or stalled. Without any RTT known it is not kept.
    pub fn record(&mut self, t: Transport, cost: f64, rtt_ms: Option<f64>, failed: bool, now: Instant) {
        let s = side(t);
        if let Some(r) = rtt_ms.filter(|r| r.is_finite() && *r > 0.0) {
            self.last_rtt[s] = Some(r);
        }
        let rounds = if failed || cost.is_nan() {
            f64::INFINITY
        } else {
            match self.last_rtt[s] {
                Some(r) => cost / r,
                None => return,
            }
        };
        let q = &mut self.entries[s];
        q.push_back(Entry { at: now, rounds, cost });
        while q.len() > MAX_KEPT || q.front().is_some_and(|e| now.saturating_duration_since(e.at) > MEMORY) {
            q.pop_front();
        }
    }

    /// The jump of `current` at `now`, if its latest [`RECENT`] requests (all within
    /// `window`) cost over `factor` times both its own history (its requests in the
    /// `window` before them, when there are at least [`MIN_HISTORY`]) and the other
    /// protocol's last known requests (its last click: those within [`CLICK`] of its
    /// latest, at most [`MEMORY`] old), in median round trips.
    pub fn check(&self, current: Transport, now: Instant, window: Duration, factor: f64) -> Option<Jump> {
        let mine = &self.entries[side(current)];
        if mine.len() < RECENT {
            return None;
        }
        let split = mine.len() - RECENT;
        let recent: Vec<Entry> = mine.iter().skip(split).copied().collect();
        let first = recent[0].at;
        if now.saturating_duration_since(first) > window {
            return None;
        }
        let history: Vec<f64> = mine
            .iter()
            .take(split)
            .filter(|e| first.saturating_duration_since(e.at) <= window)
            .map(|e| e.rounds)
            .collect();
        let history = (history.len() >= MIN_HISTORY).then(|| crate::median(&history));
        let theirs = &self.entries[side(current.other())];
        let last = theirs.back()?.at;
        let other: Vec<f64> = theirs
            .iter()
            .filter(|e| last.saturating_duration_since(e.at) <= CLICK)
            .filter(|e| now.saturating_duration_since(e.at) <= MEMORY)
            .map(|e| e.rounds)
            .collect();
        if other.is_empty() {
            return None;
        }
        let jump = Jump {
            recent: crate::median(&recent.iter().map(|e| e.rounds).collect::<Vec<_>>()),
            history,
            other: crate::median(&other),
            costs: recent.iter().map(|e| e.cost).collect(),
        };
        let above_history = jump.history.is_none_or(|h| jump.recent > factor * h);
        (above_history && jump.recent > factor * jump.other).then_some(jump)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    const W: Duration = Duration::from_secs(10);

    /// A log with TCP at 2 round trips (40 ms at 20 ms) and QUIC's history at 2, then
    /// QUIC's latest three at `quic_recent` ms cost over `quic_rtt` ms.
    fn log(t0: Instant, quic_recent: [f64; 3], quic_rtt: f64) -> CostLog {
        let mut l = CostLog::new();
        for k in 0..3 {
            l.record(Transport::Tcp, 40.0, Some(20.0), false, t0 + ms(k));
        }
        for k in 0..6 {
            l.record(Transport::Quic, 40.0, Some(20.0), false, t0 + ms(100 + 300 * k));
        }
        for (k, c) in quic_recent.iter().enumerate() {
            l.record(Transport::Quic, *c, Some(quic_rtt), false, t0 + ms(5000 + k as u64));
        }
        l
    }

    #[test]
    fn a_protocol_whose_requests_suddenly_take_many_round_trips_jumps() {
        let t0 = Instant::now();
        // A 1 Mbit/s UDP limit: the RTT barely moves (25 ms), requests take 20+ round trips.
        let l = log(t0, [600.0, 900.0, 40.0], 25.0);
        let j = l.check(Transport::Quic, t0 + ms(5010), W, 2.0).expect("a jump");
        assert_eq!(j.recent, 24.0, "median of 24, 36, 1.6 round trips");
        assert_eq!(j.history, Some(2.0));
        assert_eq!(j.other, 2.0);
        assert_eq!(j.costs, vec![600.0, 900.0, 40.0]);
        assert_eq!(l.check(Transport::Tcp, t0 + ms(5010), W, 2.0), None, "TCP did not jump");
    }

    #[test]
    fn a_path_whose_rtt_grows_for_both_protocols_is_no_jump() {
        let t0 = Instant::now();
        // A handover: the RTT goes from 20 to 110 ms, costs in ms x5.5, in round trips x1.
        let l = log(t0, [220.0, 230.0, 225.0], 110.0);
        assert_eq!(l.check(Transport::Quic, t0 + ms(5010), W, 2.0), None);
    }

    #[test]
    fn one_slow_request_is_no_jump_and_a_jump_needs_history_and_the_other_side() {
        let t0 = Instant::now();
        let l = log(t0, [40.0, 900.0, 40.0], 20.0);
        assert_eq!(l.check(Transport::Quic, t0 + ms(5010), W, 2.0), None, "one of three");

        // No history of QUIC's own (the gear just moved to it): the three slow ones
        // against TCP's last known.
        let mut l = CostLog::new();
        l.record(Transport::Tcp, 40.0, Some(20.0), false, t0);
        for k in 0..2 {
            l.record(Transport::Quic, 900.0, Some(20.0), false, t0 + ms(10 + k));
        }
        assert_eq!(l.check(Transport::Quic, t0 + ms(20), W, 2.0), None, "two requests");
        l.record(Transport::Quic, 900.0, Some(20.0), false, t0 + ms(12));
        let j = l
            .check(Transport::Quic, t0 + ms(20), W, 2.0)
            .expect("a jump from TCP's 2");
        assert_eq!((j.recent, j.history, j.other), (45.0, None, 2.0));

        // History but no TCP known: nothing to compare with.
        let mut l = CostLog::new();
        for k in 0..6 {
            let c = if k < 3 { 40.0 } else { 900.0 };
            l.record(Transport::Quic, c, Some(20.0), false, t0 + ms(10 * k));
        }
        assert_eq!(l.check(Transport::Quic, t0 + ms(100), W, 2.0), None);
        // ... and TCP as slow as QUIC now: no reason to leave.
        for k in 0..3 {
            l.record(Transport::Tcp, 800.0, Some(20.0), false, t0 + ms(200 + k));
        }
        assert_eq!(l.check(Transport::Quic, t0 + ms(300), W, 2.0), None);
    }

    #[test]
    fn failures_are_infinitely_many_round_trips_and_old_knowledge_expires() {
        let t0 = Instant::now();
        let mut l = log(t0, [40.0, 40.0, 40.0], 20.0);
        for k in 0..2 {
            l.record(Transport::Quic, 10_000.0, None, true, t0 + ms(6000 + k));
        }
        let j = l
            .check(Transport::Quic, t0 + ms(6010), W, 2.0)
            .expect("two failures of three");
        assert!(j.recent.is_infinite());
        // The same a minute later, with TCP's costs (at t0) more than a minute old: forgotten.
        for k in 0..4 {
            l.record(Transport::Quic, 40.0, Some(20.0), false, t0 + ms(70_000 + k));
        }
        for k in 0..2 {
            l.record(Transport::Quic, 10_000.0, None, true, t0 + ms(71_000 + k));
        }
        assert_eq!(l.check(Transport::Quic, t0 + ms(71_010), W, 2.0), None);
        l.record(Transport::Tcp, 40.0, Some(20.0), false, t0 + ms(71_005));
        assert!(
            l.check(Transport::Quic, t0 + ms(71_010), W, 2.0).is_some(),
            "known again"
        );
    }

    #[test]
    fn the_other_protocols_last_click_counts_not_its_tail_nor_older_clicks() {
        let t0 = Instant::now();
        let mut l = CostLog::new();
        // TCP's last click: nine requests finishing in queue order, 1 to 7 round trips.
        for k in 0..9u64 {
            l.record(
                Transport::Tcp,
                20.0 + 15.0 * k as f64,
                Some(20.0),
                false,
                t0 + ms(100 + 30 * k),
            );
        }
        for k in 0..6 {
            l.record(Transport::Quic, 40.0, Some(20.0), false, t0 + ms(500 + k));
        }
        // QUIC at 9 round trips: over twice TCP's click median (4), not over twice the
        // median of its last three (6.25).
        for k in 0..3 {
            l.record(Transport::Quic, 180.0, Some(20.0), false, t0 + ms(8000 + k));
        }
        let j = l.check(Transport::Quic, t0 + ms(8010), W, 2.0).expect("a jump");
        assert_eq!((j.recent, j.other), (9.0, 4.0));

        // Later TCP's own click tail jumps (12 round trips against its history of 2); QUIC's
        // last click is the slow one at 9, not its older probes at 2: no jump back.
        let mut l = CostLog::new();
        for k in 0..6 {
            l.record(Transport::Quic, 40.0, Some(20.0), false, t0 + ms(k));
        }
        for k in 0..3 {
            l.record(Transport::Quic, 180.0, Some(20.0), false, t0 + ms(3000 + k));
        }
        for k in 0..4 {
            l.record(Transport::Tcp, 40.0, Some(20.0), false, t0 + ms(5000 + k));
        }
        for k in 0..3 {
            l.record(Transport::Tcp, 240.0, Some(20.0), false, t0 + ms(9000 + k));
        }
        assert_eq!(l.check(Transport::Tcp, t0 + ms(9010), W, 2.0), None);
    }
}
