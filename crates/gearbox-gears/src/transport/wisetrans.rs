//! WiseTrans-v1 and WiseTrans-v2 (WiseTrans §III-A workflow, §IV-A).
//!
//! Per origin, every finished request goes to the Feature Extractor; when it ran on the
//! current protocol, the Network Monitor scores the current protocol's window: the
//! probability that the other protocol would be faster (the score is cached, so a
//! decision itself evaluates nothing).
//!
//! **v1** (§IV-A1: "uses an offline-trained ML-based protocol classifier to directly
//! select the protocol"): switch to the other protocol when the score exceeds
//! `v1_switch_threshold` (0.5), provided the current protocol has at least
//! `min_window_requests` requests in the window and the last switch is at least
//! `min_dwell_ms` old. The dwell is the hysteresis: a switch is judged on at least one
//! click burst of its own requests (§III-D: 13.5 requests in about 1.5 s), the switching
//! rate stays near the paper's 1–3% of requests (Fig. 12b) instead of the strawman's
//! 2–3× more, and while a rollback check runs nothing else switches (the checker must
//! see the interval after the switch undisturbed). After a rollback, v1 holds for
//! `rollback_hold_ms`: its model was just wrong on this path.
//!
//! **v2** (§III-D): the Probe Agent explores (a) on the first request to an origin,
//! (b) when the local address of the origin's connections changes (a new path), and
//! (c) when |score − history score| exceeds `explore_score_delta`, the history score
//! being the first score after the last exploration; (c) at most once per
//! `min_explore_interval_ms`: a jump seen sooner is kept and explores on the first
//! request after the interval (a click issues its whole burst before any of it
//! finishes, so waiting for a fresh score would cost the burst). The exploration's selection is then used until the next
//! one. With `probe_balance` (the default) requests issued after the six probe slots
//! while the exploration runs are the exploration's extras (`why=probe-extra`, up to
//! `probe_max_extra`), see [`super::probe`]; with it off, the paper's rule: they use the
//! last selected protocol (`why=probe-wait`). The Rollback Checker watches every switch,
//! in both versions, unless disabled. When it finds a switch made things worse it first
//! verifies (by default, `TransportConfig::rollback_verify`): the next six requests go
//! alternately to the old and the new protocol (`phase=probe;why=verify-<k>of6;ex=<id>`,
//! the first also saying `suspect=<before>-><after>`), and the gear goes back only if the
//! old protocol's three beat the new one's (`verify=old:<cost>/new:<cost>`, with
//! `rollback=` when it goes back), or at once when the new protocol's verification
//! requests take more than twice as long as the old one's (`early=rct`, see
//! [`super::rollback`]). `rollback_verify = false`: back at once, the paper's rule.
//!
//! **mlp** ([`WiseTrans::mlp`], §IV-E2 footnote 4 run as a policy): v1 exactly, with the
//! Network Monitor's two XGBoost models replaced by Table II's 128-64 MLP classifiers
//! (`mlp-tcp.json`, `mlp-quic.json`, [`super::monitor::MLP_PREFIX`]); reasons say `mlp`.
//! What the comparison isolates is the classifier: features, threshold, dwell, rollback
//! and fallback are v1's.
//!
//! Without both models (missing directory, file, or a broken model), the gear does
//! nothing of the above: it logs once (at load) and chooses TCP, the web's usual
//! default, with `phase=fallback;why=no-model` in every reason and the problem itself
//! in the first one (`detail=...`). A request never fails because of the model.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use gearbox_gear_api::{ClientRecord, Decision, DecisionId, Protocol, TransportChoice, TransportGear};

use super::features::FeatureExtractor;
use super::jump::CostLog;
use super::monitor::{NetworkMonitor, MLP_PREFIX};
use super::probe::{ProbeAgent, ProbeChoice, Trigger, PROBE_SLOTS};
use super::rollback::{RollbackChecker, Verdict, VERIFY_SLOTS};
use super::{origin_key, request_cost, request_rct, Mode, Reason, Transport, TransportConfig};

/// Which WiseTrans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// The monitor decides directly.
    V1,
    /// The monitor's score change triggers live experiments.
    V2,
}

impl Version {
    /// The mode name written first in every reason.
    pub fn mode(self) -> &'static str {
        match self {
            Version::V1 => "wisetrans-v1",
            Version::V2 => "wisetrans-v2",
        }
    }
}

/// What happened since the last decision, for the next reason to mention (all of it:
/// an exploration and a rollback verification can end in the same burst).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Event {
    /// An exploration ended and selected this (with its two values, and the number of
    /// costs behind each when extras took part).
    Picked {
        tcp: f64,
        quic: f64,
        n: Option<(usize, usize)>,
        /// An early verdict (the values are mean completion times, the loser's a bound).
        early: Option<Transport>,
        /// The back-off factor of the next score-triggered exploration, when over 1.
        backoff: u32,
    },
    /// The rollback checker undid a switch.
    RolledBack { before: f64, after: f64 },
    /// The rollback checker found a switch made things worse and verifies it.
    Suspect { before: f64, after: f64 },
    /// A verification ended: each protocol's mean over its verification requests
    /// (early: completion times, the new one's a lower bound).
    Verified {
        old: f64,
        current: f64,
        rolled_back: bool,
        early: bool,
    },
    /// An exploration was abandoned.
    Abandoned,
    /// A request on the current protocol failed or stalled and the gear left it at once
    /// (`what`: the error kind, `retried`, `broken` or `hedged`, see [`failure_of`]).
    FailedOver { from: Transport, what: &'static str },
    /// The cost-jump rule ([`super::jump`]) left the protocol: median round trips of
    /// its latest requests, of its own history and of the other protocol's last known.
    Jumped {
        from: Transport,
        recent: f64,
        history: Option<f64>,
        other: f64,
    },
}

/// Everything WiseTrans knows about one origin.
#[derive(Debug)]
struct OriginState {
    features: FeatureExtractor,
    /// The last selected protocol.
    current: Transport,
    /// Latest score of the current protocol's window.
    score: Option<f64>,
    /// v2: the score after the last exploration.
    history_score: Option<f64>,
    /// v1: no switch before this.
    hold_until: Option<Instant>,
    /// v2: end of the last exploration.
    last_explore: Option<Instant>,
    /// v2: whether this origin has been explored (false: the next request explores).
    explored: bool,
    /// v2: an exploration waiting for the next request.
    pending: Option<Trigger>,
    probe: ProbeAgent,
    rollback: RollbackChecker,
    /// What each tagged decision not yet answered was part of, by the id its record
    /// will carry back (oldest first; see [`Tag`]).
    tags: BTreeMap<DecisionId, Tag>,
    /// No failover (see [`failure_of`]) before this: two protocols failing in turn do not
    /// flap faster than the dwell.
    failover_hold: Option<Instant>,
    /// Each protocol's recent requests in round trips, for the cost-jump rule.
    costs: CostLog,
    /// v2: score-triggered explorations wait `min_explore_interval_ms` times this
    /// (doubled after a clear outcome, see `TransportConfig::explore_backoff_max`).
    backoff: u32,
    /// Local IP of the origin's last successful connection.
    local_ip: Option<String>,
    last_used: Instant,
    events: Vec<Event>,
}

/// The WiseTrans transport gear.
#[derive(Debug)]
pub struct WiseTrans {
    version: Version,
    /// The mode name written first in every reason (`version.mode()`, or `mlp`).
    mode: &'static str,
    cfg: TransportConfig,
    monitor: NetworkMonitor,
    origins: HashMap<String, OriginState>,
    /// The fallback's reason detail, until it has been said once.
    fallback_detail: Option<String>,
    /// The id of the next tagged decision (unique within this gear).
    next_id: u64,
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

impl WiseTrans {
    /// Loads the models from `model_dir` (see [`NetworkMonitor::load`]).
    pub fn load(version: Version, model_dir: Option<&Path>, cfg: TransportConfig) -> Self {
        Self::with_monitor(version, NetworkMonitor::load(model_dir), cfg)
    }

    /// The `mlp` mode: WiseTrans-v1 whose monitor is the MLP pair `mlp-tcp.json`,
    /// `mlp-quic.json` from `model_dir`; reasons start with `mlp`.
    pub fn mlp(model_dir: Option<&Path>, cfg: TransportConfig) -> Self {
        let monitor = NetworkMonitor::load_prefixed(model_dir, MLP_PREFIX);
        Self::with_monitor(Version::V1, monitor, cfg).named(Mode::Mlp.name())
    }

    /// With a monitor already built.
    pub fn with_monitor(version: Version, monitor: NetworkMonitor, cfg: TransportConfig) -> Self {
        let fallback_detail = monitor.unavailable().map(str::to_string);
        WiseTrans {
            version,
            mode: version.mode(),
            cfg,
            monitor,
            origins: HashMap::new(),
            fallback_detail,
            next_id: 1,
        }
    }

    /// Runs `monitor` from now on (a model polled from the control plane,
    /// [`super::swap`]). What the gear learned of each origin (windows, explorations,
    /// rollback checks, decisions awaiting their records) stays; each origin's cached score
    /// is dropped, so no decision uses the old model's score, and the next finished
    /// request on the current protocol is scored by the new model (for v2 a score far
    /// from the last exploration's then triggers one, as any score jump does).
    pub fn set_monitor(&mut self, monitor: NetworkMonitor) {
        self.fallback_detail = monitor.unavailable().map(str::to_string);
        self.monitor = monitor;
        for st in self.origins.values_mut() {
            st.score = None;
        }
    }

    /// The same gear writing `mode` first in its reasons (the behaviour is the version's).
    pub fn named(mut self, mode: &'static str) -> Self {
        self.mode = mode;
        self
    }

    /// The protocol currently selected for `origin` (None: never seen).
    pub fn selected(&self, origin: &str) -> Option<Transport> {
        self.origins.get(origin).map(|s| s.current)
    }

    /// The latest score for `origin`.
    pub fn score(&self, origin: &str) -> Option<f64> {
        self.origins.get(origin).and_then(|s| s.score)
    }

