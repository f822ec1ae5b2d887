//! The Rollback Checker (WiseTrans §III-E, §IV-E4): after a switch, compare the
//! requests over an interval before and after it, and go back on a significant
//! deterioration.
//!
//! - Before: the previous protocol's exploitation requests (not probe requests) that
//!   finished in the interval (default 10 s, §IV-E4) before the switch; when an
//!   exploration led to the switch, its probe results for the previous protocol are
//!   added (they are the freshest measurements of it, and a new path has no others).
//! - After: the new protocol's requests finishing in the interval after the switch.
//!   The checker judges once the interval is over and both sides have at least
//!   `rollback_min_requests`; with too few requests after three intervals it gives up
//!   and keeps the switch.
//! - Rule: roll back when mean(after) > mean(before) × (1 + `rollback_deterioration`),
//!   costs being RCT normalised for response size ([`super::request_cost`]), a failed
//!   request costing `failed_request_cost_ms`. Means, not medians: the paper's goal is
//!   the average completion time.
//!
//! The checker can be disabled (§IV-E4: "an optional module"); then every switch stands.
//!
//! **Verification** (`verify`, gearbox's addition to §III-E, on by default): the rule
//! above compares the old protocol *before* the switch with the new one *after* it, so on
//! a path that worsens after the switch it blames the new protocol for the path (in the
//! lab it undid right choices in 4 of 6 v2 runs and all 6 v1 runs of the `plain` region,
//! docs/wisetrans.md). With verification, a deterioration does not roll back at once: the
//! checker first asks for the next [`VERIFY_SLOTS`] requests alternately on the old and
//! the new protocol ([`Verdict::Verify`], then [`RollbackChecker::next_verify`]), and
//! rolls back only if the old protocol's [`VERIFY_REQUESTS`] cost less on average than
//! the new one's ([`Verdict::Verified`]): both protocols measured on the path as it is
//! now, and at the same places in the same click bursts. (A first version compared the
//! old protocol's verification requests with the new protocol's latest exploitation
//! requests; but the verification requests are the front of a burst and the latest ones
//! its queued tail, so the old protocol won on position alone: in the lab it undid a QUIC
//! choice where QUIC was faster in every window.) The test costs three requests on the
//! old protocol, the ones the paper's rule would send there anyway when it is right.
//! Verification requests unanswered after one interval are judged on those answered
//! (at least one per protocol), or else given up (the switch stands).
//!
//! **Early verdict.** When the new protocol is the one that broke (a UDP policer), its
//! verification requests are the slow ones, and waiting for them costs the next click
//! too. So once the old protocol's three have answered, a new-protocol request still
//! running counts with the time it has run so far, a lower bound on its completion
//! time, and the checker rolls back at once when the new protocol's mean completion time
//! (bounded so) exceeds [`EARLY_FACTOR`] times the old one's. Completion times, not
//! size-normalised costs: an unanswered request's size is unknown; the factor covers
//! the size differences of three responses from the same bursts.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::Transport;

/// Requests a verification sends on each protocol (three, as the Probe Agent's live
/// experiments, §III-D).
pub const VERIFY_REQUESTS: usize = 3;

/// Requests of a verification, alternately on the old and the new protocol (the old
/// one first).
pub const VERIFY_SLOTS: usize = 2 * VERIFY_REQUESTS;

/// An early verdict rolls back when the new protocol's verification requests have taken
/// at least this many times the old one's mean completion time (see the module doc).
pub const EARLY_FACTOR: f64 = 2.0;

