//! What a switch did to its connection (Floo §5.4, Fig. 12-13): the loss rate and RTT
//! of the second before a switch against the second after it.
//!
//! Sans-IO: [`EffectTracker`] is driven by the controller's own events and their `now`
//! (no timer). It keeps a mark of the connection's counters (bytes sent, bytes lost) at
//! most every [`MARK_EVERY`], enough of them to reach [`EFFECT_WINDOW`] back, so a
//! switch can be given the window before it; after a switch it waits for the first event
//! at least [`EFFECT_WINDOW`] later and closes the window after it *before* that event is
//! counted. Nothing happens on the connection between its last event and the next, so
//! the counters then are those at exactly one window after the switch, however long the
//! connection was idle; its sRTT, min RTT and window are the latest before that moment.
//! The window before starts at the newest mark at least [`EFFECT_WINDOW`] before the
//! switch (between 1.0 and 1.1 s on a busy connection; `span_s` says how long), or at the
//! connection's start when it is younger.
//!
//! A switch that comes before the previous switch's window closed closes that window
//! early (`span_s` below one window); a connection that ends within the window leaves no
//! effect record.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use gearbox_gear_api::Cca;

use crate::path::PathState;
use crate::switchable::SwitchMode;

/// The window compared before and after a switch (Floo Fig. 13: the loss rate within 1 s
/// after the switch).
pub const EFFECT_WINDOW: Duration = Duration::from_secs(1);

/// How often the tracker marks the counters: a tenth of the window.
pub const MARK_EVERY: Duration = Duration::from_millis(100);

/// Marks kept: enough for [`EFFECT_WINDOW`] at one per [`MARK_EVERY`], and one more.
const MARKS: usize = 12;

/// One side of a switch: the connection over a window next to it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EffectWindow {
    /// How long the window is, seconds.
    pub span_s: f64,
    /// Bytes sent in the window.
    pub sent_bytes: u64,
    /// Bytes declared lost in the window.
    pub lost_bytes: u64,
    /// Lost over sent bytes (None: nothing sent).
    pub loss_rate: Option<f64>,
    /// Smoothed RTT at the window's switch end (before: at the switch; after: one window
    /// later), ms.
    pub srtt_ms: f64,
    /// Min RTT then, ms (None before the first sample).
    pub min_rtt_ms: Option<f64>,
    /// Congestion window then, bytes (before: the old algorithm's; after: the new one's).
    pub cwnd_bytes: u64,
}

/// The effect of one switch (`event = "cc_switch_effect"` at the edge, docs/telemetry.md).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SwitchEffect {
    /// Connection age at the switch, seconds (the `at_s` of its `cc_switch` record).
    pub at_s: f64,
    /// The algorithm switched from.
    pub from: Cca,
    /// The algorithm switched to.
    pub to: Cca,
    /// Full or part switching.
    pub mode: SwitchMode,
    /// The window before the switch.
    pub before: EffectWindow,
    /// The window after it.
    pub after: EffectWindow,
}

#[derive(Debug, Clone, Copy)]
struct Mark {
    at: Instant,
    sent: u64,
    lost: u64,
}

impl Mark {
    fn of(at: Instant, path: &PathState) -> Self {
        Mark {
            at,
            sent: path.sent,
            lost: path.lost,
        }
    }
}

#[derive(Debug, Clone)]
struct Open {
    at: Instant,
    at_s: f64,
    from: Cca,
    to: Cca,
    mode: SwitchMode,
    before: EffectWindow,
    start: Mark,
}