    fn fallback(&mut self) -> Decision<TransportChoice> {
        let detail = self.fallback_detail.take();
        let extra: Vec<(&'static str, &str)> = detail.iter().map(|d| ("detail", d.as_str())).collect();
        let reason = Reason {
            mode: self.mode,
            phase: "fallback",
            score: None,
            choice: TransportChoice::Tcp,
            why: "no-model",
            extra: &extra,
        };
        Decision::new(TransportChoice::Tcp, reason.render())
    }
}

/// The state of `origin`, made (and the least recently used origin dropped, if the map
/// is full) on first sight.
fn state_of<'a>(
    origins: &'a mut HashMap<String, OriginState>,
    c: &TransportConfig,
    origin: &str,
    now: Instant,
) -> &'a mut OriginState {
    if !origins.contains_key(origin) && origins.len() >= c.max_origins.max(1) {
        let oldest = origins.iter().min_by_key(|(_, s)| s.last_used).map(|(k, _)| k.clone());
        if let Some(k) = oldest {
            origins.remove(&k);
        }
    }
    let st = origins.entry(origin.to_string()).or_insert_with(|| OriginState {
        features: FeatureExtractor::new(ms(c.window_ms), c.window_max_requests),
        current: Transport::Tcp,
        score: None,
        history_score: None,
        hold_until: None,
        last_explore: None,
        explored: false,
        pending: None,
        probe: ProbeAgent::with_extras(
            ms(c.explore_timeout_ms),
            if c.probe_balance { c.probe_max_extra } else { 0 },
        )
        .early_verdicts(c.probe_early),
        rollback: RollbackChecker::new(
            c.rollback,
            ms(c.rollback_interval_ms),
            c.rollback_deterioration,
            c.rollback_min_requests,
        )
        .verifying(c.rollback_verify),
        tags: BTreeMap::new(),
        failover_hold: None,
        costs: CostLog::new(),
        backoff: 1,
        local_ip: None,
        last_used: now,
        events: Vec::new(),
    });
    st.last_used = now;
    st
}

/// Applies a rollback verdict to an origin's state.
fn apply_verdict(st: &mut OriginState, v: Verdict, now: Instant, cfg: &TransportConfig) {
    let to = match v {
        Verdict::Keep { .. } => return,
        Verdict::Verify { before, after, .. } => {
            st.events.push(Event::Suspect { before, after });
            return;
        }
        Verdict::Verified {
            to,
            rolled_back,
            old,
            current,
            early,
        } => {
            st.events.push(Event::Verified {
                old,
                current,
                rolled_back,
                early,
            });
            if !rolled_back {
                return;
            }
            to
        }
        Verdict::RollBack { to, before, after } => {
            st.events.push(Event::RolledBack { before, after });
            to
        }
    };
    st.current = to;
    st.score = None;
    st.history_score = None;
    // A score jump waiting for its exploration was measured on the protocol just left.
    if st.pending == Some(Trigger::ScoreJump) {
        st.pending = None;
    }
    st.hold_until = Some(now + ms(cfg.rollback_hold_ms));
}

fn fmt_cost(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.1}")
    } else {
        "inf".to_string()
    }
}