/// The checker's judgement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    /// The switch stands.
    Keep {
        /// Mean cost before, after (NaN: not enough requests to judge).
        before: f64,
        /// Mean cost after.
        after: f64,
    },
    /// Go back to `to`.
    RollBack {
        /// The protocol to return to.
        to: Transport,
        /// Mean cost before.
        before: f64,
        /// Mean cost after.
        after: f64,
    },
    /// (verification on) A deterioration: the next [`VERIFY_SLOTS`] requests go
    /// alternately to `to` and the new protocol ([`RollbackChecker::next_verify`])
    /// before anything is undone.
    Verify {
        /// The old protocol, measured again.
        to: Transport,
        /// Mean cost before.
        before: f64,
        /// Mean cost after.
        after: f64,
    },
    /// A verification's result: `rolled_back` when the old protocol (`old`, the mean
    /// of its verification requests) beat the new one (`current`, the mean of its own).
    Verified {
        /// The old protocol.
        to: Transport,
        /// Whether to go back to it.
        rolled_back: bool,
        /// Mean cost of the old protocol's verification requests (early: their mean
        /// completion time, ms).
        old: f64,
        /// Mean cost of the new protocol's verification requests (early: a lower bound
        /// of their mean completion time, ms).
        current: f64,
        /// An early verdict (the new protocol's requests had not all answered).
        early: bool,
    },
}

#[derive(Debug, Clone)]
struct Check {
    from: Transport,
    to: Transport,
    at: Instant,
    before_sum: f64,
    before_n: usize,
    after_sum: f64,
    after_n: usize,
}

/// A running verification.
#[derive(Debug, Clone)]
struct Verifying {
    id: u64,
    /// The protocol before the switch (odd slots).
    old: Transport,
    /// The protocol after it (even slots).
    new: Transport,
    /// Slots handed out.
    issued: usize,
    /// The old protocol's answers: (cost, completion time in ms).
    old_answers: Vec<(f64, f64)>,
    /// The new protocol's answers: (cost, completion time in ms).
    new_answers: Vec<(f64, f64)>,
    /// When each of the new protocol's requests was handed out.
    new_issued_at: Vec<Instant>,
    since: Instant,
}

/// Watches switches and decides on rollbacks.
#[derive(Debug, Clone)]
pub struct RollbackChecker {
    enabled: bool,
    verify: bool,
    interval: Duration,
    deterioration: f64,
    min_requests: usize,
    /// Recent exploitation requests: (finished at, protocol, cost), at most one interval old.
    recent: VecDeque<(Instant, Transport, f64)>,
    check: Option<Check>,
    verifying: Option<Verifying>,
    /// Id of the last verification (decision strings name it, `ex=<id>`).
    last_id: u64,
}

/// Most recent requests kept for the "before" side.
const MAX_RECENT: usize = 512;

impl RollbackChecker {
    /// A checker (`enabled = false`: never rolls back) that rolls back at once on a
    /// deterioration (the paper's rule); see [`RollbackChecker::verifying`].
    pub fn new(enabled: bool, interval: Duration, deterioration: f64, min_requests: usize) -> Self {
        RollbackChecker {
            enabled,
            verify: false,
            interval,
            deterioration,
            min_requests: min_requests.max(1),
            recent: VecDeque::new(),
            check: None,
            verifying: None,
            last_id: 0,
        }
    }

    /// The same checker verifying a deterioration on the old protocol before it rolls
    /// back (`verify`, see the module doc).
    pub fn verifying(mut self, verify: bool) -> Self {
        self.verify = verify;
        self
    }

    /// Whether a check or verification is running (a switch is on probation).
    pub fn checking(&self) -> bool {
        self.check.is_some() || self.verifying.is_some()
    }

    /// Whether a verification is running (its requests decide; nothing else switches).
    pub fn verification_running(&self) -> bool {
        self.verifying.is_some()
    }

    /// The next verification request handed out at `now`, if one is due: (verification
    /// id, 1-based slot number, the protocol it must use: the old one in odd slots, the
    /// new one in even).
    pub fn next_verify(&mut self, now: Instant) -> Option<(u64, usize, Transport)> {
        let v = self.verifying.as_mut()?;
        if v.issued >= VERIFY_SLOTS {
            return None;
        }
        v.issued += 1;
        let transport = if v.issued % 2 == 1 {
            v.old
        } else {
            v.new_issued_at.push(now);
            v.new
        };
        Some((v.id, v.issued, transport))
    }

