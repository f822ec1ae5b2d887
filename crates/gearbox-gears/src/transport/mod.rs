//! The transport gear: TCP or QUIC for each request, decided on the client.
//!
//! WiseTrans (§III) is four parts, each its own file here and each a sans-IO
//! object that takes `now`:
//!
//! - [`features`]: the Feature Extractor (§III-B, Table I), per protocol over a sliding
//!   time window of the client's own finished requests.
//! - [`monitor`]: the Network Monitor (§III-C), two XGBoost models chosen by the current
//!   protocol, each giving the probability that the *other* protocol would be faster.
//! - [`probe`]: the Probe Agent (§III-D), live experiments with the application's real
//!   requests, three per protocol, alternating (by default also the rest of the burst,
//!   `TransportConfig::probe_balance`).
//! - [`rollback`]: the Rollback Checker (§III-E), which undoes a switch that made things
//!   clearly worse.
//!
//! Beside them, gearbox's additions for a protocol that breaks while in use (issue 19):
//! the failover (a failed or stalled request, [`wisetrans`]) and [`jump`], the cost-jump
//! rule (a protocol whose requests suddenly take many more round trips).
//!
//! [`wisetrans::WiseTrans`] puts them together as WiseTrans-v1 (the monitor's output
//! decides directly, §IV-A1) or WiseTrans-v2 (the monitor's score change triggers live
//! experiments, §IV-A2). Baselines sit beside it (docs/architecture.md, principle 3
//! "Baselines and an oracle for every decision"): [`Static`] (TCP-only, QUIC-only),
//! [`strawman::Strawman`] (§IV-E1, a linear boundary over RTT,
//! bandwidth and loss), `mlp` (WiseTrans-v1 with the monitor's XGBoost models replaced by
//! Table II's 128-64 MLP, §IV-E2, [`WiseTrans::mlp`]) and [`race::Race`] (what Chromium
//! does: race QUIC against TCP).
//! [`transport_gear`] builds any of them from a [`Mode`] name.
//!
//! Every choice comes with a reason that the client writes into the record's
//! `decision` field, in one machine-readable format ([`Reason`]):
//!
//! ```text
//! <mode>;phase=<phase>;score=<score|->;choice=<tcp|quic|race>;why=<why>[;<key>=<value>]*
//! ```
//!
//! e.g. `wisetrans-v2;phase=probe;score=0.730;choice=quic;why=probe-4of6;ex=2;trigger=score-jump`.
//! docs/wisetrans.md lists every phase, why and key.
//!
//! Design choice: the gear keeps its state per origin (`host:port`), since a different
//! server is a different path with its own UDP treatment (§II-B "spatial heterogeneity");
//! the rejected alternative, one state for the whole client, would let one origin's
//! blocked UDP steer requests to another.

pub mod features;
pub mod jump;
pub mod monitor;
pub mod oracle;
pub mod probe;
pub mod race;
pub mod rollback;
pub mod strawman;
pub mod swap;
pub mod wisetrans;

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use gearbox_gear_api::{ClientRecord, Decision, TransportChoice, TransportGear};
use serde::{Deserialize, Serialize};

/// The two transports WiseTrans chooses between (defined with the gear shape, since the
/// client and the simulator name them too).
pub use gearbox_gear_api::Transport;

pub use features::{FeatureExtractor, Features, FEATURE_NAMES, QUIC_FEATURES, TCP_FEATURES};
pub use monitor::{NetworkMonitor, MLP_PREFIX};
pub use oracle::{Oracle, OracleStep};
pub use probe::{trimmed_mean_drop_farthest, two_most_similar_mean, ProbeAgent};
pub use race::Race;
pub use rollback::{RollbackChecker, Verdict};
pub use strawman::{Strawman, StrawmanCoefficients};
pub use swap::{MonitorSlot, SwappableWiseTrans, WISETRANS_GEAR};
pub use wisetrans::{Version, WiseTrans};