/// Marks and the switch whose window after is still open (module docs).
#[derive(Debug, Clone)]
pub struct EffectTracker {
    marks: VecDeque<Mark>,
    open: Option<Open>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn window(span: Duration, from: Mark, to: Mark, path: &PathState, cwnd: u64) -> EffectWindow {
    let sent = to.sent.saturating_sub(from.sent);
    let lost = to.lost.saturating_sub(from.lost);
    EffectWindow {
        span_s: span.as_secs_f64(),
        sent_bytes: sent,
        lost_bytes: lost,
        loss_rate: (sent > 0).then(|| lost as f64 / sent as f64),
        srtt_ms: ms(path.srtt),
        min_rtt_ms: (path.min_rtt != Duration::MAX).then(|| ms(path.min_rtt)),
        cwnd_bytes: cwnd,
    }
}

impl EffectTracker {
    /// A tracker for a connection that starts at `now` with `path`.
    pub fn new(now: Instant, path: &PathState) -> Self {
        let mut marks = VecDeque::with_capacity(MARKS);
        marks.push_back(Mark::of(now, path));
        EffectTracker { marks, open: None }
    }

    /// Call at the start of every controller event, before the event changes `path`;
    /// `cwnd` is the running algorithm's window. Returns the effect of the open switch
    /// when its window after closes here.
    pub fn on_event(&mut self, now: Instant, path: &PathState, cwnd: u64) -> Option<SwitchEffect> {
        if self
            .marks
            .back()
            .is_none_or(|m| now.saturating_duration_since(m.at) >= MARK_EVERY)
        {
            if self.marks.len() == MARKS {
                self.marks.pop_front();
            }
            self.marks.push_back(Mark::of(now, path));
        }
        let open = self.open.as_ref()?;
        let span = now.saturating_duration_since(open.at);
        if span < EFFECT_WINDOW {
            return None;
        }
        self.close(EFFECT_WINDOW, now, path, cwnd)
    }

    /// A switch from `from` to `to` in `mode` at `now` (connection age `at_s`), with the
    /// old algorithm's window `cwnd_before`; `path` as at the switch. Returns the effect
    /// of a previous switch whose window was still open (closed early).
    #[allow(clippy::too_many_arguments)]
    pub fn switched(
        &mut self,
        now: Instant,
        at_s: f64,
        from: Cca,
        to: Cca,
        mode: SwitchMode,
        path: &PathState,
        cwnd_before: u64,
    ) -> Option<SwitchEffect> {
        let early = match self.open.as_ref().map(|o| now.saturating_duration_since(o.at)) {
            Some(span) => self.close(span, now, path, cwnd_before),
            None => None,
        };
        let here = Mark::of(now, path);
        let start = self
            .marks
            .iter()
            .rev()
            .find(|m| now.saturating_duration_since(m.at) >= EFFECT_WINDOW)
            .or(self.marks.front())
            .copied()
            .unwrap_or(here);
        let before = window(now.saturating_duration_since(start.at), start, here, path, cwnd_before);
        self.open = Some(Open {
            at: now,
            at_s,
            from,
            to,
            mode,
            before,
            start: here,
        });
        early
    }