impl TransportGear for WiseTrans {
    fn choose(&mut self, origin: &str, now: Instant) -> Decision<TransportChoice> {
        if self.monitor.unavailable().is_some() {
            return self.fallback();
        }
        let (version, mode) = (self.version, self.mode);
        let cfg = &self.cfg;
        let st = state_of(&mut self.origins, cfg, origin, now);
        if let Some(v) = st.rollback.poll(now) {
            apply_verdict(st, v, now, cfg);
        }
        let why_buf: String;
        let mut extra: Vec<(&'static str, String)> = Vec::new();
        let mut tag: Option<Tag> = None;
        let (phase, choice, why): (&'static str, Transport, &str) = if let Some((id, k, to)) =
            st.rollback.next_verify(now)
        {
            why_buf = format!("verify-{k}of{VERIFY_SLOTS}");
            extra.push(("ex", id.to_string()));
            tag = Some(Tag::Verify { id });
            ("probe", to, why_buf.as_str())
        } else {
            match version {
                Version::V2 => {
                    if st.probe.expire(now) {
                        st.events.push(Event::Abandoned);
                        st.last_explore = Some(now);
                    }
                    if let Some(out) = st.probe.early(now) {
                        take_outcome(st, out, now, cfg);
                    }
                    if !st.explored && !st.probe.exploring() {
                        st.pending = Some(Trigger::NewOrigin);
                    }
                    if let (Some(trigger), false) = (st.pending, st.probe.exploring()) {
                        // A score jump waits out `min_explore_interval_ms` (bounded
                        // exploration); a new origin or path explores at once.
                        let interval = ms(cfg.min_explore_interval_ms) * st.backoff;
                        let due = trigger != Trigger::ScoreJump
                            || st
                                .last_explore
                                .is_none_or(|t| now.saturating_duration_since(t) >= interval);
                        if due {
                            st.pending = None;
                            st.explored = true;
                            st.probe.start(now, trigger, st.current);
                        }
                    }
                    match st.probe.choose(now) {
                        Some(ProbeChoice::Slot { id, slot, transport }) => {
                            why_buf = format!("probe-{slot}of{PROBE_SLOTS}");
                            extra.push(("ex", id.to_string()));
                            tag = Some(Tag::Slot { id, slot });
                            if let Some((_, trigger)) = st.probe.running() {
                                extra.push(("trigger", trigger.name().to_string()));
                            }
                            ("probe", transport, why_buf.as_str())
                        }
                        Some(ProbeChoice::Extra {
                            id,
                            extra: k,
                            transport,
                        }) => {
                            extra.push(("ex", id.to_string()));
                            extra.push(("extra", k.to_string()));
                            tag = Some(Tag::Extra { id, extra: k });
                            if let Some((_, trigger)) = st.probe.running() {
                                extra.push(("trigger", trigger.name().to_string()));
                            }
                            ("probe", transport, PROBE_EXTRA)
                        }
                        Some(ProbeChoice::Wait) => match st.probe.leader(now) {
                            Some(lead) => {
                                extra.push(("lead", lead.name().to_string()));
                                ("probe", lead, "probe-wait")
                            }
                            None => ("probe", st.current, "probe-wait"),
                        },
                        None => exploit_reason(st),
                    }
                }
                Version::V1 => {
                    let dwell_over = st.hold_until.is_none_or(|t| now >= t);
                    let current = st.current;
                    let enough = st.features.features(current, now).ok_requests >= cfg.min_window_requests;
                    match st.score {
                        Some(p) if p > cfg.v1_switch_threshold && enough && dwell_over && !st.rollback.checking() => {
                            let from = st.current;
                            st.current = from.other();
                            st.score = None;
                            st.hold_until = Some(now + ms(cfg.min_dwell_ms));
                            st.rollback.switched(from, st.current, now, &[]);
                            why_buf = format!("switch-p>{}", cfg.v1_switch_threshold);
                            ("exploit", st.current, why_buf.as_str())
                        }
                        Some(p) if p > cfg.v1_switch_threshold && !enough => ("warmup", st.current, "few-requests"),
                        Some(p) if p > cfg.v1_switch_threshold => {
                            if st.rollback.checking() {
                                ("check", st.current, "hold-check")
                            } else {
                                ("exploit", st.current, "hold-dwell")
                            }
                        }
                        _ => exploit_reason(st),
                    }
                }
            }
        };
        for event in std::mem::take(&mut st.events) {
            match event {
                Event::Picked {
                    tcp,
                    quic,
                    n,
                    early,
                    backoff,
                } => {
                    // An early verdict's loser is a lower bound.
                    let bound = |t: Transport| if early == Some(t.other()) { "+" } else { "" };
                    extra.push((
                        "picked",
                        format!(
                            "tcp:{}{}/quic:{}{}",
                            fmt_cost(tcp),
                            bound(Transport::Tcp),
                            fmt_cost(quic),
                            bound(Transport::Quic)
                        ),
                    ));
                    if let Some((n_tcp, n_quic)) = n {
                        extra.push(("n", format!("tcp:{n_tcp}/quic:{n_quic}")));
                    }
                    if early.is_some() {
                        extra.push(("early", "rct".to_string()));
                    }
                    if backoff > 1 {
                        extra.push(("backoff", format!("x{backoff}")));
                    }
                }
                Event::RolledBack { before, after } => {
                    extra.push(("rollback", format!("{}->{}", fmt_cost(before), fmt_cost(after))));
                }
                Event::Suspect { before, after } => {
                    extra.push(("suspect", format!("{}->{}", fmt_cost(before), fmt_cost(after))));
                }
                Event::Verified {
                    old,
                    current,
                    rolled_back,
                    early,
                } => {
                    let at_least = if early { "+" } else { "" };
                    extra.push((
                        "verify",
                        format!("old:{}/new:{}{at_least}", fmt_cost(old), fmt_cost(current)),
                    ));
                    if early {
                        extra.push(("early", "rct".to_string()));
                    }
                    if rolled_back {
                        extra.push(("rollback", "verified".to_string()));
                    }
                }
                Event::Abandoned => extra.push(("abandoned", "probe-timeout".to_string())),
                Event::FailedOver { from, what } => extra.push(("failover", format!("{}:{what}", from.name()))),
                Event::Jumped {
                    from,
                    recent,
                    history,
                    other,
                } => extra.push((
                    "jump",
                    format!(
                        "{}:{}/was:{}/{}:{}",
                        from.name(),
                        fmt_cost(recent),
                        history.map_or("-".to_string(), fmt_cost),
                        from.other().name(),
                        fmt_cost(other)
                    ),
                )),
            }
        }
        let extra_refs: Vec<(&'static str, &str)> = extra.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let reason = Reason {
            mode,
            phase,
            score: st.score,
            choice: choice.into(),
            why,
            extra: &extra_refs,
        };
        let decision = Decision::new(choice.into(), reason.render());
        match tag {
            Some(tag) => {
                let id = DecisionId(self.next_id);
                self.next_id += 1;
                // Every request ends in a record, so a tag waits only for its answer; the
                // bound keeps a data plane that loses records from growing the map.
                let cap = 2 * (PROBE_SLOTS + VERIFY_SLOTS + cfg.probe_max_extra);
                while st.tags.len() >= cap {
                    st.tags.pop_first();
                }
                st.tags.insert(id, tag);
                decision.with_id(id)
            }
            None => decision,
        }
    }

    fn observe(&mut self, record: &ClientRecord, now: Instant) {
        if self.monitor.unavailable().is_some() {
            return;
        }
        let version = self.version;
        let cfg = &self.cfg;
        let origin = origin_key(&record.url);
        let st = state_of(&mut self.origins, cfg, &origin, now);
        let transport = st.features.observe(record, now);
        let cost = request_cost(record, cfg);
        // A request the client carried over TCP because QUIC failed under it (or was
        // broken) is a failed QUIC request to every judge below; its TCP time is not a
        // measurement of either protocol. A hedge TCP answered is a QUIC request that had
        // not answered when the hedge did: it costs QUIC at least its own cost (the time
        // to the hedge's answer), which is what the judges get (a lower bound, not the
        // failure's penalty: QUIC still worked, slowly).
        let failure = failure_of(record);
        let hedge_won = matches!(failure, Some((_, "hedged")));
        let (transport, cost) = match failure {
            Some((failed, _)) if failed != transport && hedge_won => (failed, cost),
            Some((failed, _)) if failed != transport => (failed, cfg.failed_request_cost_ms),
            _ => (transport, cost),
        };
        // The record's RTT is the connection's that answered: not QUIC's after a hedge.
        let rtt = record.transport.as_ref().map(|s| s.rtt_ms).filter(|_| !hedge_won);
        let failed = (failure.is_some() && !hedge_won) || record.error.is_some();
        st.costs.record(transport, cost, rtt, failed, now);

        // A new local address on a successful request is a new path.
        if record.error.is_none() && !record.local_addr.is_empty() {
            let ip = local_ip(&record.local_addr);
            if st.local_ip.as_deref().is_some_and(|old| old != ip) && version == Version::V2 {
                st.pending = Some(Trigger::PathChange);
                st.backoff = 1;
            }
            if st.local_ip.as_deref() != Some(ip) {
                st.local_ip = Some(ip.to_string());
            }
        }

        // The answer to a tagged decision goes where the decision came from, and nowhere
        // else: a verification request's to the Rollback Checker, a probe slot's or
        // extra's to the Probe Agent.
        let tag = record.decision_id.and_then(|id| st.tags.remove(&id));
        if let Some(Tag::Verify { id }) = tag {
            let rct = request_rct(record, cfg);
            if let Some(v) = st.rollback.observe_verify(id, transport, cost, rct, now) {
                apply_verdict(st, v, now, cfg);
            }
            return;
        }
        if let Some(probe) = tag {
            if version == Version::V2 {
                let rct = request_rct(record, cfg);
                let out = match probe {
                    Tag::Slot { id, slot } => st.probe.observe_timed(id, slot, cost, rct, now),
                    Tag::Extra { id, extra } => st.probe.observe_extra_timed(id, extra, cost, rct, now),
                    Tag::Verify { .. } => None,
                };
                if let Some(out) = out {
                    take_outcome(st, out, now, cfg);
                }
            }
            return;
        }

        // Failover: a failed or stalled request on the current protocol is the strongest
        // evidence a monitor gets; leave the protocol at once (whatever the model's score
        // or a running check) and let the Rollback Checker judge the move with the
        // failure on the side of the protocol left.
        if let Some((failed, what)) = failure {
            let free = st.failover_hold.is_none_or(|t| now >= t);
            if cfg.switch_on_failure && failed == st.current && free && !st.probe.exploring() {
                let from = st.current;
                leave(st, now, cfg, &[cost]);
                st.events.push(Event::FailedOver { from, what });
                return;
            }
        }

        if let Some(v) = st.rollback.observe(transport, cost, now) {
            apply_verdict(st, v, now, cfg);
        }
        if transport != st.current {
            return;
        }

        // Cost jump ([`super::jump`]): the current protocol's latest requests take many
        // more round trips than before and than the other protocol's last known ones;
        // leave it as the failover does (the same hold), on probation.
        let free = st.failover_hold.is_none_or(|t| now >= t);
        if cfg.switch_on_cost_jump && free && !st.probe.exploring() && !st.rollback.verification_running() {
            if let Some(j) = st.costs.check(transport, now, ms(cfg.window_ms), cfg.cost_jump_factor) {
                let from = st.current;
                leave(st, now, cfg, &j.costs);
                st.events.push(Event::Jumped {
                    from,
                    recent: j.recent,
                    history: j.history,
                    other: j.other,
                });
                return;
            }
        }
        let f = st.features.features(transport, now);
        st.score = if f.ok_requests >= 1 {
            self.monitor.score(transport, &f)
        } else {
            None
        };
        if version == Version::V2 && !st.probe.exploring() && f.ok_requests >= cfg.min_window_requests {
            match (st.score, st.history_score) {
                (Some(s), None) => st.history_score = Some(s),
                (Some(s), Some(h)) if (s - h).abs() > cfg.explore_score_delta && st.pending.is_none() => {
                    st.pending = Some(Trigger::ScoreJump);
                }
                _ => {}
            }
        }
    }
}

/// Leaves the current protocol at once (the failover, the cost jump): the other one from
/// now on, held for `min_dwell_ms`, on probation with the Rollback Checker with `costs`
/// (the requests that made the gear leave) on the left protocol's side.
fn leave(st: &mut OriginState, now: Instant, cfg: &TransportConfig, costs: &[f64]) {
    let from = st.current;
    st.current = from.other();
    st.score = None;
    st.history_score = None;
    if st.pending == Some(Trigger::ScoreJump) {
        st.pending = None;
    }
    st.hold_until = Some(now + ms(cfg.min_dwell_ms));
    st.failover_hold = Some(now + ms(cfg.min_dwell_ms));
    st.rollback.switched(from, st.current, now, costs);
}

/// Puts an exploration's outcome into effect (v2): the selected protocol from now on,
/// the Rollback Checker watching a switch, and the back-off of score-triggered
/// explorations doubled after a clear outcome (up to `explore_backoff_max`), reset
/// after a close one.
fn take_outcome(st: &mut OriginState, out: super::probe::Outcome, now: Instant, cfg: &TransportConfig) {
    let previous = st.current;
    st.current = out.selected;
    st.last_explore = Some(now);
    st.history_score = None;
    st.score = None;
    st.backoff = if out.clear() {
        (st.backoff.saturating_mul(2)).min(cfg.explore_backoff_max.max(1))
    } else {
        1
    };
    st.events.push(Event::Picked {
        tcp: out.tcp_cost,
        quic: out.quic_cost,
        n: out
            .had_extras()
            .then(|| (out.costs(Transport::Tcp).len(), out.costs(Transport::Quic).len())),
        early: out.early.then_some(out.selected),
        backoff: st.backoff,
    });
    if out.selected != previous {
        st.rollback.switched(previous, out.selected, now, &out.costs(previous));
    }
}

/// The protocol a record shows failing or stalling, and how: the one it ran on when it
/// has an `error` (its kind); QUIC when the client retried it over TCP after QUIC failed
/// under it (`retried_from = "h3"`: `retried`) or sent it over TCP because QUIC was
/// marked broken (`fallback=quic-broken` in the client's part of the decision: `broken`)
/// (docs/client.md "Falling back from QUIC"); QUIC too when the client hedged a slow
/// QUIC request over TCP and the hedge answered first (`hedged` set and `protocol` not
/// `h3`: `hedged`, docs/client.md "Hedging a slow QUIC request"): QUIC was then still
/// running after TCP had started late and finished, a stall in all but name.
pub(crate) fn failure_of(record: &ClientRecord) -> Option<(Transport, &'static str)> {
    if record.retried_from == Some(Protocol::H3) {
        return Some((Transport::Quic, "retried"));
    }
    if record.hedged.is_some() && record.protocol != Protocol::H3 {
        return Some((Transport::Quic, "hedged"));
    }
    if record
        .decision
        .as_deref()
        .is_some_and(|d| d.contains(";fallback=quic-broken"))
    {
        return Some((Transport::Quic, "broken"));
    }
    let kind = record.error.as_deref()?;
    let on = match record.protocol {
        Protocol::H3 => Transport::Quic,
        Protocol::H1 | Protocol::H2 => Transport::Tcp,
    };
    // A static set of names, so events stay `Copy`; anything else is `error`.
    let what = ["quic_silent", "quic", "timeout", "http", "connect", "tls"]
        .into_iter()
        .find(|k| *k == kind)
        .unwrap_or("error");
    Some((on, what))
}

/// Phase and why of an exploiting decision (no switch now).
fn exploit_reason(st: &OriginState) -> (&'static str, Transport, &'static str) {
    if st.rollback.checking() {
        ("check", st.current, "stay")
    } else if st.score.is_none() {
        ("exploit", st.current, "no-score")
    } else {
        ("exploit", st.current, "stay")
    }
}

/// The IP part of `ip:port` (`[v6]:port` keeps its brackets).
fn local_ip(addr: &str) -> &str {
    match addr.rfind(':') {
        Some(i) if !addr[i..].contains(']') => &addr[..i],
        _ => addr,
    }
}

/// The `why` of an exploration's extra request.
const PROBE_EXTRA: &str = "probe-extra";

/// What a tagged decision was part of: the gear keeps it under the decision's
/// [`DecisionId`] and finds it again on the record that answers the decision. Rejected
/// alternative (the first version): reading exploration, slot and extra back out of the
/// record's reason text, which bound the wording of telemetry to the gear's bookkeeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tag {
    /// Probe slot `slot` (1..=6) of exploration `id` (`why=probe-<slot>of6;ex=<id>`).
    Slot { id: u64, slot: usize },
    /// Extra request `extra` of exploration `id` (`why=probe-extra;ex=<id>;extra=<extra>`).
    Extra { id: u64, extra: usize },
    /// A request of rollback verification `id` (`why=verify-<k>of6;ex=<id>`).
    Verify { id: u64 },
}

#[cfg(test)]
mod tests {
    use super::super::features::tests::{record, with_counters};
    use super::super::monitor::testing::{write_mlps, write_stumps};
    use super::*;
    use gearbox_gear_api::Protocol;

    const ORIGIN: &str = "127.0.0.1:4433";

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn gear(version: Version, low: f32, high: f32, cfg: TransportConfig) -> (WiseTrans, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("tmp");
        write_stumps(dir.path(), 0.05, low, high);
        (WiseTrans::load(version, Some(dir.path()), cfg), dir)
    }

