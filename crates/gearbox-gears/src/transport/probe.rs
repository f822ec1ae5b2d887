//! The Probe Agent (WiseTrans §III-D): live experiments with the application's own
//! requests.
//!
//! An exploration hands out six probe slots, alternately TCP and QUIC starting with TCP
//! (Fig. 6: TCP, QUIC, TCP, QUIC, TCP, QUIC), one per request the application issues.
//! In the paper's rule, requests issued after the sixth slot and before the sixth result
//! use the last selected protocol. When all six have finished, each protocol's three
//! costs (RCT normalised for response size, see [`super::request_cost`]) are reduced to
//! the mean of the two most similar ([`two_most_similar_mean`]: three each rather than
//! two or four, §III-D, because one in twenty two-sample experiments was abnormal), and
//! the protocol with the lower value is selected (a tie keeps the last selected
//! protocol). No synthetic probes and no throwaway data: only the application's real
//! requests.
//!
//! **Extras (gearbox's addition, `TransportConfig::probe_balance`, on by default).** A
//! click issues about 13.5 requests at once (§III-D). Under the paper's rule the six
//! slots are the front of that burst and the other seven or so all ride on the last
//! selected protocol: that protocol's connection carries its three slots plus the whole
//! tail, so its probes are slowed by load the other protocol does not carry, and no
//! probe ever sees the back of the queue. The comparison is biased by queue position and
//! load, not by the protocols (in the lab v2 picked TCP, probe costs tcp:38.3 /
//! quic:40.6, on a path where QUIC-only was 3x faster). With extras, requests issued
//! after the sixth slot while the exploration runs continue the alternation (the 7th
//! TCP, the 8th QUIC, ...), up to `max_extra` of them; later ones use the last selected
//! protocol as in the paper. The outcome waits for the six slots and every extra handed
//! out, and each protocol's value is [`trimmed_mean_drop_farthest`] of all its costs
//! (for three costs exactly the paper's two-most-similar mean). `max_extra = 0` is the
//! paper's rule to the letter. The rejected alternative, more slots per protocol, would
//! still leave the burst's tail on one protocol.
//!
//! A slot is linked to its result through the decision string the client copies into
//! the record (`why=probe-<k>of6;ex=<id>`, an extra `why=probe-extra;ex=<id>;extra=<k>`),
//! so records of other requests, or of an older exploration, never count; the first
//! record of a slot or extra counts (a page load decides once for all its objects). When
//! to explore is the gear's business ([`super::wisetrans`]); this object only runs one
//! exploration at a time.

use std::time::{Duration, Instant};

use super::rollback::EARLY_FACTOR;
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
    /// Extra request `extra` (1..=max_extra) of exploration `id`, after the six slots,
    /// on `transport` (the alternation continued: extra 1 TCP, extra 2 QUIC, ...).
    Extra {
        /// The exploration.
        id: u64,
        /// 1-based extra.
        extra: usize,
        /// Its protocol.
        transport: Transport,
    },
    /// All six slots (and every allowed extra) are out; waiting for their results: use
    /// the last selected protocol.
    Wait,
}

/// The result of an exploration.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The exploration.
    pub id: u64,
    /// The better protocol.
    pub selected: Transport,
    /// TCP's value: [`trimmed_mean_drop_farthest`] of its slot and extra costs (with
    /// three slot costs only, the mean of the two most similar).
    pub tcp_cost: f64,
    /// QUIC's value.
    pub quic_cost: f64,
    /// The three raw slot costs of each protocol, slot order.
    pub tcp_costs: [f64; PROBES_PER_PROTOCOL],
    /// QUIC's three.
    pub quic_costs: [f64; PROBES_PER_PROTOCOL],
    /// TCP's extras' raw costs, extra order (empty under the paper's rule).
    pub tcp_extra_costs: Vec<f64>,
    /// QUIC's extras' raw costs.
    pub quic_extra_costs: Vec<f64>,
    /// An early verdict ([`ProbeAgent::early`]): `tcp_cost` and `quic_cost` are then
    /// mean completion times in ms, the loser's a lower bound, and the raw costs of
    /// requests that had not answered are NaN.
    pub early: bool,
}