    /// The result, at `now`, of a request of verification `id` that ran on `transport`:
    /// its cost and completion time, ms (a failed one costs and takes like any failure).
    /// Returns the verdict when this was the last one missing or allows an early one;
    /// results of another verification, or beyond the requests issued on that
    /// protocol, are ignored.
    pub fn observe_verify(
        &mut self,
        id: u64,
        transport: Transport,
        cost: f64,
        rct_ms: f64,
        now: Instant,
    ) -> Option<Verdict> {
        let finite = |x: f64| if x.is_nan() { f64::INFINITY } else { x };
        let v = self.verifying.as_mut().filter(|v| v.id == id)?;
        let (answers, issued) = if transport == v.old {
            (&mut v.old_answers, v.issued.div_ceil(2))
        } else {
            (&mut v.new_answers, v.issued / 2)
        };
        if answers.len() >= issued {
            return None;
        }
        answers.push((finite(cost), finite(rct_ms)));
        if v.old_answers.len() < VERIFY_REQUESTS || v.new_answers.len() < VERIFY_REQUESTS {
            return self.early_verdict(now);
        }
        self.finish_verify()
    }

    /// The early verdict (module doc), if the verification running at `now` allows it.
    fn early_verdict(&mut self, now: Instant) -> Option<Verdict> {
        let v = self.verifying.as_ref()?;
        if v.old_answers.len() < VERIFY_REQUESTS || v.new_issued_at.len() < VERIFY_REQUESTS {
            return None;
        }
        let old = mean(v.old_answers.iter().map(|a| a.1));
        // Which requests are still out is not tracked; counting the latest hand-outs as
        // the running ones (the least time run) keeps the bound a bound.
        let answered = v.new_answers.len().min(v.new_issued_at.len());
        let bound: f64 = v.new_answers.iter().map(|a| a.1).sum::<f64>()
            + v.new_issued_at[answered..]
                .iter()
                .map(|t| now.saturating_duration_since(*t).as_secs_f64() * 1000.0)
                .sum::<f64>();
        let current = bound / VERIFY_REQUESTS as f64;
        if current <= old * EARLY_FACTOR {
            return None;
        }
        let to = v.old;
        self.verifying = None;
        Some(Verdict::Verified {
            to,
            rolled_back: true,
            old,
            current,
            early: true,
        })
    }

    /// Judges the running verification on the answers it has: `Verified` with at least
    /// one per protocol, otherwise `Keep` (the switch stands).
    fn finish_verify(&mut self) -> Option<Verdict> {
        let v = self.verifying.take()?;
        if v.old_answers.is_empty() || v.new_answers.is_empty() {
            return Some(Verdict::Keep {
                before: f64::NAN,
                after: f64::NAN,
            });
        }
        let old = mean(v.old_answers.iter().map(|a| a.0));
        let current = mean(v.new_answers.iter().map(|a| a.0));
        Some(Verdict::Verified {
            to: v.old,
            rolled_back: old < current,
            old,
            current,
            early: false,
        })
    }

    /// A protocol switch `from` → `to` happened at `now`; `probe_costs` are the probe
    /// results of `from` if an exploration led to it. Starts a check (if enabled and
    /// the before side has enough requests).
    ///
    /// A switch during the probation of the previous one (a failover, or v1 after its
    /// dwell) takes the requests that check had measured on `from` as before-side
    /// requests too: they are the freshest measurements of `from` (while a check runs,
    /// nothing goes to the recent list).
    pub fn switched(&mut self, from: Transport, to: Transport, now: Instant, probe_costs: &[f64]) {
        let carried = self
            .check
            .as_ref()
            .filter(|c| c.to == from)
            .map_or((0.0, 0), |c| (c.after_sum, c.after_n));
        self.check = None;
        self.verifying = None;
        if !self.enabled || from == to {
            return;
        }
        self.trim(now);
        let (mut sum, mut n) = carried;
        for &(_, t, c) in &self.recent {
            if t == from {
                sum += c;
                n += 1;
            }
        }
        for &c in probe_costs.iter().filter(|c| !c.is_nan()) {
            sum += c;
            n += 1;
        }
        self.recent.clear();
        if n < self.min_requests {
            return;
        }
        self.check = Some(Check {
            from,
            to,
            at: now,
            before_sum: sum,
            before_n: n,
            after_sum: 0.0,
            after_n: 0,
        });
    }

