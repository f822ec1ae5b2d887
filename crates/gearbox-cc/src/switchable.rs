//! Switching a live connection's congestion controller (Floo §3.4).
//!
//! quinn builds a connection's controller once, from the factory in its transport
//! config, and keeps it private: nothing outside can replace it. So the switch lives
//! inside the controller. [`Switchable`] is the controller quinn runs; it owns the
//! active [`Algorithm`] and the connection-level [`PathState`], and it takes switch
//! requests from a [`SwitchHandle`] that the edge keeps beside the connection.
//!
//! Two modes, so Floo's Fig. 13 comparison can be made:
//! - **Full** (Floo's default): phase migration and variable migration. The switch waits
//!   until the running algorithm is in its converged phase (at most
//!   [`SwitchConfig::max_defer`]), the new one starts in its converged phase from the
//!   old one's sending rate (cwnd and pacing rate, converted through the RTT), reading
//!   the observation variables kept here; a switch into BBR enters ProbeRTT first
//!   (Fig. 12d). Parameter variables are each algorithm's configuration and stay; the
//!   rest take their defaults.
//! - **Part** (P-Floo): only the connection-level variables carry over; the new
//!   algorithm starts from its defaults (initial window, slow start), at once.
//!
//! A request replaces one still pending (the gear's latest choice wins); a switch to the
//! algorithm already running is a no-op, recorded as such. Every request ends in one
//! [`SwitchRecord`] given to the handle's observer.

use std::any::Any;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gearbox_gear_api::Cca;
use quinn_proto::congestion::{Controller, ControllerFactory, ControllerMetrics};
use quinn_proto::RttEstimator;

use crate::algorithm::{Ack, Algorithm, Phase, SendingRate};
use crate::config::CcConfig;
use crate::effect::{EffectTracker, SwitchEffect};
use crate::path::{PathEstimator, PathState};

/// How much of the running controller's state a switch carries (Floo §3.4, §5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SwitchMode {
    /// Phase and variable migration (Floo).
    Full,
    /// Connection-level variables only (P-Floo).
    Part,
}

impl SwitchMode {
    /// `full` or `part`.
    pub fn name(self) -> &'static str {
        match self {
            SwitchMode::Full => "full",
            SwitchMode::Part => "part",
        }
    }
}

/// How a switch request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SwitchOutcome {
    /// The controller changed.
    Switched,
    /// The requested algorithm was already running: nothing changed.
    NoOp,
    /// A newer request arrived while this one waited; this one was dropped.
    Replaced,
    /// The stack refused it (kernel TCP: a controller the kernel does not offer).
    Refused,
}

/// One switch request's result, for telemetry (Floo §3.4; the figures of Fig. 3, 12).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SwitchRecord {
    /// Time since the controller was built (the connection's age), seconds.
    pub at_s: f64,
    /// The algorithm running before.
    pub from: Cca,
    /// The algorithm asked for.
    pub to: Cca,
    /// Mode asked for.
    pub mode: SwitchMode,
    /// What happened.
    pub outcome: SwitchOutcome,
    /// Phase of the old algorithm when it was switched out (its own name for it).
    pub phase_before: String,
    /// Phase of the algorithm running after.
    pub phase_after: String,
    /// Congestion window before, bytes.
    pub cwnd_before: u64,
    /// Congestion window after, bytes.
    pub cwnd_after: u64,
    /// Pacing rate before, bytes per second.
    pub pacing_rate_before: u64,
    /// Pacing rate after, bytes per second.
    pub pacing_rate_after: u64,
    /// How long the switch waited for a converged phase, seconds.
    pub deferred_s: f64,
}

/// Switching options, part of [`CcConfig`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SwitchConfig {
    /// Longest a full switch waits for the running algorithm to reach its converged
    /// phase before switching anyway, seconds. Floo gives no bound; 2 s is a sixth of
    /// its 12 s selection period, so a deferred switch still acts within the period.
    pub max_defer_s: f64,
}

impl Default for SwitchConfig {
    fn default() -> Self {
        SwitchConfig { max_defer_s: 2.0 }
    }
}

impl SwitchConfig {
    /// The bound as a duration.
    pub fn max_defer(&self) -> Duration {
        Duration::from_secs_f64(self.max_defer_s.clamp(0.0, 3600.0))
    }
}