impl Outcome {
    /// Every raw cost of `t`, slots first, then extras (requests an early verdict did
    /// not wait for left out).
    pub fn costs(&self, t: Transport) -> Vec<f64> {
        let (slots, extras) = match t {
            Transport::Tcp => (&self.tcp_costs, &self.tcp_extra_costs),
            Transport::Quic => (&self.quic_costs, &self.quic_extra_costs),
        };
        slots.iter().chain(extras).copied().filter(|c| !c.is_nan()).collect()
    }

    /// Whether the loser was clearly worse: its value over [`EARLY_FACTOR`] times the
    /// winner's (always so for an early verdict). The gear backs its score-triggered
    /// explorations off after such an outcome (docs/wisetrans.md, "Back-off").
    pub fn clear(&self) -> bool {
        let (lo, hi) = if self.tcp_cost <= self.quic_cost {
            (self.tcp_cost, self.quic_cost)
        } else {
            (self.quic_cost, self.tcp_cost)
        };
        self.early || hi > lo * EARLY_FACTOR
    }

    /// Whether any extra took part.
    pub fn had_extras(&self) -> bool {
        !(self.tcp_extra_costs.is_empty() && self.quic_extra_costs.is_empty())
    }
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
    /// Cost per extra handed out (its length is the number handed out), once its
    /// record arrived.
    extras: Vec<Option<f64>>,
    /// Selected before the exploration (kept on a tie).
    last: Transport,
    /// When each slot was handed out, and its completion time once answered, ms.
    slot_times: [(Option<Instant>, Option<f64>); PROBE_SLOTS],
    /// The same for each extra handed out.
    extra_times: Vec<(Instant, Option<f64>)>,
}

/// Runs live experiments, one at a time.
#[derive(Debug, Clone)]
pub struct ProbeAgent {
    current: Option<Exploration>,
    next_id: u64,
    timeout: Duration,
    /// Most extras per exploration (0: the paper's rule).
    max_extra: usize,
    /// Whether [`ProbeAgent::early`] may end an exploration (on by default).
    early_verdict: bool,
}

/// The protocol of 1-based slot `k`: odd slots TCP, even slots QUIC.
pub fn slot_transport(slot: usize) -> Transport {
    if slot % 2 == 1 {
        Transport::Tcp
    } else {
        Transport::Quic
    }
}

/// The protocol of 1-based extra `k`: the alternation of the slots continued (extra 1
/// is the 7th request of the exploration: TCP).
pub fn extra_transport(extra: usize) -> Transport {
    slot_transport(PROBE_SLOTS + extra)
}

impl ProbeAgent {
    /// An idle agent following the paper's rule (no extras); an exploration not finished
    /// after `timeout` is abandoned.
    pub fn new(timeout: Duration) -> Self {
        Self::with_extras(timeout, 0)
    }

    /// An idle agent that hands out up to `max_extra` extra requests per exploration
    /// after the six slots (see the module doc); 0 is [`ProbeAgent::new`].
    pub fn with_extras(timeout: Duration, max_extra: usize) -> Self {
        ProbeAgent {
            current: None,
            next_id: 1,
            timeout,
            max_extra,
            early_verdict: true,
        }
    }