    /// An exploitation request on `transport` finished at `now` with `cost`. Returns a
    /// verdict when this completes a check.
    pub fn observe(&mut self, transport: Transport, cost: f64, now: Instant) -> Option<Verdict> {
        let cost = if cost.is_nan() { f64::INFINITY } else { cost };
        if let Some(c) = self.check.as_mut() {
            if transport == c.to && now.saturating_duration_since(c.at) <= self.interval {
                c.after_sum += cost;
                c.after_n += 1;
            }
        } else {
            self.recent.push_back((now, transport, cost));
            if self.recent.len() > MAX_RECENT {
                self.recent.pop_front();
            }
        }
        self.poll(now)
    }

    /// Judges a check whose interval is over, and gives up a verification unanswered
    /// for an interval (call on every decision too, so a check ends even when requests
    /// stop).
    pub fn poll(&mut self, now: Instant) -> Option<Verdict> {
        if let Some(v) = &self.verifying {
            if now.saturating_duration_since(v.since) <= self.interval {
                return self.early_verdict(now);
            }
            return self.finish_verify();
        }
        let c = self.check.as_ref()?;
        let elapsed = now.saturating_duration_since(c.at);
        if elapsed < self.interval {
            return None;
        }
        let before = c.before_sum / c.before_n as f64;
        let verdict = if c.after_n >= self.min_requests {
            let after = c.after_sum / c.after_n as f64;
            if after > before * (1.0 + self.deterioration) {
                if self.verify {
                    let to = c.from;
                    self.last_id += 1;
                    self.verifying = Some(Verifying {
                        id: self.last_id,
                        old: to,
                        new: c.to,
                        issued: 0,
                        old_answers: Vec::new(),
                        new_answers: Vec::new(),
                        new_issued_at: Vec::new(),
                        since: now,
                    });
                    self.check = None;
                    return Some(Verdict::Verify { to, before, after });
                }
                Verdict::RollBack {
                    to: c.from,
                    before,
                    after,
                }
            } else {
                Verdict::Keep { before, after }
            }
        } else if elapsed >= self.interval * 3 {
            Verdict::Keep {
                before,
                after: f64::NAN,
            }
        } else {
            return None;
        };
        self.check = None;
        Some(verdict)
    }

    fn trim(&mut self, now: Instant) {
        while let Some(&(at, _, _)) = self.recent.front() {
            if now.saturating_duration_since(at) > self.interval {
                self.recent.pop_front();
            } else {
                break;
            }
        }
    }
}