/// A live view of a switchable controller, updated at every ACK frame: what Floo's
/// monitor reads about the controller (§3.2 Table 2's cwnd, pacing rate, current CCA)
/// and the path (delivery rate, min RTT, RTT variance, losses).
#[derive(Debug, Clone, PartialEq)]
pub struct ControllerStatus {
    /// Running algorithm.
    pub cca: Cca,
    /// Its phase, by its own name.
    pub phase: &'static str,
    /// Congestion window, bytes.
    pub cwnd: u64,
    /// Intended sending rate, bytes per second.
    pub pacing_rate: u64,
    /// The path as the connection sees it.
    pub path: PathState,
}

type Observer = Arc<dyn Fn(&SwitchRecord) + Send + Sync>;
type EffectObserver = Arc<dyn Fn(&SwitchEffect) + Send + Sync>;

#[derive(Debug, Clone, Copy)]
struct Request {
    to: Cca,
    mode: SwitchMode,
}

struct Shared {
    has_request: AtomicBool,
    /// Requests not yet taken by the controller, oldest first.
    requests: Mutex<Vec<Request>>,
    status: Mutex<Option<ControllerStatus>>,
    observer: Mutex<Option<Observer>>,
    effect_observer: Mutex<Option<EffectObserver>>,
    switches: AtomicU64,
}

/// The edge's hold on one connection's controller: ask for a switch, read its status.
/// Cheap to clone, `Send + Sync`.
#[derive(Clone)]
pub struct SwitchHandle(Arc<Shared>);

impl fmt::Debug for SwitchHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SwitchHandle")
            .field("switches", &self.switches())
            .finish_non_exhaustive()
    }
}

impl Default for SwitchHandle {
    fn default() -> Self {
        SwitchHandle::new()
    }
}

impl SwitchHandle {
    /// A handle with no controller yet; give it to [`SwitchableFactory::with_handle`].
    pub fn new() -> Self {
        SwitchHandle(Arc::new(Shared {
            has_request: AtomicBool::new(false),
            requests: Mutex::new(Vec::new()),
            status: Mutex::new(None),
            observer: Mutex::new(None),
            effect_observer: Mutex::new(None),
            switches: AtomicU64::new(0),
        }))
    }

    /// Asks the controller to run `to`, switching in `mode`. Takes effect inside the
    /// controller at its next event (a send or an ACK frame); a request still waiting
    /// there is replaced by this one.
    pub fn switch_to(&self, to: Cca, mode: SwitchMode) {
        lock(&self.0.requests).push(Request { to, mode });
        self.0.has_request.store(true, Ordering::Release);
    }

    /// Calls `observer` with the record of every request this controller finishes.
    pub fn set_observer(&self, observer: impl Fn(&SwitchRecord) + Send + Sync + 'static) {
        *lock(&self.0.observer) = Some(Arc::new(observer));
    }

    /// Calls `observer` with the effect of every switch that changed the controller: the
    /// connection's loss and RTT over the second before and the second after it
    /// ([`crate::effect`]; none for a connection that ends within that second).
    pub fn set_effect_observer(&self, observer: impl Fn(&SwitchEffect) + Send + Sync + 'static) {
        *lock(&self.0.effect_observer) = Some(Arc::new(observer));
    }

    /// The controller as of its latest ACK frame (None before the first).
    pub fn status(&self) -> Option<ControllerStatus> {
        lock(&self.0.status).clone()
    }

    /// Switches that changed the controller so far.
    pub fn switches(&self) -> u64 {
        self.0.switches.load(Ordering::Relaxed)
    }

    fn take_requests(&self) -> Vec<Request> {
        if !self.0.has_request.swap(false, Ordering::AcqRel) {
            return Vec::new();
        }
        std::mem::take(&mut *lock(&self.0.requests))
    }

    fn record(&self, record: &SwitchRecord) {
        if record.outcome == SwitchOutcome::Switched {
            self.0.switches.fetch_add(1, Ordering::Relaxed);
        }
        let observer = lock(&self.0.observer).clone();
        if let Some(observer) = observer {
            observer(record);
        }
    }