/// Which transport gear, by its name on the command line and in decision strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Mode {
    /// Always TCP (static baseline).
    #[serde(rename = "tcp")]
    Tcp,
    /// Always QUIC (static baseline).
    #[serde(rename = "quic")]
    Quic,
    /// WiseTrans-v1: the Network Monitor decides directly.
    #[serde(rename = "wisetrans-v1")]
    WiseTransV1,
    /// WiseTrans-v2: the monitor's score change triggers live experiments.
    #[serde(rename = "wisetrans-v2")]
    WiseTransV2,
    /// The §IV-E1 strawman: a linear boundary over RTT, bandwidth and loss.
    #[serde(rename = "strawman")]
    Strawman,
    /// WiseTrans-v1 with Table II's MLP classifier as the Network Monitor (§IV-E2,
    /// footnote 4): `mlp-tcp.json`, `mlp-quic.json`.
    #[serde(rename = "mlp")]
    Mlp,
    /// Chromium-style racing ([`TransportChoice::Race`]).
    #[serde(rename = "race")]
    Race,
    /// The live oracle: the protocol of each phase as the lab's static runs found it,
    /// from [`TransportConfig::oracle_schedule`] ([`oracle`]).
    #[serde(rename = "oracle")]
    Oracle,
}

impl Mode {
    /// Every mode, in the order the CLI lists them.
    pub const ALL: [Mode; 8] = [
        Mode::Tcp,
        Mode::Quic,
        Mode::WiseTransV1,
        Mode::WiseTransV2,
        Mode::Strawman,
        Mode::Mlp,
        Mode::Race,
        Mode::Oracle,
    ];

    /// The mode's name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Tcp => "tcp",
            Mode::Quic => "quic",
            Mode::WiseTransV1 => "wisetrans-v1",
            Mode::WiseTransV2 => "wisetrans-v2",
            Mode::Strawman => "strawman",
            Mode::Mlp => "mlp",
            Mode::Race => "race",
            Mode::Oracle => "oracle",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not a [`Mode`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown transport gear {name:?}; valid: tcp, quic, wisetrans-v1, wisetrans-v2, strawman, mlp, race, oracle")]
pub struct UnknownMode {
    /// The name given.
    pub name: String,
}

impl std::str::FromStr for Mode {
    type Err = UnknownMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownMode { name: s.to_string() })
    }
}