/// The mean of a non-empty series.
fn mean(xs: impl ExactSizeIterator<Item = f64>) -> f64 {
    let n = xs.len() as f64;
    xs.sum::<f64>() / n
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    /// Before: TCP at `before` ms for 10 s; switch to QUIC at t=10 s; after: QUIC at the
    /// given costs, one per second.
    fn run(before: f64, after: &[f64]) -> Vec<Verdict> {
        let t0 = Instant::now();
        let mut rc = RollbackChecker::new(true, 10 * S, 0.2, 3);
        for i in 0..10 {
            assert_eq!(rc.observe(Transport::Tcp, before, t0 + i * S), None);
        }
        rc.switched(Transport::Tcp, Transport::Quic, t0 + 10 * S, &[]);
        assert!(rc.checking());
        let mut verdicts = Vec::new();
        for (i, c) in after.iter().enumerate() {
            verdicts.extend(rc.observe(Transport::Quic, *c, t0 + 10 * S + (i as u32 + 1) * S));
        }
        verdicts.extend(rc.poll(t0 + 25 * S));
        verdicts
    }

    #[test]
    fn a_clear_deterioration_after_a_switch_rolls_back() {
        let v = run(
            100.0,
            &[150.0, 160.0, 140.0, 155.0, 150.0, 145.0, 150.0, 160.0, 150.0, 150.0],
        );
        assert_eq!(v.len(), 1);
        assert!(
            matches!(v[0], Verdict::RollBack { to: Transport::Tcp, before, .. } if before == 100.0),
            "{v:?}"
        );
    }

    #[test]
    fn noise_around_the_same_level_does_not_roll_back() {
        let v = run(
            100.0,
            &[90.0, 115.0, 105.0, 95.0, 118.0, 88.0, 110.0, 102.0, 97.0, 112.0],
        );
        assert_eq!(v.len(), 1);
        assert!(matches!(v[0], Verdict::Keep { .. }), "{v:?}");
    }

    #[test]
    fn failed_requests_after_a_switch_roll_it_back() {
        let v = run(100.0, &[10_000.0, 10_000.0, 10_000.0]);
        assert!(matches!(v.first(), Some(Verdict::RollBack { .. })), "{v:?}");
    }

    #[test]
    fn too_few_requests_after_the_switch_keep_it_after_three_intervals() {
        let t0 = Instant::now();
        let mut rc = RollbackChecker::new(true, 10 * S, 0.2, 3);
        rc.switched(Transport::Tcp, Transport::Quic, t0, &[100.0, 100.0, 100.0]);
        rc.observe(Transport::Quic, 500.0, t0 + S);
        assert_eq!(rc.poll(t0 + 20 * S), None);
        assert!(matches!(rc.poll(t0 + 30 * S), Some(Verdict::Keep { .. })));
        assert!(!rc.checking());
    }

    #[test]
    fn a_verifying_checker_asks_for_the_old_protocol_and_rolls_back_only_if_it_is_better_now() {
        let t0 = Instant::now();
        for (old_now, back) in [(120.0, true), (200.0, false)] {
            let mut rc = RollbackChecker::new(true, 10 * S, 0.2, 3).verifying(true);
            for i in 0..10 {
                rc.observe(Transport::Tcp, 100.0, t0 + i * S);
            }
            rc.switched(Transport::Tcp, Transport::Quic, t0 + 10 * S, &[]);
            // After the switch QUIC costs 150 on average.
            let mut verdict = None;
            for (i, c) in [140.0, 140.0, 150.0, 150.0, 160.0, 160.0, 160.0].iter().enumerate() {
                verdict = verdict.or(rc.observe(Transport::Quic, *c, t0 + 10 * S + (i as u32 + 1) * S));
            }
            let verdict = verdict.or(rc.poll(t0 + 21 * S));
            assert!(
                matches!(verdict, Some(Verdict::Verify { to: Transport::Tcp, before, .. }) if before == 100.0),
                "{verdict:?}"
            );
            assert!(rc.checking(), "a verification keeps the switch on probation");
            let tv = t0 + 21 * S;
            let asks: Vec<_> = std::iter::from_fn(|| rc.next_verify(tv)).collect();
            let (tcp, quic) = (Transport::Tcp, Transport::Quic);
            let ms = Duration::from_millis;
            assert_eq!(
                asks,
                vec![
                    (1, 1, tcp),
                    (1, 2, quic),
                    (1, 3, tcp),
                    (1, 4, quic),
                    (1, 5, tcp),
                    (1, 6, quic)
                ]
            );
            assert_eq!(
                rc.observe_verify(2, tcp, old_now, old_now, tv + ms(1)),
                None,
                "another verification's result"
            );
            // The new protocol, measured in the same requests' company, costs 160.
            for _ in 0..3 {
                assert_eq!(rc.observe_verify(1, quic, 160.0, 160.0, tv + ms(160)), None);
            }
            assert_eq!(
                rc.observe_verify(1, quic, 1.0, 1.0, tv + ms(170)),
                None,
                "beyond the slots issued"
            );
            assert_eq!(rc.observe_verify(1, tcp, old_now, old_now, tv + ms(200)), None);
            assert_eq!(rc.observe_verify(1, tcp, old_now, old_now, tv + ms(200)), None);
            let v = rc.observe_verify(1, tcp, old_now, old_now, tv + ms(200));
            assert_eq!(
                v,
                Some(Verdict::Verified {
                    to: Transport::Tcp,
                    rolled_back: back,
                    old: old_now,
                    current: 160.0,
                    early: false,
                })
            );
            assert!(!rc.checking());
        }
    }

    /// A verifying checker after a TCP -> QUIC switch at `t0` (before: 100 each) whose
    /// QUIC requests cost 500: at `t0` + 10 s it asks for a verification.
    fn verifying_at_10s(t0: Instant) -> RollbackChecker {
        let mut rc = RollbackChecker::new(true, 10 * S, 0.2, 3).verifying(true);
        rc.switched(Transport::Tcp, Transport::Quic, t0, &[100.0, 100.0, 100.0]);
        for i in 1..=3 {
            rc.observe(Transport::Quic, 500.0, t0 + i * S);
        }
        assert!(matches!(rc.poll(t0 + 10 * S), Some(Verdict::Verify { .. })));
        rc
    }

    #[test]
    fn an_unanswered_verification_is_given_up_after_an_interval_and_the_switch_stands() {
        let t0 = Instant::now();
        let mut rc = verifying_at_10s(t0);
        assert!(rc.next_verify(t0 + 10 * S).is_some());
        assert_eq!(rc.poll(t0 + 15 * S), None);
        assert!(matches!(rc.poll(t0 + 21 * S), Some(Verdict::Keep { .. })));
        assert!(!rc.checking());
    }

    #[test]
    fn a_partly_answered_verification_is_judged_after_an_interval_on_what_it_has() {
        let t0 = Instant::now();
        let mut rc = verifying_at_10s(t0);
        let asks: Vec<_> = std::iter::from_fn(|| rc.next_verify(t0 + 10 * S)).collect();
        assert_eq!(asks.len(), VERIFY_SLOTS);
        assert_eq!(rc.observe_verify(1, Transport::Tcp, 100.0, 100.0, t0 + 11 * S), None);
        assert_eq!(rc.observe_verify(1, Transport::Quic, 400.0, 400.0, t0 + 11 * S), None);
        assert_eq!(rc.poll(t0 + 15 * S), None);
        assert_eq!(
            rc.poll(t0 + 21 * S),
            Some(Verdict::Verified {
                to: Transport::Tcp,
                rolled_back: true,
                old: 100.0,
                current: 400.0,
                early: false,
            })
        );
        assert!(!rc.checking());
    }

    #[test]
    fn a_new_protocol_that_takes_too_long_to_answer_its_verification_is_rolled_back_early() {
        let ms = Duration::from_millis;
        let (tcp, quic) = (Transport::Tcp, Transport::Quic);
        let t0 = Instant::now();
        let mut rc = verifying_at_10s(t0);
        let tv = t0 + 10 * S;
        assert_eq!(std::iter::from_fn(|| rc.next_verify(tv)).count(), VERIFY_SLOTS);
        // TCP answers in 100 ms each, QUIC once in 150 ms; two QUIC requests still run.
        for _ in 0..3 {
            assert_eq!(rc.observe_verify(1, tcp, 100.0, 100.0, tv + ms(100)), None);
        }
        assert_eq!(rc.observe_verify(1, quic, 150.0, 150.0, tv + ms(150)), None);
        // At 200 ms QUIC's mean is at least (150 + 200 + 200) / 3 = 183 < 2 x 100: wait.
        assert_eq!(rc.poll(tv + ms(200)), None);
        assert!(rc.checking());
        // At 300 ms it is at least (150 + 300 + 300) / 3 = 250 > 200: back to TCP now.
        assert_eq!(
            rc.poll(tv + ms(300)),
            Some(Verdict::Verified {
                to: tcp,
                rolled_back: true,
                old: 100.0,
                current: 250.0,
                early: true,
            })
        );
        assert!(!rc.checking());
    }

    #[test]
    fn a_disabled_checker_never_checks() {
        let t0 = Instant::now();
        let mut rc = RollbackChecker::new(false, 10 * S, 0.2, 3);
        rc.switched(Transport::Tcp, Transport::Quic, t0, &[1.0, 1.0, 1.0]);
        assert!(!rc.checking());
        assert_eq!(rc.observe(Transport::Quic, 1e9, t0 + 11 * S), None);
    }
}