    fn effect(&self, effect: Option<SwitchEffect>) {
        let Some(effect) = effect else {
            return;
        };
        let observer = lock(&self.0.effect_observer).clone();
        if let Some(observer) = observer {
            observer(&effect);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The controller quinn runs for every connection of the suite's algorithms.
#[derive(Debug)]
pub struct Switchable {
    config: Arc<CcConfig>,
    cca: Cca,
    algorithm: Box<dyn Algorithm>,
    path: PathState,
    estimator: PathEstimator,
    handle: SwitchHandle,
    pending: Option<(Request, Instant)>,
    initial_window: u64,
    created: Instant,
    app_limited: bool,
    effect: EffectTracker,
}

impl Switchable {
    /// A controller running `cca` from `initial_window` bytes, switched through
    /// `handle`.
    pub fn new(
        config: Arc<CcConfig>,
        cca: Cca,
        initial_window: u64,
        handle: SwitchHandle,
        now: Instant,
        mtu: u16,
    ) -> Self {
        let path = PathState::new(mtu, crate::config::INITIAL_RTT);
        let algorithm = config.build(cca, initial_window, now, &path);
        let effect = EffectTracker::new(now, &path);
        Switchable {
            config,
            cca,
            algorithm,
            path,
            estimator: PathEstimator::new(),
            handle,
            pending: None,
            initial_window,
            created: now,
            app_limited: false,
            effect,
        }
    }

    /// The algorithm running now.
    pub fn cca(&self) -> Cca {
        self.cca
    }

    /// The running algorithm.
    pub fn algorithm(&self) -> &dyn Algorithm {
        self.algorithm.as_ref()
    }

    /// The connection-level observations.
    pub fn path(&self) -> &PathState {
        &self.path
    }

    /// Switches now, in the calling thread (what [`SwitchHandle::switch_to`] does at
    /// the controller's next event, without the deferral of a full switch).
    pub fn switch_now(&mut self, now: Instant, to: Cca, mode: SwitchMode) -> SwitchRecord {
        self.apply(now, Request { to, mode }, Duration::ZERO)
    }

    /// `Controller::on_ack` with quinn's smoothed RTT given as a value: quinn's
    /// `RttEstimator` can only be built inside quinn, and benchmarks and tests drive
    /// the controller without a connection.
    pub fn ack(&mut self, now: Instant, sent: Instant, bytes: u64, app_limited: bool, srtt: Duration) {
        self.track(now);
        self.estimator.on_ack(&mut self.path, now, sent, bytes, srtt);
        let ack = Ack {
            sent,
            bytes,
            app_limited,
            rtt: self.path.latest_rtt,
        };
        self.algorithm.on_ack(now, &ack, &self.path);
    }

    /// The switch-effect tracker's turn, before an event changes the path.
    fn track(&mut self, now: Instant) {
        let e = self.effect.on_event(now, &self.path, self.algorithm.window());
        self.handle.effect(e);
    }

    fn poll_switch(&mut self, now: Instant) {
        for req in self.handle.take_requests() {
            if let Some((old, seen)) = self.pending.take() {
                let waited = now.saturating_duration_since(seen);
                let rec = self.record(now, old, SwitchOutcome::Replaced, waited);
                self.handle.record(&rec);
            }
            if req.to == self.cca {
                let rec = self.record(now, req, SwitchOutcome::NoOp, Duration::ZERO);
                self.handle.record(&rec);
            } else {
                self.pending = Some((req, now));
            }
        }
        let Some((req, seen)) = self.pending else {
            return;
        };
        let waited = now.saturating_duration_since(seen);
        let converged = self.algorithm.phase() == Phase::Converged;
        if req.mode == SwitchMode::Full && !converged && waited < self.config.switch.max_defer() {
            return;
        }
        self.pending = None;
        let rec = self.apply(now, req, waited);
        // The status names the new controller before the switch is counted: a switch
        // applied in `on_sent` would otherwise show in `switches()` beside the old
        // controller's status until the next ACK frame (which an idle connection may
        // not get for long).
        self.write_status(&mut lock(&self.handle.0.status));
        self.handle.record(&rec);
    }

    fn record(&self, now: Instant, req: Request, outcome: SwitchOutcome, deferred: Duration) -> SwitchRecord {
        let rate = self.algorithm.sending_rate(&self.path);
        SwitchRecord {
            at_s: now.saturating_duration_since(self.created).as_secs_f64(),
            from: self.cca,
            to: req.to,
            mode: req.mode,
            outcome,
            phase_before: self.algorithm.phase_name().to_string(),
            phase_after: self.algorithm.phase_name().to_string(),
            cwnd_before: self.algorithm.window(),
            cwnd_after: self.algorithm.window(),
            pacing_rate_before: rate.pacing_rate,
            pacing_rate_after: rate.pacing_rate,
            deferred_s: deferred.as_secs_f64(),
        }
    }

    fn apply(&mut self, now: Instant, req: Request, deferred: Duration) -> SwitchRecord {
        if req.to == self.cca {
            return self.record(now, req, SwitchOutcome::NoOp, deferred);
        }
        let mut rec = self.record(now, req, SwitchOutcome::Switched, deferred);
        let before: SendingRate = self.algorithm.sending_rate(&self.path);
        let mut next = self.config.build(req.to, self.initial_window, now, &self.path);
        if req.mode == SwitchMode::Full {
            next.enter_converged(now, before, &self.path);
        }
        self.algorithm = next;
        self.cca = req.to;
        let after = self.algorithm.sending_rate(&self.path);
        rec.phase_after = self.algorithm.phase_name().to_string();
        rec.cwnd_after = self.algorithm.window();
        rec.pacing_rate_after = after.pacing_rate;
        let early = self
            .effect
            .switched(now, rec.at_s, rec.from, rec.to, rec.mode, &self.path, rec.cwnd_before);
        self.handle.effect(early);
        rec
    }

    fn publish_status(&self) {
        // try_lock: a reader holding the lock costs this ACK frame its update, never a
        // wait on the connection's path.
        if let Ok(mut status) = self.handle.0.status.try_lock() {
            self.write_status(&mut status);
        }
    }

    fn write_status(&self, status: &mut Option<ControllerStatus>) {
        let rate = self.algorithm.sending_rate(&self.path);
        match status.as_mut() {
            Some(s) => {
                s.cca = self.cca;
                s.phase = self.algorithm.phase_name();
                s.cwnd = self.algorithm.window();
                s.pacing_rate = rate.pacing_rate;
                s.path.clone_from(&self.path);
            }
            None => {
                *status = Some(ControllerStatus {
                    cca: self.cca,
                    phase: self.algorithm.phase_name(),
                    cwnd: self.algorithm.window(),
                    pacing_rate: rate.pacing_rate,
                    path: self.path.clone(),
                })
            }
        }
    }
}

impl Controller for Switchable {
    fn on_sent(&mut self, now: Instant, bytes: u64, _last_packet_number: u64) {
        self.track(now);
        self.estimator.on_sent(&mut self.path, now, bytes, self.app_limited);
        self.algorithm.on_sent(now, bytes, &self.path);
        if self.pending.is_some() || self.handle.0.has_request.load(Ordering::Relaxed) {
            self.poll_switch(now);
        }
    }

    fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64, app_limited: bool, rtt: &RttEstimator) {
        self.ack(now, sent, bytes, app_limited, rtt.get());
    }

    fn on_end_acks(&mut self, now: Instant, in_flight: u64, app_limited: bool, _largest_packet_num_acked: Option<u64>) {
        self.track(now);
        self.app_limited = app_limited;
        self.estimator.on_end_acks(&mut self.path, in_flight, app_limited);
        self.algorithm.on_end_acks(now, in_flight, app_limited, &self.path);
        if self.pending.is_some() || self.handle.0.has_request.load(Ordering::Relaxed) {
            self.poll_switch(now);
        }
        self.publish_status();
    }

    fn on_congestion_event(&mut self, now: Instant, sent: Instant, is_persistent_congestion: bool, lost_bytes: u64) {
        self.track(now);
        self.estimator.on_congestion_event(&mut self.path, lost_bytes);
        self.algorithm
            .on_congestion_event(now, sent, is_persistent_congestion, lost_bytes, &self.path);
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.path.mtu = new_mtu;
        self.algorithm.on_mtu_update(&self.path);
    }

    fn window(&self) -> u64 {
        self.algorithm.window()
    }

    fn metrics(&self) -> ControllerMetrics {
        let mut m = ControllerMetrics::default();
        m.congestion_window = self.algorithm.window();
        m.ssthresh = self.algorithm.ssthresh();
        m.pacing_rate = Some(self.algorithm.sending_rate(&self.path).pacing_rate.saturating_mul(8));
        m
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(Switchable {
            config: self.config.clone(),
            cca: self.cca,
            algorithm: self.algorithm.clone_box(),
            path: self.path.clone(),
            estimator: self.estimator.clone(),
            handle: self.handle.clone(),
            pending: self.pending,
            initial_window: self.initial_window,
            created: self.created,
            app_limited: self.app_limited,
            effect: self.effect.clone(),
        })
    }

    fn initial_window(&self) -> u64 {
        self.initial_window
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// Builds one [`Switchable`] per connection (quinn's `ControllerFactory`); every
/// controller it builds answers to the same [`SwitchHandle`], so give each connection
/// its own factory when the edge is to switch connections one by one.
#[derive(Debug, Clone)]
pub struct SwitchableFactory {
    config: Arc<CcConfig>,
    cca: Cca,
    initial_window: u64,
    handle: SwitchHandle,
}

impl SwitchableFactory {
    /// A factory for controllers that start with `cca` and `initial_window` bytes.
    pub fn new(config: Arc<CcConfig>, cca: Cca, initial_window: u64) -> Self {
        SwitchableFactory::with_handle(config, cca, initial_window, SwitchHandle::new())
    }

    /// The same, answering to `handle`.
    pub fn with_handle(config: Arc<CcConfig>, cca: Cca, initial_window: u64, handle: SwitchHandle) -> Self {
        SwitchableFactory {
            config,
            cca,
            initial_window,
            handle,
        }
    }

    /// The handle of the controllers this factory builds.
    pub fn handle(&self) -> &SwitchHandle {
        &self.handle
    }
}

impl ControllerFactory for SwitchableFactory {
    fn build(self: Arc<Self>, now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        Box::new(Switchable::new(
            self.config.clone(),
            self.cca,
            self.initial_window,
            self.handle.clone(),
            now,
            current_mtu,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collecting(handle: &SwitchHandle) -> Arc<Mutex<Vec<SwitchRecord>>> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        handle.set_observer(move |r| sink.lock().unwrap().push(r.clone()));
        seen
    }

    /// NewReno with a 24,000-byte initial window and 1,200-byte packets, switched by `handle`.
    fn newreno_24k(handle: &SwitchHandle, t0: Instant) -> Switchable {
        Switchable::new(
            Arc::new(CcConfig::default()),
            Cca::NewReno,
            24_000,
            handle.clone(),
            t0,
            1200,
        )
    }

    fn outcomes(seen: &Mutex<Vec<SwitchRecord>>) -> Vec<(Cca, Cca, SwitchOutcome)> {
        seen.lock().unwrap().iter().map(|r| (r.from, r.to, r.outcome)).collect()
    }

    #[test]
    fn requests_act_at_the_next_event_and_a_later_one_replaces_a_waiting_one() {
        let t0 = Instant::now();
        let handle = SwitchHandle::new();
        let seen = collecting(&handle);
        let config = Arc::new(CcConfig::default());
        let mut c = Switchable::new(config, Cca::NewReno, 12_000, handle.clone(), t0, 1200);
        // NewReno starts in slow start: a full switch waits for congestion avoidance.
        handle.switch_to(Cca::NewReno, SwitchMode::Full);
        handle.switch_to(Cca::Cubic, SwitchMode::Full);
        handle.switch_to(Cca::Bbr, SwitchMode::Full);
        assert!(
            outcomes(&seen).is_empty(),
            "nothing happens before the controller's next event"
        );
        c.on_end_acks(t0, 0, false, None);
        assert_eq!(
            outcomes(&seen),
            vec![
                (Cca::NewReno, Cca::NewReno, SwitchOutcome::NoOp),
                (Cca::NewReno, Cca::Cubic, SwitchOutcome::Replaced)
            ]
        );
        assert_eq!(c.cca(), Cca::NewReno, "BBR waits for NewReno to converge");
        // The wait is bounded by switch.max_defer_s (2 s).
        c.on_end_acks(t0 + Duration::from_millis(1999), 0, false, None);
        assert_eq!(c.cca(), Cca::NewReno);
        c.on_end_acks(t0 + Duration::from_secs(2), 0, false, None);
        assert_eq!(c.cca(), Cca::Bbr);
        let last = seen.lock().unwrap().last().cloned().unwrap();
        assert_eq!((last.outcome, last.deferred_s), (SwitchOutcome::Switched, 2.0));
        assert_eq!(last.phase_before, "slow_start");
        assert_eq!(handle.switches(), 1);
    }

    #[test]
    fn a_part_switch_restarts_from_the_initial_window_at_once() {
        let t0 = Instant::now();
        let handle = SwitchHandle::new();
        let seen = collecting(&handle);
        let mut c = newreno_24k(&handle, t0);
        handle.switch_to(Cca::Cubic, SwitchMode::Part);
        c.on_sent(t0, 1200, 0);
        assert_eq!(c.cca(), Cca::Cubic);
        assert_eq!(c.window(), 24_000);
        let rec = seen.lock().unwrap()[0].clone();
        assert_eq!(
            (rec.mode, rec.deferred_s, rec.cwnd_before),
            (SwitchMode::Part, 0.0, 24_000)
        );
        assert_eq!(c.path().sent, 1200, "connection-level state carries over");
    }

    #[test]
    fn the_status_names_the_new_controller_once_the_switch_is_counted() {
        // A switch applied while sending (no ACK frame after it): what the admin port
        // lists must not show the count of the new controller beside the old one's name.
        let t0 = Instant::now();
        let handle = SwitchHandle::new();
        let mut c = newreno_24k(&handle, t0);
        c.on_end_acks(t0, 0, false, None);
        assert_eq!(handle.status().map(|s| s.cca), Some(Cca::NewReno));
        handle.switch_to(Cca::Cubic, SwitchMode::Part);
        c.on_sent(t0, 1200, 0);
        assert_eq!(handle.switches(), 1);
        assert_eq!(handle.status().map(|s| s.cca), Some(Cca::Cubic));
    }

    #[test]
    fn a_switch_leaves_its_effect_once_the_second_after_it_has_passed() {
        let t0 = Instant::now();
        let handle = SwitchHandle::new();
        let effects = Arc::new(Mutex::new(Vec::new()));
        let sink = effects.clone();
        handle.set_effect_observer(move |e| sink.lock().unwrap().push(e.clone()));
        let mut c = newreno_24k(&handle, t0);
        let srtt = Duration::from_millis(50);
        // One 1,200-byte packet sent and acknowledged every 10 ms; every tenth packet of
        // the second after the switch is lost.
        let mut switched_at = None;
        for i in 0..300u64 {
            let now = t0 + Duration::from_millis(10 * i);
            if i == 150 {
                handle.switch_to(Cca::Cubic, SwitchMode::Part);
            }
            c.on_sent(now, 1200, i);
            if switched_at.is_none() && c.cca() == Cca::Cubic {
                switched_at = Some(i);
            }
            if (151..251).contains(&i) && i % 10 == 0 {
                c.on_congestion_event(now, now, false, 1200);
            } else {
                c.ack(now, now, 1200, false, srtt);
                c.on_end_acks(now, 0, false, Some(i));
            }
        }
        assert_eq!(switched_at, Some(150), "a part switch acts at the next event");
        let effects = effects.lock().unwrap().clone();
        assert_eq!(effects.len(), 1, "{effects:?}");
        let e = &effects[0];
        assert_eq!((e.from, e.to, e.mode), (Cca::NewReno, Cca::Cubic, SwitchMode::Part));
        assert!((e.at_s - 1.5).abs() < 1e-9, "{e:?}");
        // Before: from the mark at 0.5 s to the switch (its own send counted): 101
        // packets, none lost.
        assert_eq!((e.before.lost_bytes, e.before.loss_rate), (0, Some(0.0)));
        assert!(
            (e.before.span_s - 1.0).abs() < 1e-9 && e.before.sent_bytes == 101 * 1200,
            "{e:?}"
        );
        // After: closed at the first event at 2.5 s before it counts: 99 packets, 9 of
        // them lost (1.6 s ... 2.4 s).
        assert_eq!((e.after.sent_bytes, e.after.lost_bytes), (99 * 1200, 9 * 1200));
        assert_eq!(e.after.loss_rate, Some(9.0 / 99.0));
        assert_eq!(e.after.span_s, 1.0);
        assert_eq!(e.before.srtt_ms, 50.0);
        assert!(e.after.cwnd_bytes > 0 && e.before.cwnd_bytes > 0);
    }
}