    /// The same agent with the early verdict on or off (`TransportConfig::probe_early`;
    /// off: every exploration waits for all its answers, as before issue 19).
    pub fn early_verdicts(mut self, on: bool) -> Self {
        self.early_verdict = on;
        self
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
            extras: Vec::new(),
            last,
            slot_times: [(None, None); PROBE_SLOTS],
            extra_times: Vec::new(),
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

    /// The probe choice for a request issued at `now` (None: not exploring).
    pub fn choose(&mut self, now: Instant) -> Option<ProbeChoice> {
        let e = self.current.as_mut()?;
        if e.issued < PROBE_SLOTS {
            e.slot_times[e.issued].0 = Some(now);
            e.issued += 1;
            Some(ProbeChoice::Slot {
                id: e.id,
                slot: e.issued,
                transport: slot_transport(e.issued),
            })
        } else if e.extras.len() < self.max_extra {
            e.extras.push(None);
            e.extra_times.push((now, None));
            let extra = e.extras.len();
            Some(ProbeChoice::Extra {
                id: e.id,
                extra,
                transport: extra_transport(extra),
            })
        } else {
            Some(ProbeChoice::Wait)
        }
    }

    /// The cost of slot `slot` (1..=6) of exploration `id`, its completion time taken
    /// to be the cost. Returns the outcome when this was the last missing result;
    /// results of other explorations, slots not handed out, and repeats are ignored.
    pub fn observe(&mut self, id: u64, slot: usize, cost: f64) -> Option<Outcome> {
        self.observe_timed(id, slot, cost, cost, Instant::now())
    }

    /// The cost of extra `extra` (1-based) of exploration `id`; as [`Self::observe`].
    pub fn observe_extra(&mut self, id: u64, extra: usize, cost: f64) -> Option<Outcome> {
        self.observe_extra_timed(id, extra, cost, cost, Instant::now())
    }

    /// The cost and completion time (ms) of slot `slot` of exploration `id`, answered at
    /// `now`: the outcome when this was the last missing result or allows an early
    /// verdict ([`Self::early`]).
    pub fn observe_timed(&mut self, id: u64, slot: usize, cost: f64, rct_ms: f64, now: Instant) -> Option<Outcome> {
        let e = self.current.as_mut()?;
        if e.id != id || slot == 0 || slot > e.issued {
            return None;
        }
        if !fill(&mut e.results[slot - 1], cost) {
            return None;
        }
        e.slot_times[slot - 1].1 = Some(finite_or_inf(rct_ms));
        self.finish().or_else(|| self.early(now))
    }

    /// As [`Self::observe_timed`], for extra `extra` (1-based).
    pub fn observe_extra_timed(
        &mut self,
        id: u64,
        extra: usize,
        cost: f64,
        rct_ms: f64,
        now: Instant,
    ) -> Option<Outcome> {
        let e = self.current.as_mut()?;
        if e.id != id || extra == 0 || extra > e.extras.len() {
            return None;
        }
        if !fill(&mut e.extras[extra - 1], cost) {
            return None;
        }
        e.extra_times[extra - 1].1 = Some(finite_or_inf(rct_ms));
        self.finish().or_else(|| self.early(now))
    }

    /// The protocol leading the running exploration at `now`, for requests that are not
    /// part of it (`why=probe-wait`, gearbox's addition to §III-D): once each protocol
    /// has at least [`PROBES_PER_PROTOCOL`] answers, the one whose completion times
    /// (running ones counted with their time so far) have the lower median; before that,
    /// None (the last selected protocol, the paper's rule). Why: a click that comes while
    /// one straggler keeps the exploration open otherwise rides whole on the last
    /// selected protocol; in the lab's `mobile` class a 25-request click went to TCP
    /// (the new origin's default) 0.99 s into the session, one TCP probe of 18 still
    /// running, while QUIC's nine had answered in a third less time.
    pub fn leader(&self, now: Instant) -> Option<Transport> {
        if !self.early_verdict {
            return None;
        }
        let e = self.current.as_ref()?;
        let [tcp, quic] = times_so_far(e, now);
        if tcp.1 < PROBES_PER_PROTOCOL || quic.1 < PROBES_PER_PROTOCOL {
            return None;
        }
        let (t, q) = (crate::median(&tcp.0), crate::median(&quic.0));
        if t < q {
            Some(Transport::Tcp)
        } else if q < t {
            Some(Transport::Quic)
        } else {
            None
        }
    }

    /// The early verdict at `now` (gearbox's addition to §III-D; the Rollback Checker's
    /// verification has the same, [`super::rollback`]): once every request handed out on
    /// one protocol (at least [`PROBES_PER_PROTOCOL`]) has answered, a request of the
    /// other still running counts with the time it has run so far, a lower bound on its
    /// completion time; when the other's median completion time, bounded so, is over
    /// [`EARLY_FACTOR`] times the first one's value ([`trimmed_mean_drop_farthest`] of
    /// its completion times), the exploration ends now and selects the first. The median
    /// of lower bounds is a lower bound on the final median, and one slow outlier does not
    /// decide (the full rule would drop it too). Why: on a rate-limited UDP path QUIC answers slowly instead of failing, and
    /// the outcome otherwise waits for QUIC's slowest probe while every request issued
    /// meanwhile rides on the last selected protocol, the slow one when the gear was on
    /// QUIC (in the lab's `block` class half of v2's requests were exploration or
    /// verification requests). §III-D: "the different preference to UDP/QUIC will be
    /// reflected by the poor performance of QUIC"; the bound says so before the last
    /// QUIC answer. Call it on every decision too, so the verdict comes when the next
    /// click does, not when the slowest probe answers.
    pub fn early(&mut self, now: Instant) -> Option<Outcome> {
        if !self.early_verdict {
            return None;
        }
        let e = self.current.as_ref()?;
        let sides = times_so_far(e, now);
        let side = |t: Transport| usize::from(t == Transport::Quic);
        let winner = [Transport::Tcp, Transport::Quic].into_iter().find(|&t| {
            let (mine, theirs) = (&sides[side(t)], &sides[side(t.other())]);
            mine.0.len() >= PROBES_PER_PROTOCOL
                && mine.1 == mine.0.len()
                && !theirs.0.is_empty()
                && crate::median(&theirs.0) > EARLY_FACTOR * trimmed_mean_drop_farthest(&mine.0)
        })?;
        // The winner's value as the full rule would compute it; the loser's the median of
        // its bounds (a lower bound on its final median: one slow outlier does not decide).
        let value = |t: Transport| {
            if t == winner {
                trimmed_mean_drop_farthest(&sides[side(t)].0)
            } else {
                crate::median(&sides[side(t)].0)
            }
        };
        let nan = |r: &Option<f64>| r.unwrap_or(f64::NAN);
        let (mut tcp_extra_costs, mut quic_extra_costs) = (Vec::new(), Vec::new());
        for (k, r) in e.extras.iter().enumerate() {
            match extra_transport(k + 1) {
                Transport::Tcp => tcp_extra_costs.push(nan(r)),
                Transport::Quic => quic_extra_costs.push(nan(r)),
            }
        }
        let outcome = Outcome {
            id: e.id,
            selected: winner,
            tcp_cost: value(Transport::Tcp),
            quic_cost: value(Transport::Quic),
            tcp_costs: [nan(&e.results[0]), nan(&e.results[2]), nan(&e.results[4])],
            quic_costs: [nan(&e.results[1]), nan(&e.results[3]), nan(&e.results[5])],
            tcp_extra_costs,
            quic_extra_costs,
            early: true,
        };
        self.current = None;
        Some(outcome)
    }

    /// The outcome, and the exploration ended, if every slot and every extra handed out
    /// has its result.
    fn finish(&mut self) -> Option<Outcome> {
        let e = self.current.as_ref()?;
        if e.results.iter().chain(&e.extras).any(Option::is_none) {
            return None;
        }
        let all = e.results.map(|r| r.unwrap_or(f64::INFINITY));
        let tcp_costs = [all[0], all[2], all[4]];
        let quic_costs = [all[1], all[3], all[5]];
        let (mut tcp_extra_costs, mut quic_extra_costs) = (Vec::new(), Vec::new());
        for (k, r) in e.extras.iter().enumerate() {
            let c = r.unwrap_or(f64::INFINITY);
            match extra_transport(k + 1) {
                Transport::Tcp => tcp_extra_costs.push(c),
                Transport::Quic => quic_extra_costs.push(c),
            }
        }
        let value = |slots: &[f64; PROBES_PER_PROTOCOL], extras: &[f64]| {
            if extras.is_empty() {
                two_most_similar_mean(*slots)
            } else {
                let v: Vec<f64> = slots.iter().chain(extras).copied().collect();
                trimmed_mean_drop_farthest(&v)
            }
        };
        let tcp_cost = value(&tcp_costs, &tcp_extra_costs);
        let quic_cost = value(&quic_costs, &quic_extra_costs);
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
            tcp_extra_costs,
            quic_extra_costs,
            early: false,
        };
        self.current = None;
        Some(outcome)
    }
}