    /// A finished request of the given transport and completion time, carrying the
    /// decision it was made with; `loss` sets the connection's lost/sent growth.
    /// Runs one 3+3 exploration from `t0`: each probe request completes 10 ms after it was
    /// chosen, in `tcp_rct_ms` or `quic_rct_ms` depending on the transport it was given.
    fn explore(g: &mut WiseTrans, t0: Instant, tcp_rct_ms: f64, quic_rct_ms: f64) {
        let slots: Vec<_> = (0..6).map(|k| g.ask(ORIGIN, t0 + ms(k))).collect();
        for (k, (p, why)) in slots.iter().enumerate() {
            let (t, rct) = if *p == TransportChoice::Tcp {
                (Transport::Tcp, tcp_rct_ms)
            } else {
                (Transport::Quic, quic_rct_ms)
            };
            g.observe(&done(t, rct, why, 10 + k as u64, (0, 0)), t0 + ms(10 + k as u64));
        }
    }

    /// A decision's reason as the tests read it (it derefs to the text), carrying the
    /// decision's id so that the record made from it echoes the id as the client would.
    #[derive(Debug, Clone)]
    struct Why {
        text: String,
        id: Option<DecisionId>,
    }

    impl std::ops::Deref for Why {
        type Target = str;
        fn deref(&self) -> &str {
            &self.text
        }
    }

