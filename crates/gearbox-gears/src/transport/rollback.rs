//! The Rollback Checker (seed 000, §III-E, §IV-E4): after a switch, compare the
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
//! What a rollback verdict does is the gear's: WiseTrans-v2 by default explores again
//! instead of going back (`TransportConfig::rollback_reexplore`).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::Transport;

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

/// Watches switches and decides on rollbacks.
#[derive(Debug, Clone)]
pub struct RollbackChecker {
    enabled: bool,
    interval: Duration,
    deterioration: f64,
    min_requests: usize,
    /// Recent exploitation requests: (finished at, protocol, cost), at most one interval old.
    recent: VecDeque<(Instant, Transport, f64)>,
    check: Option<Check>,
}

/// Most recent requests kept for the "before" side.
const MAX_RECENT: usize = 512;

impl RollbackChecker {
    /// A checker (`enabled = false`: never rolls back).
    pub fn new(enabled: bool, interval: Duration, deterioration: f64, min_requests: usize) -> Self {
        RollbackChecker {
            enabled,
            interval,
            deterioration,
            min_requests: min_requests.max(1),
            recent: VecDeque::new(),
            check: None,
        }
    }

    /// Whether a check is running (a switch is on probation).
    pub fn checking(&self) -> bool {
        self.check.is_some()
    }

    /// A protocol switch `from` → `to` happened at `now`; `probe_costs` are the probe
    /// results of `from` if an exploration led to it. Starts a check (if enabled and
    /// the before side has enough requests).
    pub fn switched(&mut self, from: Transport, to: Transport, now: Instant, probe_costs: &[f64]) {
        self.check = None;
        if !self.enabled || from == to {
            return;
        }
        self.trim(now);
        let (mut sum, mut n) = (0.0, 0usize);
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

    /// Judges a check whose interval is over (call on every decision too, so a check
    /// ends even when requests stop).
    pub fn poll(&mut self, now: Instant) -> Option<Verdict> {
        let c = self.check.as_ref()?;
        let elapsed = now.saturating_duration_since(c.at);
        if elapsed < self.interval {
            return None;
        }
        let before = c.before_sum / c.before_n as f64;
        let verdict = if c.after_n >= self.min_requests {
            let after = c.after_sum / c.after_n as f64;
            if after > before * (1.0 + self.deterioration) {
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
    fn a_disabled_checker_never_checks() {
        let t0 = Instant::now();
        let mut rc = RollbackChecker::new(false, 10 * S, 0.2, 3);
        rc.switched(Transport::Tcp, Transport::Quic, t0, &[1.0, 1.0, 1.0]);
        assert!(!rc.checking());
        assert_eq!(rc.observe(Transport::Quic, 1e9, t0 + 11 * S), None);
    }
}