    fn close(&mut self, span: Duration, now: Instant, path: &PathState, cwnd: u64) -> Option<SwitchEffect> {
        let o = self.open.take()?;
        let after = window(span, o.start, Mark::of(now, path), path, cwnd);
        Some(SwitchEffect {
            at_s: o.at_s,
            from: o.from,
            to: o.to,
            mode: o.mode,
            before: o.before,
            after,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(sent: u64, lost: u64, srtt_ms: u64) -> PathState {
        let mut p = PathState::new(1200, Duration::from_millis(100));
        p.sent = sent;
        p.lost = lost;
        p.srtt = Duration::from_millis(srtt_ms);
        p.min_rtt = Duration::from_millis(40);
        p
    }

    #[test]
    fn the_second_before_and_the_second_after_a_switch_are_measured_from_the_events_alone() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut t = EffectTracker::new(t0, &path(0, 0, 100));
        // 2 s of events every 50 ms: 10 kB sent per 100 ms, no loss until 1.5 s, then 1 kB lost per 100 ms.
        for i in 1..=40u64 {
            let lost = if i > 30 { (i - 30) * 500 } else { 0 };
            assert!(t.on_event(at(i * 50), &path(i * 5_000, lost, 50), 30_000).is_none());
        }
        // The switch at 2.0 s: the newest mark at least 1 s before it is at 1.0 s.
        assert!(t
            .switched(
                at(2_000),
                2.0,
                Cca::Cubic,
                Cca::Bbr,
                SwitchMode::Part,
                &path(200_000, 5_000, 60),
                30_000
            )
            .is_none());
        // Then 40 kB sent and 8 kB lost by 0.9 s after; a quiet spell; the next event at 3.7 s.
        assert!(t.on_event(at(2_900), &path(240_000, 13_000, 80), 12_000).is_none());
        let e = t
            .on_event(at(3_700), &path(240_000, 13_000, 90), 14_000)
            .expect("the window after closes");
        assert_eq!(
            (e.from, e.to, e.mode, e.at_s),
            (Cca::Cubic, Cca::Bbr, SwitchMode::Part, 2.0)
        );
        assert_eq!((e.before.sent_bytes, e.before.lost_bytes), (100_000, 5_000));
        assert!((e.before.span_s - 1.0).abs() < 1e-9, "{e:?}");
        assert_eq!(e.before.loss_rate, Some(0.05));
        assert_eq!(
            (e.before.srtt_ms, e.before.min_rtt_ms, e.before.cwnd_bytes),
            (60.0, Some(40.0), 30_000)
        );
        assert_eq!(
            (e.after.sent_bytes, e.after.lost_bytes, e.after.loss_rate),
            (40_000, 8_000, Some(0.2))
        );
        assert_eq!(
            (e.after.span_s, e.after.srtt_ms, e.after.cwnd_bytes),
            (1.0, 90.0, 14_000)
        );
        // Closed once: later events are marks only.
        assert!(t.on_event(at(5_000), &path(300_000, 13_000, 90), 14_000).is_none());
    }

    #[test]
    fn a_young_connection_measures_from_its_start_and_a_second_switch_closes_the_first_early() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut t = EffectTracker::new(t0, &path(0, 0, 100));
        t.on_event(at(300), &path(20_000, 0, 70), 20_000);
        assert!(t
            .switched(
                at(400),
                0.4,
                Cca::Copa,
                Cca::Cubic,
                SwitchMode::Full,
                &path(30_000, 0, 70),
                20_000
            )
            .is_none());
        let early = t
            .switched(
                at(900),
                0.9,
                Cca::Cubic,
                Cca::Bbr,
                SwitchMode::Full,
                &path(50_000, 1_000, 75),
                25_000,
            )
            .expect("the first switch's window closes early");
        assert_eq!((early.from, early.to), (Cca::Copa, Cca::Cubic));
        assert!((early.before.span_s - 0.4).abs() < 1e-9 && early.before.sent_bytes == 30_000);
        assert!((early.after.span_s - 0.5).abs() < 1e-9, "{early:?}");
        assert_eq!((early.after.sent_bytes, early.after.lost_bytes), (20_000, 1_000));
        let e = t.on_event(at(1_900), &path(60_000, 1_000, 80), 26_000).unwrap();
        assert_eq!(
            (e.from, e.to, e.before.sent_bytes, e.after.sent_bytes),
            (Cca::Cubic, Cca::Bbr, 50_000, 10_000)
        );
        // Nothing sent in a window: no loss rate.
        let mut idle = EffectTracker::new(t0, &path(0, 0, 100));
        idle.switched(
            at(10),
            0.01,
            Cca::Cubic,
            Cca::Copa,
            SwitchMode::Part,
            &path(0, 0, 100),
            12_000,
        );
        let e = idle.on_event(at(1_500), &path(0, 0, 100), 12_000).unwrap();
        assert_eq!((e.before.loss_rate, e.after.loss_rate), (None, None));
    }
}
