//! Hedging a slow QUIC request over TCP: the client's silent-path retry
//! (`crate::silence`) extended from a path that answers nothing to one that answers
//! slowly.
//!
//! The rule. A request that the transport gear sent over QUIC in `auto` (so TCP is its
//! fallback) and that is idempotent ([`crate::Request::is_idempotent`]) is sent a second
//! time over TCP (HTTP/2, or HTTP/1.1 where the server speaks only that) when it has not
//! completed [`HedgeRule::delay`] after its start, while the QUIC copy goes on; the first
//! copy to complete is the answer and the other is cancelled (its future dropped: an
//! HTTP/3 stream dropped mid-exchange is stopped with QUIC's STOP_SENDING, quinn's
//! `RecvStream` drop, and the pooled QUIC connection carries on). At most one hedge per
//! request. The delay is
//!
//! `D = max(floor, factor × max(TCP's median, QUIC's median))`, each the median of the
//! origin's last `samples` successful completion times on that protocol,
//!
//! with [`DEFAULT_FACTOR`] = 2, [`DEFAULT_FLOOR`] = 300 ms and [`DEFAULT_SAMPLES`] = 5:
//!
//! - **What "slow" is measured against: TCP at the same origin.** The hedge goes over
//!   TCP, so what matters is whether TCP would now be done; the client keeps the
//!   completion times of the origin's last few successful TCP requests (any mode: a
//!   gear's TCP choices, its probes, fixed TCP requests), the TCP part only of a request
//!   that was retried or hedged onto TCP. The median, not the mean, so one handshake or
//!   one queued request does not move it. No TCP request completed at the origin yet:
//!   **no hedge**. Nothing says TCP works there or what it costs, and the gears never
//!   reach QUIC without TCP samples (WiseTrans-v1 starts on TCP, v2 probes both on an
//!   origin's first click); a QUIC path that answers nothing is the silence rule's.
//! - **... and against QUIC's own recent costs.** A path that slows for both protocols
//!   (a lossy or slower phase of a mobile path) makes QUIC's requests slower than TCP's
//!   older samples without TCP being any faster now: against TCP alone the hedge then
//!   duplicates requests that QUIC still answers first. Measured in the WiseTrans
//!   `plain` class (5G, then lossy 4G, then high-speed rail; docs/wisetrans.md "The hedge
//!   over TCP"): 18.2% of v2's requests hedged, TCP answered 1% of them, the edge wrote
//!   21.1% more bytes. So the delay is taken from the larger of the two medians: a hedge
//!   starts only where this request is slow against what either protocol took at the
//!   origin lately, which a throttle or a blackhole of UDP is (QUIC's median is from
//!   before it) and a path slowing for everything is not, once QUIC's median has its
//!   samples. No QUIC sample yet: TCP's median alone, as before.
//! - **factor 2.** "The Tail at Scale" (Dean and Barroso, CACM 2013), section "Hedged
//!   requests", defers the second copy until the first has been outstanding longer than
//!   the 95th-percentile expected latency of its kind of request, which bounds the extra
//!   load to about 5%. The expected latency here is the other protocol's, whose recent
//!   median is what the client knows; twice the median lies between TCP's median and
//!   its p99 on the evaluation's workload (clicks of responses under 50 kB: p99 2.5-3×
//!   the median in `block` and `mobile`, docs/wisetrans.md "On the fixed client"), about
//!   where the paper puts its delay. A hedge then starts where QUIC already does worse
//!   than TCP would usually have done twice over, not where the two are merely close. A
//!   larger factor hedges later and less, a smaller one sooner and more often,
//!   duplicating bytes on paths where QUIC is only a little slower.
//! - **floor 300 ms**, the same floor the race puts under TCP's head start
//!   (`crate::race::RACE_MIN_DELAY`, Chromium's `kDefaultRTT`): on short, fast paths a
//!   few milliseconds of scheduling would otherwise hedge requests that are fine.
//!
//! Where it applies: only `auto` requests whose gear chose QUIC, with
//! [`crate::ClientConfig::hedge`] on. Never a fixed transport (TCP-only and QUIC-only
//! are static baselines), never the race: the race is the Chromium baseline, and
//! Chromium has no such rule (it races only connection setups, `crate::race`, and
//! retries a request over TCP only after a QUIC error), so hedging there would make the
//! baseline something browsers do not do.
//!
//! The record (`crate::client`): `hedged` names the protocol the hedge ran on
//! (`h2`/`h1`), `hedge_at_ms` when it started (ms from the request's start), `protocol`
//! the winner's, and the decision ends in `;hedge=tcp-won`, `;hedge=quic-won`,
//! `;hedge=tcp-failed` (the hedge failed and QUIC went on alone; a QUIC failure then
//! goes to the fallback rules as without a hedge), `;hedge=quic-failed` (QUIC failed
//! while the hedge ran and the hedge answered; QUIC is marked broken as by the fallback
//! rules) or `;hedge=both-failed` (the hedge's error is the request's; no retry after it).
//!
//! [`RecentCosts`] keeps the samples (one per protocol in the client) and [`HedgeRule`]
//! computes the delay (sans-IO, tested here); `crate::client` runs the race of the two
//! copies.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// The delay is this many times the larger of TCP's and QUIC's recent median completion
/// times at the origin.
pub const DEFAULT_FACTOR: f64 = 2.0;
/// No hedge starts sooner than this after the request.
pub const DEFAULT_FLOOR: Duration = Duration::from_millis(300);
/// Completion times kept per origin and protocol.
pub const DEFAULT_SAMPLES: usize = 5;