/// Settings of the transport gears. Every duration is in milliseconds (the unit is in
/// the name); defaults are the paper's values where it gives one, and otherwise the
/// choice documented on the field. Loads from TOML or JSON with unknown fields refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TransportConfig {
    /// Sliding window of the Feature Extractor, ms. The paper gives no number for
    /// Table I's "time window"; 10 s is the paper's one stated time scale over which
    /// request performance is compared (the Rollback Checker's interval, §IV-E4), and
    /// covers several click bursts (13.5 requests in about 1.5 s, §III-D).
    pub window_ms: u64,
    /// At most this many requests per protocol in the window (the oldest leave first),
    /// so a bulk workload cannot make the window unbounded.
    pub window_max_requests: usize,
    /// WiseTrans-v1 switches when the monitor's probability that the other protocol is
    /// faster exceeds this (0.5: the classifier's own decision, §IV-A1).
    pub v1_switch_threshold: f64,
    /// The monitor's score is used only when the current protocol has at least this
    /// many completed requests in the window, so one request cannot flip a decision.
    pub min_window_requests: usize,
    /// After a switch, WiseTrans-v1 keeps the new protocol at least this long, ms: one
    /// click burst (about 1.5 s, §III-D) of its own requests must be seen before it is
    /// judged; while a rollback check runs the switch is held for the whole check.
    pub min_dwell_ms: u64,
    /// WiseTrans-v2 explores when |score - score after the last exploration| exceeds
    /// this (§III-D "exceeds a threshold we set"; the paper gives no value). 0.3 on a
    /// probability: a change that moves a confident 0.2 past the 0.5 boundary.
    pub explore_score_delta: f64,
    /// Score-triggered explorations are at least this far apart, ms (bounded
    /// exploration, docs/architecture.md principle 6 "Safe by default"): a jump seen
    /// sooner waits and explores on the first request after the interval. New-origin and
    /// path-change explorations are not held back.
    pub min_explore_interval_ms: u64,
    /// An exploration whose six probe requests (and extras, see `probe_balance`) have
    /// not all finished after this long is abandoned (the last selected protocol
    /// stays), ms.
    pub explore_timeout_ms: u64,
    /// WiseTrans-v2: requests issued after the six probe slots while the exploration
    /// runs continue the TCP/QUIC alternation as the exploration's extras
    /// (`why=probe-extra`), and the outcome waits for them and counts them (gearbox's
    /// addition to §III-D, see [`probe`]). Why: a click issues ~13.5 requests at once;
    /// under the paper's rule the six slots are the front of the burst and the rest all
    /// ride on the last selected protocol, whose probes are then slowed by that extra
    /// load while no probe sees the back of the queue (in the lab v2 picked TCP where
    /// QUIC-only was 3x faster). `false` is the paper's rule to the letter: those
    /// requests use the last selected protocol (`why=probe-wait`).
    pub probe_balance: bool,
    /// With `probe_balance`, at most this many extras per exploration; later requests
    /// of the exploration use the last selected protocol (`why=probe-wait`). 12: more
    /// than a click's tail (about 7.5 requests after the six slots; 13.5 per click,
    /// §III-D), while bounding how many requests an exploration can take.
    pub probe_max_extra: usize,
    /// Response-size normalisation of a request's cost: `rct_ms / (1 + bytes / this)`.
    /// 14 600 bytes is ten 1460-byte segments, the initial window: responses up to about
    /// that size take about one round trip whatever their size, larger ones grow linearly.
    pub size_norm_bytes: f64,
    /// A failed request counts as this normalised cost, ms (a failure is worse than any
    /// slow success; the order of a client timeout).
    pub failed_request_cost_ms: f64,
    /// Rollback Checker on (§III-E: "an optional module").
    pub rollback: bool,
    /// Interval compared before and after a switch, ms (§IV-E4: 10 s).
    pub rollback_interval_ms: u64,
    /// Roll back when the mean normalised cost after the switch exceeds the mean before
    /// by more than this fraction. 0.2: §IV-E3 finds 75% of switches change completion
    /// time by less than 20%, so smaller changes are within what switches normally do.
    pub rollback_deterioration: f64,
    /// Requests needed on each side of the switch before the checker judges.
    pub rollback_min_requests: usize,
    /// After a rollback, WiseTrans-v1 does not switch again for this long, ms (its model
    /// just proved wrong for this path; six intervals).
    pub rollback_hold_ms: u64,
    /// When the Rollback Checker finds a switch made things worse, it first sends the
    /// next six requests alternately on the old and the new protocol and goes back only
    /// if the old protocol's three beat the new one's, or at once when the new one's take
    /// over twice as long (gearbox's addition to §III-E, [`rollback`]). Why: the checker
    /// compares the old protocol *before* the switch with the new one *after* it, so on
    /// a path that worsens after the switch it blames the protocol for the path. Measured
    /// (docs/wisetrans.md, three evaluations): faster than the paper's rule where paths
    /// change under a right choice (`plain`), slower where the new protocol itself broke
    /// (`udp`, a UDP policer). `false` is the paper's rule: go back at once.
    pub rollback_verify: bool,
    /// WiseTrans-v1 and v2 leave the current protocol at once when one of its requests
    /// fails or stalls (an `error`, or QUIC given up under the request and the request
    /// retried over TCP, docs/client.md "Falling back from QUIC"), outside an
    /// exploration, at most once per `min_dwell_ms`; the failure counts on the left
    /// protocol's side of the Rollback Checker. Why: a failed request is the strongest
    /// evidence the monitor gets, and waiting for the model or the checker's 10 s
    /// interval on a blocked protocol fails (or stalls) every request until then.
    pub switch_on_failure: bool,
    /// WiseTrans-v1 and v2 leave the current protocol at once when the median of its
    /// latest three requests, in round trips, exceeds `cost_jump_factor` times both its
    /// own history in the window before them and the other protocol's last known
    /// requests ([`jump`]), outside an exploration or verification, at most once per
    /// `min_dwell_ms` (shared with the failover); the switch goes on probation with the
    /// Rollback Checker. Why: a rate-limited protocol answers slowly instead of failing,
    /// so the failover does not act, and in the lab the model did not see it either
    /// (docs/wisetrans.md, `block` class).
    pub switch_on_cost_jump: bool,
    /// The cost-jump rule's factor (2: the Rollback Checker's early verdict's,
    /// [`rollback::EARLY_FACTOR`]; a change the path's noise does not make in two of
    /// three requests).
    pub cost_jump_factor: f64,
    /// WiseTrans-v2: an exploration ends as soon as every request of one protocol has
    /// answered and the other's, counted with the time they have run so far, take over
    /// twice as long in median ([`probe::ProbeAgent::early`]); and requests issued after
    /// the exploration's slots and extras go to the protocol leading it so far
    /// ([`probe::ProbeAgent::leader`]). `false`: every exploration waits for all its
    /// answers and those requests use the last selected protocol. Why: under a UDP rate
    /// limit QUIC answers slowly instead of failing, and meanwhile every request issued
    /// took an extra or the last selected protocol.
    pub probe_early: bool,
    /// WiseTrans-v2: after an exploration whose loser was clearly worse (its value over
    /// twice the winner's, or an early verdict, [`probe`]), the next score-triggered
    /// exploration waits twice as long as the one before (`min_explore_interval_ms` x 2,
    /// x 4, at most x `explore_backoff_max`); an exploration that finds the two close
    /// resets it, and a new path or origin explores at once as before. Why: on a path
    /// where one protocol is throttled each exploration sends half a click burst through
    /// the throttle (docs/wisetrans.md, `block` class); the doubling is Chromium's for a
    /// broken QUIC (`race` above). 1: no back-off.
    pub explore_backoff_max: u32,
    /// Most origins kept (least recently used leave first).
    pub max_origins: usize,
    /// Mode `oracle` only: the protocol per phase, `[[oracle_schedule]] from_ms = 0,
    /// choice = "quic"`, `from_ms` after the gear's first request, in time order
    /// ([`oracle`]; the lab writes it from the static runs, docs/wisetrans.md, `oracle.rs`).
    pub oracle_schedule: Vec<OracleStep>,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            window_ms: 10_000,
            window_max_requests: 256,
            v1_switch_threshold: 0.5,
            min_window_requests: 3,
            min_dwell_ms: 2_000,
            explore_score_delta: 0.3,
            min_explore_interval_ms: 10_000,
            explore_timeout_ms: 30_000,
            probe_balance: true,
            probe_max_extra: 12,
            size_norm_bytes: 14_600.0,
            failed_request_cost_ms: 10_000.0,
            rollback: true,
            rollback_interval_ms: 10_000,
            rollback_deterioration: 0.2,
            rollback_min_requests: 3,
            rollback_hold_ms: 60_000,
            rollback_verify: true,
            switch_on_failure: true,
            switch_on_cost_jump: true,
            probe_early: true,
            cost_jump_factor: 2.0,
            explore_backoff_max: 4,
            max_origins: 256,
            oracle_schedule: Vec::new(),
        }
    }
}

