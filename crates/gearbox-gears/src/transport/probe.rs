//! The Probe Agent (seed 000, §III-D): live experiments with the application's own
//! requests.
//!
//! An exploration hands out six probe slots, alternately TCP and QUIC starting with TCP
//! (Fig. 6: TCP, QUIC, TCP, QUIC, TCP, QUIC), one per request the application issues;
//! requests issued after the sixth slot and before the sixth result use the last
//! selected protocol. When all six have finished, each protocol's three costs (RCT
//! normalised for response size, see [`super::request_cost`]) are reduced to the mean
//! of the two most similar ([`two_most_similar_mean`]: three each rather than two or
//! four, §III-D, because one in twenty two-sample experiments was abnormal), and the
//! protocol with the lower value is selected (a tie keeps the last selected protocol).
//! No synthetic probes and no throwaway data: only the application's real requests.
//!
//! A slot is linked to its result through the decision string the client copies into
//! the record (`why=probe-<k>of6;ex=<id>`), so records of other requests, or of an
//! older exploration, never count; the first record of a slot counts (a page load
//! decides once for all its objects). When to explore is the gear's business
//! ([`super::wisetrans`]); this object only runs one exploration at a time.

use std::time::{Duration, Instant};

use super::Transport;

/// Probe requests per protocol (§III-D: three).
pub const PROBES_PER_PROTOCOL: usize = 3;
/// Probe slots in an exploration.
pub const PROBE_SLOTS: usize = 2 * PROBES_PER_PROTOCOL;

/// Why an exploration started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// The first request to an origin (a new path, §III-D "establish new connections").
    NewOrigin,
    /// The local address of the origin's connections changed (a new path).
    PathChange,
    /// The Network Monitor's score moved past the threshold since the last exploration.
    ScoreJump,
}

impl Trigger {
    /// Name in decision strings.
    pub fn name(self) -> &'static str {
        match self {
            Trigger::NewOrigin => "new-origin",
            Trigger::PathChange => "path-change",
            Trigger::ScoreJump => "score-jump",
        }
    }
}

/// What the agent says for a request during an exploration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeChoice {
    /// Probe slot `slot` (1..=6) of exploration `id`, on `transport`.
    Slot {
        /// The exploration.
        id: u64,
        /// 1-based slot.
        slot: usize,
        /// Its protocol.
        transport: Transport,
    },
    /// All six slots are out; waiting for their results: use the last selected protocol.
    Wait,
}

/// The result of an exploration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    /// The exploration.
    pub id: u64,
    /// The better protocol.
    pub selected: Transport,
    /// TCP's value (mean of the two most similar costs).
    pub tcp_cost: f64,
    /// QUIC's value.
    pub quic_cost: f64,
    /// The three raw costs of each protocol, slot order.
    pub tcp_costs: [f64; PROBES_PER_PROTOCOL],
    /// QUIC's three.
    pub quic_costs: [f64; PROBES_PER_PROTOCOL],
}

#[derive(Debug, Clone)]
struct Exploration {
    id: u64,
    trigger: Trigger,
    started: Instant,
    /// Slots handed out so far.
    issued: usize,
    /// Cost per slot once its record arrived.
    results: [Option<f64>; PROBE_SLOTS],
    /// Selected before the exploration (kept on a tie).
    last: Transport,
}

/// Runs live experiments, one at a time.
#[derive(Debug, Clone)]
pub struct ProbeAgent {
    current: Option<Exploration>,
    next_id: u64,
    timeout: Duration,
}

/// The protocol of 1-based slot `k`: odd slots TCP, even slots QUIC.
pub fn slot_transport(slot: usize) -> Transport {
    if slot % 2 == 1 {
        Transport::Tcp
    } else {
        Transport::Quic
    }
}

impl ProbeAgent {
    /// An idle agent; an exploration not finished after `timeout` is abandoned.
    pub fn new(timeout: Duration) -> Self {
        ProbeAgent {
            current: None,
            next_id: 1,
            timeout,
        }
    }

    /// Whether an exploration is running.
    pub fn exploring(&self) -> bool {
        self.current.is_some()
    }

    /// The running exploration's id and trigger.
    pub fn running(&self) -> Option<(u64, Trigger)> {
        self.current.as_ref().map(|e| (e.id, e.trigger))
    }