    impl std::fmt::Display for Why {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.text)
        }
    }

    impl PartialEq<&str> for Why {
        fn eq(&self, other: &&str) -> bool {
            self.text == *other
        }
    }

    impl PartialEq<String> for Why {
        fn eq(&self, other: &String) -> bool {
            self.text == *other
        }
    }

    /// What the gear filed the decision under, waiting for its answer.
    fn tag_of(g: &WiseTrans, why: &Why) -> Option<Tag> {
        why.id.and_then(|id| g.origins[ORIGIN].tags.get(&id).copied())
    }

    /// `choose`, split into the choice and its [`Why`].
    trait Ask {
        fn ask(&mut self, origin: &str, now: Instant) -> (TransportChoice, Why);
    }

    impl Ask for WiseTrans {
        fn ask(&mut self, origin: &str, now: Instant) -> (TransportChoice, Why) {
            let d = self.choose(origin, now);
            (
                d.choice,
                Why {
                    text: d.reason,
                    id: d.id,
                },
            )
        }
    }

    fn done(t: Transport, rct: f64, decision: &Why, conn: u64, counters: (u64, u64)) -> ClientRecord {
        let proto = match t {
            Transport::Tcp => Protocol::H2,
            Transport::Quic => Protocol::H3,
        };
        let mut r = with_counters(record(proto, rct, rct / 2.0, 1000, conn), 40.0, counters.0, counters.1);
        r.decision = Some(decision.text.clone());
        r.decision_id = decision.id;
        r
    }

    fn pref(t: Transport) -> TransportChoice {
        t.into()
    }

    #[test]
    fn probe_agent_alternates_three_and_three_then_uses_the_better_from_the_seventh_request() {
        // The paper's rule to the letter; the default (probe_balance) is tested below.
        let cfg = TransportConfig {
            probe_balance: false,
            ..TransportConfig::default()
        };
        let (mut g, _d) = gear(Version::V2, -2.0, -2.0, cfg);
        let t0 = Instant::now();
        let mut issued = Vec::new();
        for k in 0..6 {
            let (p, why) = g.ask(ORIGIN, t0 + ms(k));
            issued.push((p, why));
        }
        let protos: Vec<_> = issued.iter().map(|(p, _)| *p).collect();
        assert_eq!(
            protos,
            [
                Transport::Tcp,
                Transport::Quic,
                Transport::Tcp,
                Transport::Quic,
                Transport::Tcp,
                Transport::Quic
            ]
            .map(pref)
        );
        assert!(issued[0]
            .1
            .starts_with("wisetrans-v2;phase=probe;score=-;choice=tcp;why=probe-1of6;ex=1"));
        assert!(issued[0].1.contains("trigger=new-origin"), "{}", issued[0].1);
        // The 7th request, issued before the results: the last selected protocol (TCP).
        let (p7, why7) = g.ask(ORIGIN, t0 + ms(7));
        assert_eq!(p7, TransportChoice::Tcp);
        assert!(why7.contains("why=probe-wait"), "{why7}");
        // Results: QUIC is faster.
        for (k, (p, why)) in issued.iter().enumerate() {
            let t = if *p == TransportChoice::Tcp {
                Transport::Tcp
            } else {
                Transport::Quic
            };
            let rct = if t == Transport::Tcp { 200.0 } else { 100.0 };
            g.observe(
                &done(t, rct + k as f64, why, 1 + k as u64 % 2, (0, 0)),
                t0 + ms(100 + k as u64),
            );
        }
        assert_eq!(g.selected(ORIGIN), Some(Transport::Quic));
        let (p8, why8) = g.ask(ORIGIN, t0 + ms(200));
        assert_eq!(p8, TransportChoice::Quic);
        assert!(why8.contains("phase="), "{why8}");
        assert!(
            why8.contains("picked=tcp:"),
            "the reason says what the exploration measured: {why8}"
        );
        let (p9, _) = g.ask(ORIGIN, t0 + ms(201));
        assert_eq!(p9, TransportChoice::Quic);
    }

    /// Chooses `n` requests at `t0 + k` ms (one click's burst, all issued before any
    /// result).
    fn burst(g: &mut WiseTrans, t0: Instant, n: u64) -> Vec<(TransportChoice, Why)> {
        (0..n).map(|k| g.ask(ORIGIN, t0 + ms(k))).collect()
    }

    fn transport_of(p: TransportChoice) -> Transport {
        if p == TransportChoice::Tcp {
            Transport::Tcp
        } else {
            Transport::Quic
        }
    }

    #[test]
    fn a_click_burst_during_an_exploration_gets_six_slots_then_extras_alternating_tcp_and_quic() {
        let (mut g, _d) = gear(Version::V2, -2.0, -2.0, TransportConfig::default());
        let got = burst(&mut g, Instant::now(), 13);
        let protos: Vec<_> = got.iter().map(|(p, _)| *p).collect();
        let want: Vec<_> = (1..=13).map(|k| pref(super::super::probe::slot_transport(k))).collect();
        assert_eq!(protos, want, "TCP, QUIC, ... for all 13");
        for (k, (_, why)) in got.iter().enumerate().take(6) {
            assert!(
                why.contains(&format!("why=probe-{}of6;ex=1;trigger=new-origin", k + 1)),
                "{why}"
            );
        }
        for (k, (p, why)) in got.iter().enumerate().skip(6) {
            let x = k - 5;
            let choice = if *p == TransportChoice::Tcp { "tcp" } else { "quic" };
            assert_eq!(
                *why,
                format!(
                    "wisetrans-v2;phase=probe;score=-;choice={choice};why=probe-extra;ex=1;extra={x};trigger=new-origin"
                )
            );
            assert_eq!(tag_of(&g, why), Some(Tag::Extra { id: 1, extra: x }));
        }
    }

    #[test]
    fn the_outcome_waits_for_the_extras_and_counts_them() {
        let (mut g, _d) = gear(Version::V2, -2.0, -2.0, TransportConfig::default());
        let t0 = Instant::now();
        let got = burst(&mut g, t0, 13);
        // The slots are a tie (100 ms each); the burst's tail is cheaper on QUIC (not
        // over twice: no early verdict). Under the paper's rule the tie would keep TCP.
        for (k, (p, why)) in got.iter().enumerate().take(6) {
            g.observe(&done(transport_of(*p), 100.0, why, 1, (0, 0)), t0 + ms(100 + k as u64));
        }
        assert!(
            g.origins[ORIGIN].probe.exploring(),
            "six slots in, seven extras missing: no outcome yet"
        );
        for (k, (p, why)) in got.iter().enumerate().skip(6) {
            let t = transport_of(*p);
            let rct = if t == Transport::Tcp { 130.0 } else { 50.0 };
            g.observe(&done(t, rct, why, 1, (0, 0)), t0 + ms(200 + k as u64));
            if k < 12 {
                assert_eq!(g.selected(ORIGIN), Some(Transport::Tcp), "extra {} of 7 in", k - 5);
            }
        }
        assert!(!g.origins[ORIGIN].probe.exploring());
        assert_eq!(g.selected(ORIGIN), Some(Transport::Quic));
        let (p, why) = g.ask(ORIGIN, t0 + ms(400));
        assert_eq!(p, TransportChoice::Quic, "{why}");
        // 3 slots + 4 extras on TCP (extras 1, 3, 5, 7), 3 + 3 on QUIC.
        assert!(
            why.contains(";picked=tcp:") && why.ends_with(";n=tcp:7/quic:6"),
            "{why}"
        );
    }

    #[test]
    fn requests_beyond_the_extras_limit_use_the_last_selected_protocol() {
        let cfg = TransportConfig::default();
        let limit = cfg.probe_max_extra as u64;
        assert_eq!(limit, 12);
        let (mut g, _d) = gear(Version::V2, -2.0, -2.0, cfg);
        let got = burst(&mut g, Instant::now(), 6 + limit + 3);
        let (_, last_extra) = &got[5 + limit as usize];
        assert!(
            last_extra.contains(&format!("why=probe-extra;ex=1;extra={limit}")),
            "{last_extra}"
        );
        for (p, why) in &got[6 + limit as usize..] {
            assert_eq!(*p, TransportChoice::Tcp, "the last selected protocol: {why}");
            assert_eq!(*why, "wisetrans-v2;phase=probe;score=-;choice=tcp;why=probe-wait");
            assert_eq!(why.id, None, "{why}");
        }
    }

    #[test]
    fn an_exploration_with_extras_still_missing_is_abandoned_at_the_timeout() {
        let cfg = TransportConfig::default();
        let timeout = cfg.explore_timeout_ms;
        let (mut g, _d) = gear(Version::V2, -2.0, -2.0, cfg);
        let t0 = Instant::now();
        let got = burst(&mut g, t0, 8);
        // All six slots (QUIC much faster) and extra 1 report; extra 2 never does.
        for (k, (p, why)) in got.iter().enumerate().take(7) {
            let t = transport_of(*p);
            let rct = if t == Transport::Tcp { 300.0 } else { 50.0 };
            g.observe(&done(t, rct, why, 1, (0, 0)), t0 + ms(100 + k as u64));
        }
        assert!(g.origins[ORIGIN].probe.exploring());
        let (p, why) = g.ask(ORIGIN, t0 + ms(timeout + 1));
        assert_eq!(p, TransportChoice::Tcp, "{why}");
        assert!(
            why.contains("phase=exploit") && why.contains("abandoned=probe-timeout"),
            "{why}"
        );
        // The missing extra's record, late: ignored.
        let (p8, why8) = &got[7];
        g.observe(&done(transport_of(*p8), 50.0, why8, 1, (0, 0)), t0 + ms(timeout + 2));
        assert_eq!(g.selected(ORIGIN), Some(Transport::Tcp));
        let (_, why) = g.ask(ORIGIN, t0 + ms(timeout + 3));
        assert!(!why.contains("picked=") && !why.contains("phase=probe"), "{why}");
    }

    #[test]
    fn v2_explores_on_a_score_jump_and_not_on_small_changes() {
        // Stumps: retran_rate < 0.05 -> p = 0.12, otherwise p = 0.88.
        let (mut g, _d) = gear(Version::V2, -2.0, 2.0, TransportConfig::default());
        let t0 = Instant::now();
        // First exploration (new origin); TCP wins it.
        explore(&mut g, t0, 50.0, 90.0);
        assert_eq!(g.selected(ORIGIN), Some(Transport::Tcp));
        // Exploitation on TCP with little loss: the score settles at 0.12 (history);
        // loss wobbling below the split moves nothing.
        let mut t = t0 + ms(100);
        let (mut sent, mut lost) = (0u64, 0u64);
        for i in 0..40u64 {
            t += ms(500);
            sent += 100;
            lost += i % 3; // 0..2% loss
            let (p, why) = g.ask(ORIGIN, t);
            assert_eq!(p, TransportChoice::Tcp, "{why}");
            assert!(!why.contains("phase=probe"), "no exploration on noise: {why}");
            g.observe(&done(Transport::Tcp, 50.0, &why, 1, (sent, lost)), t + ms(50));
        }
        assert!((g.score(ORIGIN).expect("score") - 0.119).abs() < 0.01);
        // Heavy loss: the score jumps to 0.88 and the next request explores.
        let mut explored = None;
        for _ in 0..10 {
            t += ms(500);
            sent += 100;
            lost += 30;
            let (_, why) = g.ask(ORIGIN, t);
            if why.contains("phase=probe") {
                explored = Some(why);
                break;
            }
            g.observe(&done(Transport::Tcp, 50.0, &why, 1, (sent, lost)), t + ms(50));
        }
        let why = explored.expect("a score jump starts an exploration");
        assert!(
            why.contains("why=probe-1of6") && why.contains("trigger=score-jump"),
            "{why}"
        );
    }

    #[test]
    fn v2_keeps_a_score_jump_seen_too_soon_and_explores_on_the_first_request_after_the_interval() {
        // Stumps: retran_rate < 0.05 -> p = 0.12, otherwise p = 0.88.
        let cfg = TransportConfig::default();
        let interval = cfg.min_explore_interval_ms;
        let (mut g, _d) = gear(Version::V2, -2.0, 2.0, cfg);
        let t0 = Instant::now();
        explore(&mut g, t0, 50.0, 90.0);
        assert_eq!(g.selected(ORIGIN), Some(Transport::Tcp));
        // One burst without loss (history 0.12), one with heavy loss (0.88), both within
        // the interval: no exploration yet.
        let mut t = t0 + ms(1_000);
        let (mut sent, mut lost) = (0u64, 0u64);
        for burst_loss in [0u64, 30] {
            for _ in 0..5 {
                t += ms(100);
                sent += 100;
                lost += burst_loss;
                let (p, why) = g.ask(ORIGIN, t);
                assert_eq!(p, TransportChoice::Tcp, "{why}");
                assert!(
                    !why.contains("phase=probe"),
                    "too soon after the last exploration: {why}"
                );
                g.observe(&done(Transport::Tcp, 50.0, &why, 1, (sent, lost)), t + ms(50));
            }
        }
        assert!(g.score(ORIGIN).expect("score") > 0.8);
        // Nothing finishes in between; the next click, after the interval, explores.
        let (_, why) = g.ask(ORIGIN, t0 + ms(interval + 500));
        assert!(
            why.contains("why=probe-1of6") && why.contains("trigger=score-jump"),
            "{why}"
        );
    }

    #[test]
    fn v1_switches_when_the_model_says_the_other_protocol_is_faster_and_holds_its_dwell() {
        // p = 0.88 whatever the loss (both leaves high): QUIC would be faster than TCP,
        // and TCP faster than QUIC: the dwell must stop flapping.
        let cfg = TransportConfig {
            rollback: false,
            ..TransportConfig::default()
        };
        let (mut g, _d) = gear(Version::V1, 2.0, 2.0, cfg);
        let t0 = Instant::now();
        let (p, why) = g.ask(ORIGIN, t0);
        assert_eq!(p, TransportChoice::Tcp);
        assert_eq!(why, "wisetrans-v1;phase=exploit;score=-;choice=tcp;why=no-score");
        let mut t = t0;
        let mut picks = Vec::new();
        for _ in 0..40 {
            t += ms(100);
            let (p, why) = g.ask(ORIGIN, t);
            let tr = if p == TransportChoice::Tcp {
                Transport::Tcp
            } else {
                Transport::Quic
            };
            picks.push((t, p, why.clone()));
            g.observe(
                &done(tr, 50.0, &why, if tr == Transport::Tcp { 1 } else { 2 }, (0, 0)),
                t + ms(50),
            );
        }
        let switches: Vec<_> = picks.windows(2).filter(|w| w[0].1 != w[1].1).map(|w| w[1].0).collect();
        assert!(!switches.is_empty(), "v1 switches on p > 0.5");
        assert!(picks.iter().any(|(_, _, w)| w.contains("why=switch-p>0.5")));
        for pair in switches.windows(2) {
            assert!(pair[1] - pair[0] >= ms(2000), "switches at least the dwell apart");
        }
    }

    #[test]
    fn mlp_mode_is_v1_with_the_mlp_models_and_says_mlp() {
        // The networks say "switch" (p = 0.88) whatever the window; the XGBoost stumps
        // beside them say "stay": only the networks may drive this gear.
        let dir = tempfile::tempdir().expect("tmp");
        write_stumps(dir.path(), 0.05, -2.0, -2.0);
        write_mlps(dir.path(), 2.0, 0.0);
        let cfg = TransportConfig {
            rollback: false,
            ..TransportConfig::default()
        };
        let mut g = WiseTrans::mlp(Some(dir.path()), cfg);
        let t0 = Instant::now();
        let (p, why) = g.ask(ORIGIN, t0);
        assert_eq!(p, TransportChoice::Tcp);
        assert_eq!(why, "mlp;phase=exploit;score=-;choice=tcp;why=no-score");
        let mut t = t0;
        let mut picks = Vec::new();
        for _ in 0..40 {
            t += ms(100);
            let (p, why) = g.ask(ORIGIN, t);
            assert!(why.starts_with("mlp;phase="), "{why}");
            assert!(!why.contains("phase=probe"), "v1 never probes: {why}");
            let tr = if p == TransportChoice::Tcp {
                Transport::Tcp
            } else {
                Transport::Quic
            };
            picks.push((t, p, why.clone()));
            g.observe(
                &done(tr, 50.0, &why, if tr == Transport::Tcp { 1 } else { 2 }, (0, 0)),
                t + ms(50),
            );
        }
        let switches: Vec<_> = picks.windows(2).filter(|w| w[0].1 != w[1].1).map(|w| w[1].0).collect();
        assert!(!switches.is_empty(), "switches on the network's p > 0.5");
        // The network's score shows in the reasons (a switch itself resets it).
        assert!(picks.iter().any(|(_, _, w)| w.contains("score=0.881;")));
        assert!(picks.iter().any(|(_, _, w)| w.contains("why=switch-p>0.5")));
        for pair in switches.windows(2) {
            assert!(pair[1] - pair[0] >= ms(2000), "v1's dwell holds");
        }

        // Without the networks: TCP, the v1 fallback, in mlp's words, naming the file.
        std::fs::remove_file(dir.path().join("mlp-tcp.json")).expect("rm");
        let mut g = WiseTrans::mlp(Some(dir.path()), TransportConfig::default());
        let (p, r1) = g.ask(ORIGIN, t0);
        assert_eq!(p, TransportChoice::Tcp);
        assert!(
            r1.starts_with("mlp;phase=fallback;score=-;choice=tcp;why=no-model;detail=") && r1.contains("mlp-tcp.json"),
            "{r1}"
        );
        assert_eq!(
            g.ask(ORIGIN, t0 + ms(1)).1,
            "mlp;phase=fallback;score=-;choice=tcp;why=no-model"
        );
    }

    #[test]
    fn rollback_undoes_a_switch_that_made_requests_slower() {
        let cfg = TransportConfig {
            rollback_verify: false,
            ..checker_only()
        };
        let (mut g, _d) = gear(Version::V2, -2.0, -2.0, cfg);
        let t0 = Instant::now();
        // Exploration: QUIC looks better.
        explore(&mut g, t0, 100.0, 60.0);
        assert_eq!(g.selected(ORIGIN), Some(Transport::Quic));
        // After the switch QUIC turns out much slower (e.g. UDP rate-limited).
        let mut t = t0 + ms(100);
        let mut rolled = None;
        for _ in 0..30 {
            t += ms(500);
            let (p, why) = g.ask(ORIGIN, t);
            if why.contains("rollback=") {
                rolled = Some((p, why));
                break;
            }
            let tr = if p == TransportChoice::Tcp {
                Transport::Tcp
            } else {
                Transport::Quic
            };
            g.observe(&done(tr, 400.0, &why, 2, (0, 0)), t + ms(50));
        }
        let (p, why) = rolled.expect("a rollback");
        assert_eq!(p, TransportChoice::Tcp, "{why}");
        assert_eq!(g.selected(ORIGIN), Some(Transport::Tcp));
    }

    /// The default settings without the cost-jump rule, which would leave QUIC before the
    /// Rollback Checker judges (these tests are about the checker).
    fn checker_only() -> TransportConfig {
        TransportConfig {
            switch_on_cost_jump: false,
            ..TransportConfig::default()
        }
    }

    /// After v2's exploration picks QUIC, every request gets slower (the path worsened,
    /// on both protocols alike, or on QUIC alone). Returns the first decision after the
    /// Rollback Checker's verdict and the time it was made.
    fn deteriorate_after_switch(g: &mut WiseTrans, t0: Instant) -> (TransportChoice, Why, Instant) {
        explore(g, t0, 100.0, 60.0);
        assert_eq!(g.selected(ORIGIN), Some(Transport::Quic));
        let mut t = t0 + ms(100);
        for _ in 0..30 {
            t += ms(500);
            let (p, why) = g.ask(ORIGIN, t);
            if why.contains("phase=probe") || why.contains("rollback=") {
                return (p, why, t);
            }
            g.observe(&done(transport_of(p), 400.0, &why, 2, (0, 0)), t + ms(50));
        }
        panic!("the checker judged no switch");
    }

    /// Answers the verification whose first request `first` was chosen at `t`: five
    /// more requests, alternately on the old protocol (TCP, finishing in `old_rct_ms`)
    /// and the new one (QUIC, `new_rct_ms`). Returns the next decision.
    fn answer_verification(
        g: &mut WiseTrans,
        first: (TransportChoice, Why),
        t: Instant,
        old_rct_ms: f64,
        new_rct_ms: f64,
    ) -> (TransportChoice, Why) {
        let mut asks = vec![first];
        asks.extend((1..6).map(|k| g.ask(ORIGIN, t + ms(k))));
        for (k, (p, why)) in asks.iter().enumerate() {
            let (tr, rct) = if k % 2 == 0 {
                (Transport::Tcp, old_rct_ms)
            } else {
                (Transport::Quic, new_rct_ms)
            };
            assert!(
                why.contains("phase=probe;")
                    && why.contains(&format!(";choice={}", tr.name()))
                    && why.contains(&format!(";why=verify-{}of6;ex=1", k + 1)),
                "{why}"
            );
            assert_eq!(transport_of(*p), tr, "{why}");
            g.observe(&done(tr, rct, why, 3, (0, 0)), t + ms(10 + k as u64));
        }
        g.ask(ORIGIN, t + ms(100))
    }

    /// A fresh v2 gear's switch to QUIC, found worse and verified with TCP answering in
    /// `old_rct_ms` and QUIC in `new_rct_ms`: the decision after the verdict, and the
    /// protocol selected then.
    fn verified_switch(t0: Instant, old_rct_ms: f64, new_rct_ms: f64) -> (TransportChoice, Why, Option<Transport>) {
        let (mut g, _d) = gear(Version::V2, -2.0, -2.0, checker_only());
        let (p, why, t) = deteriorate_after_switch(&mut g, t0);
        let (p, why) = answer_verification(&mut g, (p, why), t, old_rct_ms, new_rct_ms);
        (p, why, g.selected(ORIGIN))
    }

    #[test]
    fn a_bad_switch_is_verified_on_the_old_protocol_before_it_is_undone() {
        // The path worsened for both protocols: TCP, measured again, is slower still.
        let (mut g, _d) = gear(Version::V2, -2.0, -2.0, checker_only());
        let t0 = Instant::now();
        let (p, why, t) = deteriorate_after_switch(&mut g, t0);
        assert!(
            why.contains("suspect=93.6->374.4") && !why.contains("rollback="),
            "{why}"
        );
        assert_eq!(g.selected(ORIGIN), Some(Transport::Quic), "nothing undone yet");
        let (p, why) = answer_verification(&mut g, (p, why), t, 700.0, 400.0);
        assert_eq!(p, TransportChoice::Quic, "{why}");
        assert!(
            why.contains("verify=old:655.1/new:374.4") && !why.contains("rollback="),
            "{why}"
        );
        assert_eq!(g.selected(ORIGIN), Some(Transport::Quic));

        // QUIC alone got slower (UDP limited after the switch): back to TCP, as soon as
        // TCP's three have answered (100 ms each) while QUIC's two answers (400 ms) and
        // its third request's time so far already average over twice that.
        let (p, why, selected) = verified_switch(t0, 100.0, 400.0);
        assert_eq!(p, TransportChoice::Tcp, "{why}");
        assert!(
            why.contains("verify=old:100.0/new:269.7+;early=rct;rollback=verified"),
            "{why}"
        );
        assert_eq!(selected, Some(Transport::Tcp));

        // The old protocol's requests finish sooner only for being the front of the
        // burst: QUIC, measured beside them, is as fast, and the switch stands.
        let (p, why, selected) = verified_switch(t0, 100.0, 90.0);
        assert_eq!(p, TransportChoice::Quic, "{why}");
        assert!(
            why.contains("verify=old:93.6/new:84.2") && !why.contains("rollback="),
            "{why}"
        );
        assert_eq!(selected, Some(Transport::Quic));
    }

    #[test]
    fn a_missing_model_means_tcp_and_the_reason_says_so_with_the_detail_once() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut g = WiseTrans::load(Version::V2, Some(dir.path()), TransportConfig::default());
        let t0 = Instant::now();
        let (p1, r1) = g.ask(ORIGIN, t0);
        let (p2, r2) = g.ask(ORIGIN, t0 + ms(1));
        assert_eq!((p1, p2), (TransportChoice::Tcp, TransportChoice::Tcp));
        assert!(
            r1.starts_with("wisetrans-v2;phase=fallback;score=-;choice=tcp;why=no-model;detail="),
            "{r1}"
        );
        assert!(r1.contains("tcp.json"), "{r1}");
        assert_eq!(r2, "wisetrans-v2;phase=fallback;score=-;choice=tcp;why=no-model");
        // Observing records with a fallback gear is harmless.
        g.observe(&done(Transport::Quic, 10.0, &r1, 1, (0, 0)), t0);
        assert_eq!(g.ask(ORIGIN, t0 + ms(2)).0, TransportChoice::Tcp);
    }

    #[test]
    fn a_new_local_address_starts_a_new_exploration() {
        let (mut g, _d) = gear(Version::V2, -2.0, -2.0, TransportConfig::default());
        let t0 = Instant::now();
        explore(&mut g, t0, 50.0, 50.0);
        let (_, why) = g.ask(ORIGIN, t0 + ms(20));
        assert!(!why.contains("phase=probe"), "{why}");
        let mut r = done(Transport::Tcp, 50.0, &why, 1, (0, 0));
        r.local_addr = "10.0.0.7:41000".into();
        g.observe(&r, t0 + ms(30));
        let (_, why) = g.ask(ORIGIN, t0 + ms(40));
        assert!(
            why.contains("why=probe-1of6") && why.contains("trigger=path-change"),
            "{why}"
        );
    }

    #[test]
    fn a_probe_answer_is_found_by_its_decision_id_not_by_its_reason_text() {
        let (mut g, _d) = gear(Version::V2, -2.0, -2.0, TransportConfig::default());
        let t0 = Instant::now();
        let slots: Vec<_> = (0..6).map(|k| g.ask(ORIGIN, t0 + ms(k))).collect();
        let ids: Vec<_> = slots
            .iter()
            .map(|(_, why)| why.id.expect("a probe slot carries an id"))
            .collect();
        assert!(ids.windows(2).all(|w| w[0] != w[1]), "one id per decision: {ids:?}");
        // Answers whose text says nothing about the probe, but carry the ids: they are the
        // exploration's, and QUIC (faster) is selected.
        for (k, (p, why)) in slots.iter().enumerate() {
            let reworded = Why {
                text: "reworded for people".into(),
                id: why.id,
            };
            let rct = if *p == TransportChoice::Tcp { 200.0 } else { 100.0 };
            g.observe(
                &done(transport_of(*p), rct, &reworded, 1, (0, 0)),
                t0 + ms(10 + k as u64),
            );
        }
        assert_eq!(g.selected(ORIGIN), Some(Transport::Quic));

        // Answers with a probe's text but no id (or an id this gear never gave) are
        // ordinary requests: they finish no exploration.
        let (mut g, _d) = gear(Version::V2, -2.0, -2.0, TransportConfig::default());
        let slots: Vec<_> = (0..6).map(|k| g.ask(ORIGIN, t0 + ms(k))).collect();
        for (k, (p, why)) in slots.iter().enumerate() {
            let untagged = Why {
                text: why.text.clone(),
                id: if k % 2 == 0 { None } else { Some(DecisionId(10_000)) },
            };
            let rct = if *p == TransportChoice::Tcp { 200.0 } else { 100.0 };
            g.observe(
                &done(transport_of(*p), rct, &untagged, 1, (0, 0)),
                t0 + ms(10 + k as u64),
            );
        }
        assert_eq!(g.selected(ORIGIN), Some(Transport::Tcp), "still exploring");
        let (_, why) = g.ask(ORIGIN, t0 + ms(20));
        assert!(
            why.contains("why=probe-wait") || why.contains("why=probe-extra"),
            "{why}"
        );
    }

    #[test]
    fn only_probe_and_verification_decisions_carry_an_id() {
        let (mut g, _d) = gear(Version::V2, -2.0, -2.0, TransportConfig::default());
        let t0 = Instant::now();
        explore(&mut g, t0, 50.0, 90.0);
        let (_, why) = g.ask(ORIGIN, t0 + ms(100));
        assert!(why.contains("phase=exploit"), "{why}");
        assert_eq!(why.id, None, "{why}");
        let mut fallback = WiseTrans::load(Version::V2, None, TransportConfig::default());
        assert_eq!(fallback.choose(ORIGIN, t0).id, None);
    }

    /// A request the client retried over TCP after its QUIC connection went silent.
    fn retried_over_tcp(decision: &Why, rct: f64) -> ClientRecord {
        let mut r = done(Transport::Tcp, rct, decision, 9, (0, 0));
        r.retried_from = Some(Protocol::H3);
        r.retry_lost_ms = Some(rct - 80.0);
        r
    }

    /// An exploration at `t0` that picks QUIC (TCP 200 ms, QUIC 50 ms), then three fast
    /// QUIC requests `gap_ms` apart from `t0 + 100 ms`; the time after the last.
    fn settled_on_quic(g: &mut WiseTrans, t0: Instant, gap_ms: u64) -> Instant {
        explore(g, t0, 200.0, 50.0);
        assert_eq!(g.selected(ORIGIN), Some(Transport::Quic));
        let mut t = t0 + ms(100);
        for _ in 0..3 {
            let (p, why) = g.ask(ORIGIN, t);
            assert_eq!(p, TransportChoice::Quic, "{why}");
            g.observe(&done(Transport::Quic, 50.0, &why, 2, (0, 0)), t + ms(50));
            t += ms(gap_ms);
        }
        t
    }

    /// Settles `g` on QUIC (three fast requests), then answers its next QUIC request with
    /// `answer` after `after_ms`; checks that the gear left QUIC at once, saying
    /// `failover=quic:<what>`, on probation. Returns the time after the answer.
    fn leaves_quic_at_once(
        g: &mut WiseTrans,
        t0: Instant,
        after_ms: u64,
        answer: impl Fn(&Why) -> ClientRecord,
        what: &str,
    ) -> Instant {
        let t = settled_on_quic(g, t0, 100);
        let (p, why) = g.ask(ORIGIN, t);
        assert_eq!(p, TransportChoice::Quic);
        g.observe(&answer(&why), t + ms(after_ms));
        assert_eq!(
            g.selected(ORIGIN),
            Some(Transport::Tcp),
            "no model, no checker waited for"
        );
        let (p, why) = g.ask(ORIGIN, t + ms(after_ms + 1));
        assert_eq!(p, TransportChoice::Tcp);
        assert!(why.contains(&format!(";failover=quic:{what}")), "{why}");
        assert!(
            g.origins[ORIGIN].rollback.checking(),
            "the move is on probation like any switch"
        );
        t
    }

    #[test]
    fn v2_leaves_quic_at_once_when_a_request_on_it_stalls_and_the_client_retries_it_over_tcp() {
        let (mut g, _d) = gear(Version::V2, -2.0, -2.0, TransportConfig::default());
        let t0 = Instant::now();
        // Three fast QUIC requests, then UDP is blocked: the next one is retried over TCP.
        let t = leaves_quic_at_once(&mut g, t0, 1_100, |why| retried_over_tcp(why, 1_100.0), "retried");
        // TCP serves well: the checker, whose "before" side holds the failure, keeps it
        // (judged on the first request after its 10 s interval).
        let mut t = t + ms(1_200);
        for _ in 0..5 {
            let (p, why) = g.ask(ORIGIN, t);
            assert_eq!(p, TransportChoice::Tcp, "{why}");
            g.observe(&done(Transport::Tcp, 60.0, &why, 3, (0, 0)), t + ms(60));
            t += ms(3_000);
        }
        assert_eq!(g.selected(ORIGIN), Some(Transport::Tcp));
        assert!(!g.origins[ORIGIN].rollback.checking());
    }

    /// A QUIC request the client hedged over TCP `hedge_at` ms after its start, answered
    /// by `winner` after `rct` ms.
    fn hedged(decision: &Why, winner: Transport, rct: f64, hedge_at: f64) -> ClientRecord {
        let mut r = done(winner, rct, decision, 9, (0, 0));
        r.hedged = Some(Protocol::H2);
        r.hedge_at_ms = Some(hedge_at);
        r
    }

    #[test]
    fn v2_leaves_quic_at_once_when_a_tcp_hedge_answers_before_the_quic_request() {
        // Without the cost-jump rule, so that the Rollback Checker alone judges the move.
        let cfg = TransportConfig {
            switch_on_cost_jump: false,
            ..TransportConfig::default()
        };
        let (mut g, _d) = gear(Version::V2, -2.0, -2.0, cfg);
        let t0 = Instant::now();
        // Three fast QUIC requests, then UDP is throttled: the next one is hedged over
        // TCP at 400 ms and the hedge answers at 520 ms, QUIC still running.
        let t = leaves_quic_at_once(
            &mut g,
            t0,
            520,
            |why| hedged(why, Transport::Tcp, 520.0, 400.0),
            "hedged",
        );
        // QUIC's side of the probation holds the hedged request at its own cost (QUIC had
        // not answered by then), not a failure's 10 s: with TCP at 600 ms from then on, the
        // checker finds the move made things worse, verifies, and goes back to QUIC.
        let mut t = t + ms(600);
        for _ in 0..16 {
            let (p, why) = g.ask(ORIGIN, t);
            let (on, rct) = match p {
                TransportChoice::Tcp => (Transport::Tcp, 600),
                _ => (Transport::Quic, 50),
            };
            g.observe(&done(on, rct as f64, &why, 3, (0, 0)), t + ms(rct));
            t += ms(1_500);
            if g.selected(ORIGIN) == Some(Transport::Quic) {
                break;
            }
        }
        assert_eq!(
            g.selected(ORIGIN),
            Some(Transport::Quic),
            "a hedge is no 10 s failure to the checker"
        );
    }

    #[test]
    fn a_hedge_that_quic_wins_is_no_evidence_against_quic() {
        let (mut g, _d) = gear(Version::V2, -2.0, -2.0, TransportConfig::default());
        let t0 = Instant::now();
        let t = settled_on_quic(&mut g, t0, 100);
        let (_, why) = g.ask(ORIGIN, t);
        let r = hedged(&why, Transport::Quic, 450.0, 400.0);
        assert_eq!(failure_of(&r), None);
        g.observe(&r, t + ms(450));
        assert_eq!(g.selected(ORIGIN), Some(Transport::Quic));
        let (p, why) = g.ask(ORIGIN, t + ms(451));
        assert_eq!(p, TransportChoice::Quic);
        assert!(!why.contains("failover"), "{why}");
    }

    #[test]
    fn v1_leaves_quic_when_a_tcp_hedge_wins_once_the_dwell_allows() {
        // p = 0.12 everywhere: the model alone would never switch. TCP fails first, so v1
        // is on QUIC; a hedge TCP wins then takes it back after the dwell.
        let (mut g, _d) = gear(Version::V1, -2.0, -2.0, TransportConfig::default());
        let t0 = Instant::now();
        let (_, why) = g.ask(ORIGIN, t0);
        let mut failed = done(Transport::Tcp, 0.0, &why, 1, (0, 0));
        failed.rct_ms = None;
        failed.error = Some("timeout".into());
        g.observe(&failed, t0 + ms(10));
        let (p, why) = g.ask(ORIGIN, t0 + ms(20));
        assert_eq!(p, TransportChoice::Quic, "{why}");
        // Within the dwell a won hedge is a costly QUIC request, no switch.
        g.observe(&hedged(&why, Transport::Tcp, 700.0, 300.0), t0 + ms(720));
        assert_eq!(g.selected(ORIGIN), Some(Transport::Quic));
        g.observe(&hedged(&why, Transport::Tcp, 700.0, 300.0), t0 + ms(2_800));
        let (p, why) = g.ask(ORIGIN, t0 + ms(2_900));
        assert_eq!(p, TransportChoice::Tcp, "{why}");
        assert!(why.contains(";failover=quic:hedged"), "{why}");
    }

    #[test]
    fn v1_leaves_a_protocol_whose_request_failed_but_not_back_and_forth_faster_than_the_dwell() {
        // p = 0.12 everywhere: the model alone would never switch.
        let (mut g, _d) = gear(Version::V1, -2.0, -2.0, TransportConfig::default());
        let t0 = Instant::now();
        let (p, why) = g.ask(ORIGIN, t0);
        assert_eq!(p, TransportChoice::Tcp);
        let mut failed = done(Transport::Tcp, 0.0, &why, 1, (0, 0));
        failed.rct_ms = None;
        failed.error = Some("timeout".into());
        g.observe(&failed, t0 + ms(10));
        let (p, why) = g.ask(ORIGIN, t0 + ms(20));
        assert_eq!(p, TransportChoice::Quic, "{why}");
        assert!(why.contains(";failover=tcp:timeout"), "{why}");
        // QUIC fails too, within the dwell: no flapping back yet.
        let mut silent = done(Transport::Quic, 0.0, &why, 2, (0, 0));
        silent.rct_ms = None;
        silent.error = Some("quic_silent".into());
        g.observe(&silent, t0 + ms(1_000));
        assert_eq!(g.selected(ORIGIN), Some(Transport::Quic));
        // After the dwell, a QUIC failure moves it back.
        g.observe(&silent, t0 + ms(2_100));
        let (p, why) = g.ask(ORIGIN, t0 + ms(2_200));
        assert_eq!(p, TransportChoice::Tcp, "{why}");
        assert!(why.contains(";failover=quic:quic_silent"), "{why}");
    }

    #[test]
    fn without_switch_on_failure_a_failure_is_only_a_costly_request() {
        let cfg = TransportConfig {
            switch_on_failure: false,
            ..TransportConfig::default()
        };
        let (mut g, _d) = gear(Version::V1, -2.0, -2.0, cfg);
        let t0 = Instant::now();
        let (_, why) = g.ask(ORIGIN, t0);
        let mut failed = done(Transport::Tcp, 0.0, &why, 1, (0, 0));
        failed.rct_ms = None;
        failed.error = Some("connect".into());
        g.observe(&failed, t0 + ms(10));
        assert_eq!(g.selected(ORIGIN), Some(Transport::Tcp));
    }

    #[test]
    fn a_quic_probe_the_client_sent_over_tcp_counts_as_a_failed_quic_probe() {
        let (mut g, _d) = gear(Version::V2, -2.0, -2.0, TransportConfig::default());
        let t0 = Instant::now();
        // QUIC is broken in the client: its probe slots come back over TCP, fast. Without
        // the rule they would make QUIC look as fast as TCP.
        let slots: Vec<_> = (0..6).map(|k| g.ask(ORIGIN, t0 + ms(k))).collect();
        for (k, (p, why)) in slots.iter().enumerate() {
            let mut r = done(Transport::Tcp, 40.0, why, 1, (0, 0));
            if *p == TransportChoice::Quic {
                r.decision = Some(format!("{};fallback=quic-broken", why.text));
            }
            g.observe(&r, t0 + ms(50 + k as u64));
        }
        let (p, why) = g.ask(ORIGIN, t0 + ms(100));
        assert_eq!(p, TransportChoice::Tcp, "{why}");
        assert!(why.contains("picked=tcp:") && why.contains("/quic:10000.0"), "{why}");
    }

    #[test]
    fn v2_leaves_quic_when_its_requests_suddenly_take_many_round_trips_and_the_model_says_nothing() {
        // p = 0.12 everywhere: the model never asks for an exploration. UDP is then
        // rate-limited: QUIC answers, slowly (the `block` class's throttled phase).
        let (mut g, _d) = gear(Version::V2, -2.0, -2.0, TransportConfig::default());
        let t0 = Instant::now();
        let mut t = settled_on_quic(&mut g, t0, 300);
        // Throttled: 600 ms at the same 40 ms RTT (15 round trips against 1.2 before, and
        // TCP's 4.7 in the exploration). One slow request is not enough; two of three are.
        t += ms(3_000);
        let mut left_after = None;
        for k in 1..=3 {
            let (p, why) = g.ask(ORIGIN, t);
            assert_eq!(p, TransportChoice::Quic, "{why}");
            g.observe(&done(Transport::Quic, 600.0, &why, 2, (0, 0)), t + ms(600));
            t += ms(700);
            if g.selected(ORIGIN) == Some(Transport::Tcp) {
                left_after = Some(k);
                break;
            }
        }
        assert_eq!(left_after, Some(2), "the second slow request makes the jump");
        let (p, why) = g.ask(ORIGIN, t);
        assert_eq!(p, TransportChoice::Tcp);
        assert!(why.contains(";jump=quic:14.0/was:1.2/tcp:4.7"), "{why}");
        assert!(g.origins[ORIGIN].rollback.checking(), "on probation like any switch");
    }

    #[test]
    fn a_path_that_slows_for_both_protocols_is_no_cost_jump() {
        // The RTT triples (a handover): QUIC's costs triple in ms, not in round trips.
        let (mut g, _d) = gear(Version::V2, -2.0, -2.0, TransportConfig::default());
        let t0 = Instant::now();
        explore(&mut g, t0, 200.0, 50.0);
        let mut t = t0 + ms(100);
        for k in 0..8 {
            let (p, why) = g.ask(ORIGIN, t);
            assert_eq!(p, TransportChoice::Quic, "{why}");
            let (rct, rtt) = if k < 3 { (50.0, 40.0) } else { (150.0, 120.0) };
            let mut r = done(Transport::Quic, rct, &why, 2, (0, 0));
            r = with_counters(r, rtt, 0, 0);
            g.observe(&r, t + ms(rct as u64));
            t += ms(300);
        }
        assert_eq!(g.selected(ORIGIN), Some(Transport::Quic));
    }

    #[test]
    fn v1_leaves_a_throttled_protocol_even_while_a_rollback_check_runs() {
        // Stumps: loss -> p = 0.88. TCP with heavy loss: v1 switches to QUIC and the
        // switch goes on probation; QUIC without loss scores 0.12, so the model would
        // keep it however slow it gets, and before this rule nothing else could move v1
        // while the check ran (`why=hold-check` in the `block` class).
        let (mut g, _d) = gear(Version::V1, -2.0, 2.0, TransportConfig::default());
        let t0 = Instant::now();
        let mut t = t0;
        let (mut sent, mut lost) = (0u64, 0u64);
        for _ in 0..10 {
            let (p, why) = g.ask(ORIGIN, t);
            if p == TransportChoice::Quic {
                assert!(why.contains("why=switch-p>0.5"), "{why}");
                break;
            }
            sent += 100;
            lost += 30;
            g.observe(&done(Transport::Tcp, 50.0, &why, 1, (sent, lost)), t + ms(50));
            t += ms(100);
        }
        assert_eq!(g.selected(ORIGIN), Some(Transport::Quic));
        for _ in 0..4 {
            t += ms(300);
            let (p, why) = g.ask(ORIGIN, t);
            assert_eq!(p, TransportChoice::Quic, "{why}");
            g.observe(&done(Transport::Quic, 50.0, &why, 2, (0, 0)), t + ms(50));
        }
        t += ms(2_000);
        for _ in 0..2 {
            let (_, why) = g.ask(ORIGIN, t);
            assert!(why.contains("phase=check"), "a check runs: {why}");
            g.observe(&done(Transport::Quic, 900.0, &why, 2, (0, 0)), t + ms(900));
            t += ms(1_000);
        }
        let (p, why) = g.ask(ORIGIN, t);
        assert_eq!(p, TransportChoice::Tcp, "{why}");
        assert!(why.contains(";jump=quic:"), "{why}");
    }

    #[test]
    fn without_switch_on_cost_jump_a_throttled_quic_is_kept() {
        let cfg = TransportConfig {
            switch_on_cost_jump: false,
            ..TransportConfig::default()
        };
        let (mut g, _d) = gear(Version::V2, -2.0, -2.0, cfg);
        let t0 = Instant::now();
        explore(&mut g, t0, 200.0, 50.0);
        let mut t = t0 + ms(100);
        for k in 0..8 {
            let (_, why) = g.ask(ORIGIN, t);
            let rct = if k < 3 { 50.0 } else { 600.0 };
            g.observe(&done(Transport::Quic, rct, &why, 2, (0, 0)), t + ms(rct as u64));
            t += ms(700);
        }
        assert_eq!(g.selected(ORIGIN), Some(Transport::Quic));
    }

    #[test]
    fn an_exploration_whose_quic_probes_crawl_ends_at_the_next_click_and_backs_off() {
        // Stumps: loss -> p = 0.88, else 0.12 (so a score jump can be made below).
        let (mut g, _d) = gear(Version::V2, -2.0, 2.0, TransportConfig::default());
        let t0 = Instant::now();
        // A click of 13 on a new origin: slots and extras 1-7. TCP's 7 answer in 100 ms;
        // QUIC's 6 crawl behind a UDP rate limit.
        let first = burst(&mut g, t0, 13);
        let mut quic_out = Vec::new();
        for (p, why) in &first {
            if *p == TransportChoice::Tcp {
                g.observe(&done(Transport::Tcp, 100.0, why, 1, (0, 0)), t0 + ms(100));
            } else {
                quic_out.push(why.clone());
            }
        }
        assert!(g.origins[ORIGIN].probe.exploring(), "QUIC's are still running");
        // The next click, 1.5 s later: the exploration is over, TCP, no more extras.
        let t1 = t0 + ms(1_500);
        let (p, why) = g.ask(ORIGIN, t1);
        assert_eq!(p, TransportChoice::Tcp, "{why}");
        assert!(why.contains("phase=exploit"), "{why}");
        // QUIC's value: the median of its six bounds, 1.5 s less their hand-out offsets.
        assert!(why.contains(";picked=tcp:100.0/quic:149"), "{why}");
        assert!(why.contains("+;n=tcp:7/quic:0;early=rct;backoff=x2"), "{why}");
        // QUIC's answers come late and change nothing.
        for why in &quic_out {
            g.observe(&done(Transport::Quic, 2_000.0, why, 2, (0, 0)), t0 + ms(2_000));
        }
        assert_eq!(g.selected(ORIGIN), Some(Transport::Tcp));
        // TCP settles (history 0.12), then heavy loss (0.88): a score jump, which now
        // waits twice the 10 s interval.
        let mut t = t1;
        let (mut sent, mut lost) = (0u64, 0u64);
        for k in 0..10u64 {
            t += ms(200);
            sent += 100;
            lost += if k < 5 { 0 } else { 30 };
            let (_, why) = g.ask(ORIGIN, t);
            g.observe(&done(Transport::Tcp, 100.0, &why, 1, (sent, lost)), t + ms(100));
        }
        assert!(g.score(ORIGIN).expect("score") > 0.8);
        let (_, why) = g.ask(ORIGIN, t1 + ms(12_000));
        assert!(
            !why.contains("phase=probe"),
            "10 s is not enough after a clear outcome: {why}"
        );
        let (_, why) = g.ask(ORIGIN, t1 + ms(20_100));
        assert!(
            why.contains("why=probe-1of6") && why.contains("trigger=score-jump"),
            "{why}"
        );
    }

    #[test]
    fn a_click_while_one_probe_straggles_goes_to_the_protocol_leading_the_exploration() {
        let (mut g, _d) = gear(Version::V2, -2.0, -2.0, TransportConfig::default());
        let t0 = Instant::now();
        // A new origin's click of 18: six slots and twelve extras, nine per protocol.
        let first = burst(&mut g, t0, 18);
        // QUIC's nine answer in 400 ms; TCP's in 540-820 ms but one, still running at 1 s.
        let mut straggler = None;
        for (k, (p, why)) in first.iter().enumerate() {
            match transport_of(*p) {
                Transport::Quic => g.observe(&done(Transport::Quic, 400.0, why, 2, (0, 0)), t0 + ms(400)),
                Transport::Tcp if k == 0 => straggler = Some(why.clone()),
                Transport::Tcp => {
                    let rct = 500.0 + 20.0 * k as f64;
                    g.observe(&done(Transport::Tcp, rct, why, 1, (0, 0)), t0 + ms(rct as u64));
                }
            }
        }
        assert!(g.origins[ORIGIN].probe.exploring(), "one TCP probe missing");
        // The next click at 1 s: TCP's median (with the straggler's 1 s so far) is not over
        // twice QUIC's, so no early verdict; the click goes to QUIC, the leader.
        let (p, why) = g.ask(ORIGIN, t0 + ms(1_000));
        assert_eq!(p, TransportChoice::Quic, "{why}");
        assert!(why.contains("why=probe-wait;lead=quic"), "{why}");
        assert_eq!(g.selected(ORIGIN), Some(Transport::Tcp), "nothing selected yet");
        g.observe(
            &done(Transport::Tcp, 1_100.0, &straggler.expect("slot 1"), 1, (0, 0)),
            t0 + ms(1_100),
        );
        assert_eq!(g.selected(ORIGIN), Some(Transport::Quic));
    }

    #[test]
    fn local_addresses_lose_their_port() {
        assert_eq!(local_ip("10.0.0.1:443"), "10.0.0.1");
        assert_eq!(local_ip("[::1]:443"), "[::1]");
    }
}