/// A gear configuration file that cannot be used: the file's own error (which names
/// the file, line, column and field), or a field whose value cannot work.
#[derive(Debug, thiserror::Error)]
pub enum GearConfigError {
    /// Unreadable, not TOML, an unknown field or a wrong type.
    #[error(transparent)]
    File(#[from] gearbox_dataplane::toml_file::TomlFileError),
    /// A value out of range.
    #[error("{path}: invalid value for `{field}`: {message}")]
    Invalid {
        /// The file.
        path: std::path::PathBuf,
        /// The field.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
}

impl TransportConfig {
    /// Reads a TOML file with any of the fields (`gearbox load --gear-config`); missing
    /// fields keep their defaults, unknown ones are refused.
    pub fn from_file(path: &Path) -> Result<Self, GearConfigError> {
        let c: TransportConfig = gearbox_dataplane::toml_file::read(path)?;
        c.validate().map_err(|(field, message)| GearConfigError::Invalid {
            path: path.into(),
            field,
            message: message.to_string(),
        })?;
        Ok(c)
    }

    /// The first field whose value cannot work, and why.
    pub fn validate(&self) -> Result<(), (&'static str, &'static str)> {
        let positive = [
            ("window_ms", self.window_ms),
            ("window_max_requests", self.window_max_requests as u64),
            ("rollback_interval_ms", self.rollback_interval_ms),
            ("explore_timeout_ms", self.explore_timeout_ms),
            ("max_origins", self.max_origins as u64),
            ("explore_backoff_max", u64::from(self.explore_backoff_max)),
        ];
        if let Some((field, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err((field, "must be at least 1"));
        }
        let unit = [
            ("v1_switch_threshold", self.v1_switch_threshold),
            ("explore_score_delta", self.explore_score_delta),
        ];
        if let Some((field, _)) = unit.iter().find(|(_, v)| !(0.0..=1.0).contains(v)) {
            return Err((field, "must be a probability, between 0 and 1"));
        }
        let non_negative = [
            ("size_norm_bytes", self.size_norm_bytes),
            ("failed_request_cost_ms", self.failed_request_cost_ms),
            ("rollback_deterioration", self.rollback_deterioration),
        ];
        if let Some((field, _)) = non_negative.iter().find(|(_, v)| !(v.is_finite() && *v >= 0.0)) {
            return Err((field, "must be a finite number, 0 or more"));
        }
        if !(self.cost_jump_factor.is_finite() && self.cost_jump_factor >= 1.0) {
            return Err(("cost_jump_factor", "must be a finite number, 1 or more"));
        }
        if self.oracle_schedule.windows(2).any(|w| w[1].from_ms < w[0].from_ms) {
            return Err((
                "oracle_schedule",
                "steps must be in time order (from_ms not decreasing)",
            ));
        }
        Ok(())
    }
}

/// A successful request's completion time, ms (`None`: an error, or no usable time).
fn completed_rct(record: &ClientRecord) -> Option<f64> {
    record
        .rct_ms
        .filter(|rct| record.error.is_none() && rct.is_finite() && *rct >= 0.0)
}

/// A request's completion time as the gear counts it, ms: its RCT, or
/// `failed_request_cost_ms` for a failed request.
pub fn request_rct(record: &ClientRecord, cfg: &TransportConfig) -> f64 {
    completed_rct(record).unwrap_or(cfg.failed_request_cost_ms)
}

/// A request's cost as the Probe Agent and Rollback Checker compare it: completion
/// time normalised for response size, `rct_ms / (1 + bytes / size_norm_bytes)`; a
/// failed request (error, or no completion time) costs `failed_request_cost_ms`.
pub fn request_cost(record: &ClientRecord, cfg: &TransportConfig) -> f64 {
    match completed_rct(record) {
        Some(rct) => {
            let norm = if cfg.size_norm_bytes > 0.0 {
                1.0 + record.bytes as f64 / cfg.size_norm_bytes
            } else {
                1.0
            };
            rct / norm
        }
        None => cfg.failed_request_cost_ms,
    }
}

/// The origin (`host:port`, port 443 by default) of an `https://` URL, as the client
/// names it when it asks the gear.
pub fn origin_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    &rest[..end]
}

/// Whether `origin` (as [`origin_of`] returns it) carries an explicit port.
fn has_port(origin: &str) -> bool {
    match origin.rfind(':') {
        Some(i) => !origin[i..].contains(']'),
        None => false,
    }
}

/// The key a record's origin is kept under: `host:port` as the client gives it to
/// `choose` (the default port 443 made explicit).
pub(crate) fn origin_key(url: &str) -> String {
    let o = origin_of(url);
    if has_port(o) {
        o.to_string()
    } else {
        format!("{o}:443")
    }
}

/// The reason of one decision, written as
/// `<mode>;phase=<phase>;score=<score|->;choice=<choice>;why=<why>[;<key>=<value>]*`.
///
/// Values never contain `;` or `=` (extras are sanitised), so the string splits on
/// `;` and then on the first `=`.
#[derive(Debug, Clone, PartialEq)]
pub struct Reason<'a> {
    /// The gear's [`Mode`] name.
    pub mode: &'static str,
    /// Where the gear is: `static`, `fallback`, `warmup`, `exploit`, `probe`, `check`
    /// (exploiting while a rollback check runs), `race`.
    pub phase: &'static str,
    /// The score the decision saw (WiseTrans: P(the other protocol is faster);
    /// strawman: P(QUIC is better)), or none.
    pub score: Option<f64>,
    /// What was chosen.
    pub choice: TransportChoice,
    /// Why, in a word or two (`stay`, `switch`, `probe-3of6`, ...).
    pub why: &'a str,
    /// Further `key=value` pairs.
    pub extra: &'a [(&'static str, &'a str)],
}

impl Reason<'_> {
    /// The decision string.
    pub fn render(&self) -> String {
        let mut s = String::with_capacity(96);
        let _ = write!(s, "{};phase={};score=", self.mode, self.phase);
        match self.score {
            Some(v) if v.is_finite() => {
                let _ = write!(s, "{v:.3}");
            }
            _ => s.push('-'),
        }
        let _ = write!(s, ";choice={};why={}", self.choice.name(), self.why);
        for (k, v) in self.extra {
            s.push(';');
            s.push_str(k);
            s.push('=');
            s.extend(v.chars().map(|c| match c {
                ';' | '=' => '_',
                c if c.is_control() => ' ',
                c => c,
            }));
        }
        s
    }
}