    /// Starts an exploration (replacing any running one); `last` is the protocol in use.
    /// Returns its id.
    pub fn start(&mut self, now: Instant, trigger: Trigger, last: Transport) -> u64 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.current = Some(Exploration {
            id,
            trigger,
            started: now,
            issued: 0,
            results: [None; PROBE_SLOTS],
            last,
        });
        id
    }

    /// Abandons an exploration that has run longer than the timeout; returns whether it
    /// did.
    pub fn expire(&mut self, now: Instant) -> bool {
        let stale = self
            .current
            .as_ref()
            .is_some_and(|e| now.saturating_duration_since(e.started) > self.timeout);
        if stale {
            self.current = None;
        }
        stale
    }

    /// The probe choice for the next request (None: not exploring).
    pub fn choose(&mut self) -> Option<ProbeChoice> {
        let e = self.current.as_mut()?;
        if e.issued < PROBE_SLOTS {
            e.issued += 1;
            Some(ProbeChoice::Slot {
                id: e.id,
                slot: e.issued,
                transport: slot_transport(e.issued),
            })
        } else {
            Some(ProbeChoice::Wait)
        }
    }

    /// The cost of slot `slot` (1..=6) of exploration `id`. Returns the outcome when
    /// this was the last missing result; results of other explorations, slots not
    /// handed out, and repeats are ignored.
    pub fn observe(&mut self, id: u64, slot: usize, cost: f64) -> Option<Outcome> {
        let e = self.current.as_mut()?;
        if e.id != id || slot == 0 || slot > e.issued {
            return None;
        }
        let r = &mut e.results[slot - 1];
        if r.is_some() {
            return None;
        }
        *r = Some(if cost.is_nan() { f64::INFINITY } else { cost });
        if e.results.iter().any(Option::is_none) {
            return None;
        }
        let all = e.results.map(|r| r.unwrap_or(f64::INFINITY));
        let tcp_costs = [all[0], all[2], all[4]];
        let quic_costs = [all[1], all[3], all[5]];
        let (tcp_cost, quic_cost) = (two_most_similar_mean(tcp_costs), two_most_similar_mean(quic_costs));
        let selected = if tcp_cost < quic_cost {
            Transport::Tcp
        } else if quic_cost < tcp_cost {
            Transport::Quic
        } else {
            e.last
        };
        let outcome = Outcome {
            id: e.id,
            selected,
            tcp_cost,
            quic_cost,
            tcp_costs,
            quic_costs,
        };
        self.current = None;
        Some(outcome)
    }
}

/// The mean of the two closest of three values (§III-D: "we use the two similar
/// performance values of the three requests"); the third, the one farthest from the
/// other two, is taken as disturbed by something outside the protocol. An infinite
/// value (a failed request) is never closer to a finite one than another finite one;
/// two infinite values are the closest pair, so two failures out of three make the
/// protocol lose.
pub fn two_most_similar_mean(v: [f64; 3]) -> f64 {
    let mut s = v;
    s.sort_by(f64::total_cmp);
    let gap = |a: f64, b: f64| if a == b { 0.0 } else { b - a };
    if gap(s[0], s[1]) <= gap(s[1], s[2]) {
        (s[0] + s[1]) / 2.0
    } else {
        (s[1] + s[2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_most_similar_of_three_are_averaged() {
        assert_eq!(two_most_similar_mean([100.0, 104.0, 300.0]), 102.0);
        assert_eq!(
            two_most_similar_mean([300.0, 100.0, 104.0]),
            102.0,
            "order does not matter"
        );
        assert_eq!(
            two_most_similar_mean([10.0, 200.0, 205.0]),
            202.5,
            "the outlier can be the low one"
        );
        assert_eq!(
            two_most_similar_mean([50.0, 60.0, 70.0]),
            55.0,
            "a tie of gaps takes the lower pair"
        );
        assert_eq!(
            two_most_similar_mean([50.0, 52.0, f64::INFINITY]),
            51.0,
            "one failure is outvoted"
        );
        assert_eq!(
            two_most_similar_mean([50.0, f64::INFINITY, f64::INFINITY]),
            f64::INFINITY
        );
    }

    #[test]
    fn slots_alternate_starting_with_tcp_then_wait() {
        let mut a = ProbeAgent::new(Duration::from_secs(30));
        assert_eq!(a.choose(), None);
        let id = a.start(Instant::now(), Trigger::NewOrigin, Transport::Tcp);
        let got: Vec<_> = (0..7).map(|_| a.choose()).collect();
        for (k, c) in got.iter().take(6).enumerate() {
            let want = if k % 2 == 0 { Transport::Tcp } else { Transport::Quic };
            assert_eq!(
                *c,
                Some(ProbeChoice::Slot {
                    id,
                    slot: k + 1,
                    transport: want
                })
            );
        }
        assert_eq!(got[6], Some(ProbeChoice::Wait));
    }

    #[test]
    fn the_better_protocol_by_the_rule_is_selected_and_outliers_do_not_decide() {
        let mut a = ProbeAgent::new(Duration::from_secs(30));
        let id = a.start(Instant::now(), Trigger::ScoreJump, Transport::Tcp);
        for _ in 0..6 {
            a.choose();
        }
        // TCP 80, 82, 81; QUIC 60, 500 (outlier), 62: QUIC 61 beats TCP 80.5,
        // although QUIC's plain mean (207) is far worse.
        let costs = [80.0, 60.0, 82.0, 500.0, 81.0, 62.0];
        let mut out = None;
        for (k, c) in costs.iter().enumerate() {
            assert!(out.is_none());
            out = a.observe(id, k + 1, *c);
        }
        let out = out.expect("outcome after the sixth result");
        assert_eq!(out.selected, Transport::Quic);
        assert_eq!(out.quic_cost, 61.0);
        assert_eq!(out.tcp_cost, 80.5);
        assert!(!a.exploring());
    }

    #[test]
    fn foreign_repeated_and_unissued_results_are_ignored_and_stale_explorations_expire() {
        let t0 = Instant::now();
        let mut a = ProbeAgent::new(Duration::from_secs(30));
        let id = a.start(t0, Trigger::PathChange, Transport::Quic);
        a.choose();
        assert_eq!(a.observe(id + 1, 1, 5.0), None);
        assert_eq!(a.observe(id, 2, 5.0), None, "slot 2 not handed out yet");
        assert_eq!(a.observe(id, 1, 5.0), None);
        assert_eq!(a.observe(id, 1, 1.0), None, "a repeat does not overwrite");
        assert!(!a.expire(t0 + Duration::from_secs(30)));
        assert!(a.expire(t0 + Duration::from_secs(31)));
        assert!(!a.exploring());
    }
}