/// When a QUIC request is hedged over TCP (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HedgeRule {
    /// The delay is `factor` times the larger recent median completion time.
    pub factor: f64,
    /// ... and never less than this.
    pub floor: Duration,
}

impl Default for HedgeRule {
    fn default() -> Self {
        HedgeRule {
            factor: DEFAULT_FACTOR,
            floor: DEFAULT_FLOOR,
        }
    }
}

impl HedgeRule {
    /// The rule with another factor (must be finite and > 0).
    pub fn with_factor(factor: f64) -> Option<Self> {
        (factor.is_finite() && factor > 0.0).then_some(HedgeRule {
            factor,
            ..HedgeRule::default()
        })
    }

    /// How long after its start a QUIC request is hedged, given TCP's and QUIC's recent
    /// median completion times at the origin in ms (TCP's None: not known, no hedge;
    /// QUIC's None: TCP's alone).
    pub fn delay(&self, tcp_median_ms: Option<f64>, quic_median_ms: Option<f64>) -> Option<Duration> {
        let usable = |m: &f64| m.is_finite() && *m >= 0.0;
        let tcp = tcp_median_ms.filter(usable)?;
        let median = quic_median_ms.filter(usable).map_or(tcp, |q| q.max(tcp));
        let d = Duration::try_from_secs_f64(self.factor * median / 1e3).unwrap_or(Duration::MAX);
        Some(d.max(self.floor))
    }
}

/// The last [`DEFAULT_SAMPLES`] completion times of one protocol's successful requests,
/// per origin.
#[derive(Debug, Default)]
pub struct RecentCosts {
    origins: HashMap<String, VecDeque<f64>>,
}

impl RecentCosts {
    /// An empty memory.
    pub fn new() -> Self {
        RecentCosts::default()
    }

    /// A request to `origin` completed in `ms`.
    pub fn observe(&mut self, origin: &str, ms: f64) {
        if !(ms.is_finite() && ms >= 0.0) {
            return;
        }
        let q = self.origins.entry(origin.to_string()).or_default();
        q.push_back(ms);
        while q.len() > DEFAULT_SAMPLES {
            q.pop_front();
        }
    }

    /// The median of `origin`'s kept samples (the mean of the middle two for an even
    /// count); None without any.
    pub fn median(&self, origin: &str) -> Option<f64> {
        let q = self.origins.get(origin).filter(|q| !q.is_empty())?;
        let mut v: Vec<f64> = q.iter().copied().collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        Some(if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_tcp_sample_means_no_hedge() {
        let costs = RecentCosts::new();
        assert_eq!(costs.median("a:443"), None);
        assert_eq!(HedgeRule::default().delay(costs.median("a:443"), None), None);
        assert_eq!(
            HedgeRule::default().delay(None, Some(100.0)),
            None,
            "QUIC's median alone: no hedge"
        );
    }

    #[test]
    fn the_delay_is_twice_the_median_of_the_last_five_and_at_least_the_floor() {
        let mut costs = RecentCosts::new();
        // The first two fall out of the window of five.
        for ms in [5_000.0, 5_000.0, 200.0, 180.0, 900.0, 210.0, 190.0] {
            costs.observe("a:443", ms);
        }
        assert_eq!(costs.median("a:443"), Some(200.0));
        assert_eq!(costs.median("b:443"), None, "per origin");
        let rule = HedgeRule::default();
        assert_eq!(
            rule.delay(costs.median("a:443"), None),
            Some(Duration::from_millis(400))
        );
        // Fast TCP: the floor.
        assert_eq!(rule.delay(Some(40.0), None), Some(DEFAULT_FLOOR));
        assert_eq!(
            HedgeRule::with_factor(3.0).unwrap().delay(Some(200.0), None),
            Some(Duration::from_millis(600))
        );
        assert_eq!(HedgeRule::with_factor(0.0), None);
        assert_eq!(HedgeRule::with_factor(f64::NAN), None);
    }

    #[test]
    fn an_even_count_takes_the_middle_two_and_nonsense_is_ignored() {
        let mut costs = RecentCosts::new();
        costs.observe("a:443", 100.0);
        costs.observe("a:443", f64::NAN);
        costs.observe("a:443", -1.0);
        costs.observe("a:443", 300.0);
        assert_eq!(costs.median("a:443"), Some(200.0));
    }

    #[test]
    fn the_delay_follows_the_slower_of_the_two_protocols_recent_medians() {
        let rule = HedgeRule::default();
        // QUIC has lately been slower than TCP (the path slowed for both): its median sets it.
        assert_eq!(rule.delay(Some(200.0), Some(500.0)), Some(Duration::from_millis(1000)));
        // QUIC faster than TCP (a throttle has not shown in its samples yet): TCP's.
        assert_eq!(rule.delay(Some(200.0), Some(50.0)), Some(Duration::from_millis(400)));
        assert_eq!(
            rule.delay(Some(200.0), Some(f64::NAN)),
            Some(Duration::from_millis(400))
        );
        assert_eq!(rule.delay(Some(40.0), Some(60.0)), Some(DEFAULT_FLOOR));
    }
}