/// Per protocol (TCP first) of an exploration at `now`: the completion times of the
/// requests handed out, a running one's the time it has run so far (a lower bound), and
/// how many have answered.
fn times_so_far(e: &Exploration, now: Instant) -> [(Vec<f64>, usize); 2] {
    // Per protocol: the completion times of the requests handed out, a running one's
    // the time it has run so far, and how many have answered.
    let mut sides: [(Vec<f64>, usize); 2] = [(Vec::new(), 0), (Vec::new(), 0)];
    let side = |t: Transport| usize::from(t == Transport::Quic);
    let times = e
        .slot_times
        .iter()
        .take(e.issued)
        .enumerate()
        .map(|(k, (at, rct))| (slot_transport(k + 1), at.unwrap_or(e.started), *rct))
        .chain(
            e.extra_times
                .iter()
                .enumerate()
                .map(|(k, (at, rct))| (extra_transport(k + 1), *at, *rct)),
        );
    for (t, at, rct) in times {
        let s = &mut sides[side(t)];
        match rct {
            Some(r) => {
                s.0.push(r);
                s.1 += 1;
            }
            None => s.0.push(now.saturating_duration_since(at).as_secs_f64() * 1000.0),
        }
    }
    sides
}

/// A completion time as the early verdict counts it (NaN, no completion: infinite).
fn finite_or_inf(x: f64) -> f64 {
    if x.is_nan() {
        f64::INFINITY
    } else {
        x
    }
}