/// One `key=value` of a decision string (the first field, the mode, has key `mode`).
pub fn decision_field<'a>(decision: &'a str, key: &str) -> Option<&'a str> {
    let mut parts = decision.split(';');
    let mode = parts.next()?;
    if key == "mode" {
        return Some(mode);
    }
    parts.find_map(|kv| kv.split_once('=').filter(|(k, _)| *k == key).map(|(_, v)| v))
}

/// The static baselines (TCP-only, QUIC-only), with reasons in the gear's decision
/// format.
#[derive(Debug, Clone)]
pub struct Static {
    transport: Transport,
    mode: Mode,
}

impl Static {
    /// Always `transport`.
    pub fn new(transport: Transport) -> Self {
        let mode = match transport {
            Transport::Tcp => Mode::Tcp,
            Transport::Quic => Mode::Quic,
        };
        Static { transport, mode }
    }
}

impl TransportGear for Static {
    fn choose(&mut self, _origin: &str, _now: Instant) -> Decision<TransportChoice> {
        let choice = TransportChoice::from(self.transport);
        let reason = Reason {
            mode: self.mode.name(),
            phase: "static",
            score: None,
            choice,
            why: "static",
            extra: &[],
        };
        Decision::new(choice, reason.render())
    }

    fn observe(&mut self, _record: &ClientRecord, _now: Instant) {}
}

/// The transport gear for `mode`. `model_dir` holds the WiseTrans models (`tcp.json`,
/// `quic.json` and their `.meta.json` sidecars), the `mlp` mode's networks
/// (`mlp-tcp.json`, `mlp-quic.json` + sidecars) and the strawman's coefficients
/// (`strawman.json`); without it, or with a missing or broken model, WiseTrans and `mlp`
/// log a warning once and choose TCP, saying `why=no-model` in every reason, and the
/// strawman uses its documented default coefficients. Never fails.
pub fn transport_gear(mode: Mode, model_dir: Option<&Path>, config: TransportConfig) -> Box<dyn TransportGear> {
    match mode {
        Mode::Tcp => Box::new(Static::new(Transport::Tcp)),
        Mode::Quic => Box::new(Static::new(Transport::Quic)),
        Mode::WiseTransV1 => Box::new(WiseTrans::load(Version::V1, model_dir, config)),
        Mode::WiseTransV2 => Box::new(WiseTrans::load(Version::V2, model_dir, config)),
        Mode::Strawman => Box::new(Strawman::load(model_dir, config)),
        Mode::Mlp => Box::new(WiseTrans::mlp(model_dir, config)),
        Mode::Race => Box::new(Race::new()),
        Mode::Oracle => Box::new(Oracle::new(&config)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gearbox_gear_api::Protocol;

    #[test]
    fn the_no_jump_gear_config_turns_off_issue_19s_throttle_rules_and_a_bad_factor_is_refused() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/gear/no-jump.toml");
        let c = TransportConfig::from_file(&path).unwrap();
        assert_eq!(
            (
                c.switch_on_cost_jump,
                c.probe_early,
                c.explore_backoff_max,
                c.switch_on_failure
            ),
            (false, false, 1, true)
        );
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, "cost_jump_factor = 0.5\n").unwrap();
        let msg = TransportConfig::from_file(&bad).unwrap_err().to_string();
        assert!(msg.contains("cost_jump_factor") && msg.contains("bad.toml"), "{msg}");
    }

    #[test]
    fn the_oracle_schedule_reads_from_a_gear_config_file_and_must_be_in_time_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("oracle.toml");
        std::fs::write(
            &path,
            "[[oracle_schedule]]\nfrom_ms = 0\nchoice = \"quic\"\n\n[[oracle_schedule]]\nfrom_ms = 6500\nchoice = \"tcp\"\n",
        )
        .unwrap();
        let c = TransportConfig::from_file(&path).unwrap();
        assert_eq!(
            c.oracle_schedule,
            vec![
                OracleStep {
                    from_ms: 0,
                    choice: Transport::Quic
                },
                OracleStep {
                    from_ms: 6500,
                    choice: Transport::Tcp
                },
            ]
        );
        std::fs::write(
            &path,
            "[[oracle_schedule]]\nfrom_ms = 10\nchoice = \"quic\"\n[[oracle_schedule]]\nfrom_ms = 5\nchoice = \"tcp\"\n",
        )
        .unwrap();
        let msg = TransportConfig::from_file(&path).unwrap_err().to_string();
        assert!(msg.contains("oracle_schedule") && msg.contains("time order"), "{msg}");
        std::fs::write(&path, "[[oracle_schedule]]\nfrom_ms = 0\nchoice = \"sctp\"\n").unwrap();
        let msg = TransportConfig::from_file(&path).unwrap_err().to_string();
        assert!(msg.contains("oracle.toml:3"), "{msg}");
    }

    #[test]
    fn a_gear_config_file_sets_fields_keeps_defaults_and_names_bad_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gear.toml");
        std::fs::write(&path, "rollback = false\nwindow_ms = 5000\n").unwrap();
        let c = TransportConfig::from_file(&path).unwrap();
        assert!(!c.rollback);
        assert_eq!(c.window_ms, 5000);
        assert_eq!(c.min_dwell_ms, TransportConfig::default().min_dwell_ms);

        std::fs::write(&path, "rollback = false\nrollbak_hold_ms = 1\n").unwrap();
        let msg = TransportConfig::from_file(&path).unwrap_err().to_string();
        assert!(
            msg.contains("gear.toml:2:1") && msg.contains("rollbak_hold_ms"),
            "{msg}"
        );

        std::fs::write(&path, "explore_score_delta = 3.0\n").unwrap();
        let msg = TransportConfig::from_file(&path).unwrap_err().to_string();
        assert!(
            msg.contains("gear.toml") && msg.contains("explore_score_delta"),
            "{msg}"
        );
    }

    #[test]
    fn probe_balance_is_on_by_default_and_a_gear_config_file_can_turn_it_off() {
        let d = TransportConfig::default();
        assert!(d.probe_balance);
        assert_eq!(d.probe_max_extra, 12);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gear.toml");
        std::fs::write(&path, "probe_balance = false\nprobe_max_extra = 4\n").unwrap();
        let c = TransportConfig::from_file(&path).unwrap();
        assert!(!c.probe_balance);
        assert_eq!(c.probe_max_extra, 4);
    }

    #[test]
    fn modes_parse_from_their_names_and_nothing_else() {
        for m in Mode::ALL {
            assert_eq!(m.name().parse::<Mode>(), Ok(m));
        }
        assert_eq!("WiseTrans-V2".parse::<Mode>(), Ok(Mode::WiseTransV2));
        let err = "wisetrans".parse::<Mode>().unwrap_err();
        assert!(err.to_string().contains("wisetrans-v1"), "{err}");
    }

    #[test]
    fn decision_strings_have_the_documented_shape_and_parse_back() {
        let s = Reason {
            mode: "wisetrans-v2",
            phase: "probe",
            score: Some(0.7333),
            choice: TransportChoice::Quic,
            why: "probe-4of6",
            extra: &[("ex", "2"), ("detail", "a;b=c")],
        }
        .render();
        assert_eq!(
            s,
            "wisetrans-v2;phase=probe;score=0.733;choice=quic;why=probe-4of6;ex=2;detail=a_b_c"
        );
        assert_eq!(decision_field(&s, "mode"), Some("wisetrans-v2"));
        assert_eq!(decision_field(&s, "choice"), Some("quic"));
        assert_eq!(decision_field(&s, "ex"), Some("2"));
        assert_eq!(decision_field(&s, "nope"), None);
        let none = Reason {
            mode: "tcp",
            phase: "static",
            score: None,
            choice: TransportChoice::Tcp,
            why: "static",
            extra: &[],
        }
        .render();
        assert_eq!(none, "tcp;phase=static;score=-;choice=tcp;why=static");
    }

    #[test]
    fn origins_of_urls_match_what_the_client_asks_about() {
        assert_eq!(origin_key("https://127.0.0.1:4433/bytes/10"), "127.0.0.1:4433");
        assert_eq!(origin_key("https://example.org/x?y"), "example.org:443");
        assert_eq!(origin_key("https://[::1]:8443/"), "[::1]:8443");
        assert_eq!(origin_key("https://[::1]/"), "[::1]:443");
        assert_eq!(origin_key("https://h"), "h:443");
    }

    #[test]
    fn cost_is_completion_time_per_initial_window_and_failures_cost_the_most() {
        let cfg = TransportConfig::default();
        let mut r = features::tests::record(Protocol::H2, 100.0, 40.0, 14_600, 1);
        assert!((request_cost(&r, &cfg) - 50.0).abs() < 1e-9);
        r.bytes = 0;
        assert!((request_cost(&r, &cfg) - 100.0).abs() < 1e-9);
        r.error = Some("timeout".into());
        assert_eq!(request_cost(&r, &cfg), cfg.failed_request_cost_ms);
    }

    #[test]
    fn static_gears_say_static() {
        let mut g = transport_gear(Mode::Quic, None, TransportConfig::default());
        let d = g.choose("a:443", Instant::now());
        assert_eq!(d.choice, TransportChoice::Quic);
        assert_eq!(d.reason, "quic;phase=static;score=-;choice=quic;why=static");
        assert_eq!(d.id, None);
    }
}