/// Stores the first result of a slot or extra (a failed request's NaN as infinite cost);
/// false for a repeat.
fn fill(slot: &mut Option<f64>, cost: f64) -> bool {
    if slot.is_some() {
        return false;
    }
    *slot = Some(if cost.is_nan() { f64::INFINITY } else { cost });
    true
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

/// The mean of `v` without the one value farthest from the median; the general form of
/// [`two_most_similar_mean`], used when extras give a protocol more than three costs.
///
/// With three values it is exactly [`two_most_similar_mean`] (the farthest from the
/// middle value is the one not in the closest pair; a tie drops the highest). Two or
/// fewer values: the plain mean (nothing to outvote); none: NaN. The farthest value is
/// always the lowest or the highest; on a tie the highest goes. Infinite values (failed
/// requests) are as far as can be from a finite median and at distance 0 from an
/// infinite one, so one failure is dropped, and failures in the majority make the value
/// infinite.
pub fn trimmed_mean_drop_farthest(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let kept: &[f64] = if n <= 2 {
        &s
    } else {
        let median = if n % 2 == 1 {
            s[n / 2]
        } else {
            (s[n / 2 - 1] + s[n / 2]) / 2.0
        };
        let dist = |x: f64| if x == median { 0.0 } else { (x - median).abs() };
        if dist(s[0]) > dist(s[n - 1]) {
            &s[1..]
        } else {
            &s[..n - 1]
        }
    };
    if kept.is_empty() {
        return f64::NAN;
    }
    kept.iter().sum::<f64>() / kept.len() as f64
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
        assert_eq!(a.choose(Instant::now()), None);
        let id = a.start(Instant::now(), Trigger::NewOrigin, Transport::Tcp);
        let got: Vec<_> = (0..7).map(|_| a.choose(Instant::now())).collect();
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
            a.choose(Instant::now());
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
        a.choose(Instant::now());
        assert_eq!(a.observe(id + 1, 1, 5.0), None);
        assert_eq!(a.observe(id, 2, 5.0), None, "slot 2 not handed out yet");
        assert_eq!(a.observe(id, 1, 5.0), None);
        assert_eq!(a.observe(id, 1, 1.0), None, "a repeat does not overwrite");
        assert!(!a.expire(t0 + Duration::from_secs(30)));
        assert!(a.expire(t0 + Duration::from_secs(31)));
        assert!(!a.exploring());
    }

    #[test]
    fn dropping_the_farthest_from_the_median_is_the_papers_rule_for_three_values() {
        let threes = [
            [100.0, 104.0, 300.0],
            [300.0, 100.0, 104.0],
            [10.0, 200.0, 205.0],
            [50.0, 60.0, 70.0],
            [50.0, 52.0, f64::INFINITY],
            [50.0, f64::INFINITY, f64::INFINITY],
            [f64::INFINITY; 3],
            [7.0, 7.0, 7.0],
            [0.0, 1e9, 5e8],
        ];
        for v in threes {
            let (a, b) = (trimmed_mean_drop_farthest(&v), two_most_similar_mean(v));
            assert!(a == b || (a.is_nan() && b.is_nan()), "{v:?}: {a} != {b}");
        }
    }

    #[test]
    fn dropping_the_farthest_from_the_median_for_other_counts() {
        assert!(trimmed_mean_drop_farthest(&[]).is_nan());
        assert_eq!(trimmed_mean_drop_farthest(&[42.0]), 42.0);
        assert_eq!(trimmed_mean_drop_farthest(&[40.0, 60.0]), 50.0, "two: the plain mean");
        assert_eq!(trimmed_mean_drop_farthest(&[40.0, f64::INFINITY]), f64::INFINITY);
        // Four: median 25; 100 is 75 away, 10 only 15.
        assert_eq!(trimmed_mean_drop_farthest(&[10.0, 20.0, 30.0, 100.0]), 20.0);
        assert_eq!(trimmed_mean_drop_farthest(&[1.0, 20.0, 21.0, 22.0]), 21.0);
        assert_eq!(
            trimmed_mean_drop_farthest(&[10.0, 20.0, 30.0, 40.0]),
            20.0,
            "a tie drops the highest"
        );
        assert_eq!(trimmed_mean_drop_farthest(&[1.0, 2.0, 3.0, f64::INFINITY]), 2.0);
        assert_eq!(
            trimmed_mean_drop_farthest(&[1.0, 2.0, f64::INFINITY, f64::INFINITY]),
            f64::INFINITY,
            "half failed: the protocol loses"
        );
        // Seven: median 40; only the 1000 goes, the rest are averaged.
        assert_eq!(
            trimmed_mean_drop_farthest(&[35.0, 40.0, 1000.0, 45.0, 38.0, 42.0, 40.0]),
            40.0
        );
        assert_eq!(
            trimmed_mean_drop_farthest(&[35.0, 40.0, 45.0, 38.0, 42.0, 40.0, f64::INFINITY]),
            40.0,
            "one failure in seven is outvoted"
        );
        assert_eq!(
            trimmed_mean_drop_farthest(&[1.0, 50.0, 50.0, 50.0, 50.0, 50.0, 56.0]),
            51.0,
            "the low outlier goes"
        );
    }

    #[test]
    fn with_extras_requests_after_the_sixth_slot_keep_alternating_up_to_the_limit() {
        let mut a = ProbeAgent::with_extras(Duration::from_secs(30), 3);
        let id = a.start(Instant::now(), Trigger::NewOrigin, Transport::Quic);
        for _ in 0..PROBE_SLOTS {
            assert!(matches!(a.choose(Instant::now()), Some(ProbeChoice::Slot { .. })));
        }
        let got: Vec<_> = (0..5).map(|_| a.choose(Instant::now())).collect();
        assert_eq!(
            got,
            [
                Some(ProbeChoice::Extra {
                    id,
                    extra: 1,
                    transport: Transport::Tcp
                }),
                Some(ProbeChoice::Extra {
                    id,
                    extra: 2,
                    transport: Transport::Quic
                }),
                Some(ProbeChoice::Extra {
                    id,
                    extra: 3,
                    transport: Transport::Tcp
                }),
                Some(ProbeChoice::Wait),
                Some(ProbeChoice::Wait),
            ]
        );
    }

    #[test]
    fn the_outcome_waits_for_every_extra_handed_out_and_counts_it() {
        let mut a = ProbeAgent::with_extras(Duration::from_secs(30), 12);
        let id = a.start(Instant::now(), Trigger::ScoreJump, Transport::Tcp);
        for _ in 0..PROBE_SLOTS + 4 {
            a.choose(Instant::now());
        }
        // Slots tie at 50; extras: TCP 90, 95 (extras 1, 3), QUIC 30, 31 (2, 4).
        for k in 1..=PROBE_SLOTS {
            assert_eq!(a.observe(id, k, 50.0), None);
        }
        assert_eq!(a.observe_extra(id, 5, 1.0), None, "extra 5 not handed out");
        assert_eq!(a.observe_extra(id, 0, 1.0), None);
        assert_eq!(a.observe_extra(id + 1, 1, 1.0), None, "another exploration's");
        assert_eq!(a.observe_extra(id, 4, 31.0), None);
        assert_eq!(a.observe_extra(id, 2, 30.0), None);
        assert_eq!(a.observe_extra(id, 2, 1000.0), None, "a repeat does not overwrite");
        assert_eq!(a.observe_extra(id, 3, 95.0), None);
        assert!(a.exploring(), "extra 1 still missing");
        let out = a.observe_extra(id, 1, 90.0).expect("outcome after the last extra");
        assert_eq!(out.selected, Transport::Quic);
        assert_eq!(out.tcp_extra_costs, vec![90.0, 95.0]);
        assert_eq!(out.quic_extra_costs, vec![30.0, 31.0]);
        assert_eq!(out.costs(Transport::Quic), vec![50.0, 50.0, 50.0, 30.0, 31.0]);
        // QUIC: median 50, 30 is the farthest -> (31 + 3 * 50) / 4.
        assert_eq!(out.quic_cost, 45.25);
        // TCP: median 50, 95 is the farthest -> (3 * 50 + 90) / 4.
        assert_eq!(out.tcp_cost, 60.0);
        assert!(!a.exploring());
    }

    #[test]
    fn without_extras_handed_out_the_outcome_is_the_papers() {
        let mut a = ProbeAgent::with_extras(Duration::from_secs(30), 12);
        let id = a.start(Instant::now(), Trigger::ScoreJump, Transport::Tcp);
        for _ in 0..PROBE_SLOTS {
            a.choose(Instant::now());
        }
        let costs = [80.0, 60.0, 82.0, 500.0, 81.0, 62.0];
        let mut out = None;
        for (k, c) in costs.iter().enumerate() {
            out = a.observe(id, k + 1, *c);
        }
        let out = out.expect("outcome after the sixth result");
        assert!(!out.had_extras());
        assert_eq!(
            (out.selected, out.tcp_cost, out.quic_cost),
            (Transport::Quic, 80.5, 61.0)
        );
    }

    #[test]
    fn an_exploration_waiting_for_an_extra_expires_like_any_other() {
        let t0 = Instant::now();
        let mut a = ProbeAgent::with_extras(Duration::from_secs(30), 12);
        let id = a.start(t0, Trigger::PathChange, Transport::Tcp);
        for _ in 0..PROBE_SLOTS + 1 {
            a.choose(Instant::now());
        }
        for k in 1..=PROBE_SLOTS {
            assert_eq!(a.observe(id, k, 50.0), None);
        }
        assert!(!a.expire(t0 + Duration::from_secs(30)));
        assert!(a.expire(t0 + Duration::from_secs(31)));
        assert_eq!(a.observe_extra(id, 1, 50.0), None, "too late");
        assert!(!a.exploring());
    }

    #[test]
    fn an_exploration_ends_early_when_the_other_protocols_probes_run_past_twice_the_first_ones() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut a = ProbeAgent::with_extras(Duration::from_secs(30), 12);
        let id = a.start(t0, Trigger::ScoreJump, Transport::Quic);
        // One click of 9: slots 1-6 and extras 1-3 (TCP, QUIC, TCP), all at t0.
        for _ in 0..9 {
            a.choose(t0);
        }
        // TCP's five answer in 50 ms; one QUIC probe answers in 60 ms, the rest run.
        for slot in [1, 3, 5] {
            assert_eq!(a.observe_timed(id, slot, 50.0, 50.0, t0 + ms(50)), None);
        }
        assert_eq!(a.observe_extra_timed(id, 1, 50.0, 50.0, t0 + ms(50)), None);
        assert_eq!(a.observe_extra_timed(id, 3, 50.0, 50.0, t0 + ms(50)), None);
        assert_eq!(
            a.observe_timed(id, 2, 60.0, 60.0, t0 + ms(60)),
            None,
            "QUIC's running ones have run 60 ms: median 60, not over 2 x 50"
        );
        assert_eq!(a.early(t0 + ms(90)), None, "median 90 < 100");
        let out = a.early(t0 + ms(400)).expect("QUIC's median bound 400 > 2 x 50");
        assert!(out.early && out.clear());
        assert_eq!(out.selected, Transport::Tcp);
        assert_eq!((out.tcp_cost, out.quic_cost), (50.0, 400.0));
        assert_eq!(out.costs(Transport::Quic), vec![60.0], "only the answered ones");
        assert!(!a.exploring());
        assert_eq!(
            a.observe_timed(id, 4, 900.0, 900.0, t0 + ms(900)),
            None,
            "late answers are ignored"
        );
    }

    #[test]
    fn one_slow_probe_does_not_end_an_exploration_early() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut a = ProbeAgent::new(Duration::from_secs(30));
        let id = a.start(t0, Trigger::ScoreJump, Transport::Tcp);
        for _ in 0..6 {
            a.choose(t0);
        }
        assert_eq!(a.observe_timed(id, 4, 40.0, 40.0, t0 + ms(40)), None);
        assert_eq!(a.observe_timed(id, 6, 40.0, 40.0, t0 + ms(40)), None);
        for slot in [1, 3, 5] {
            assert_eq!(a.observe_timed(id, slot, 50.0, 50.0, t0 + ms(50)), None);
        }
        assert_eq!(
            a.early(t0 + ms(1500)),
            None,
            "QUIC's median is 40 however long one runs"
        );
        let out = a
            .observe_timed(id, 2, 2000.0, 2000.0, t0 + ms(2000))
            .expect("the full rule, the outlier dropped");
        assert!(!out.early && !out.clear());
        assert_eq!(out.selected, Transport::Quic);
    }
}
