//! The Floo loop of the edge: every selection period, each live QUIC connection's
//! Monitor (Floo §3.2, Table 2) goes to the period gear (§3.3, the Selector), and a
//! choice other than the running controller becomes a switch with state migration
//! (§3.4, the suite's Switcher, full or part).
//!
//! The transport metrics come from the connection's own controller state (the suite's
//! [`gearbox_cc::SwitchHandle`] status: windows, rates, RTTs, bytes sent, lost and
//! delivered since the start, read as differences over the period); the
//! application-level ones from [`AppCounters`](crate::live::AppCounters), which the
//! HTTP/3 path fills (unsent response bytes, the response wait Qws). The path metrics
//! cover the period, which the edge uses as its monitor window (Floo: a 10 s window in
//! a 12 s period; the controller's max-filter already spans its own window).
//!
//! Each decision leaves a telemetry record (`event = "cc_decision"`, docs/telemetry.md):
//! the connection, the running controller, the choice, the gear's reason and the
//! Monitor it was shown (raw units, so a learner can rebuild the state); the switch
//! itself leaves its `cc_switch` record (crate::live).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gearbox_cc::SwitchMode;
use gearbox_dataplane::telemetry::unix_ms_now;
use gearbox_gear_api::{Cca, CcaPeriodGear, ConnectionStats, Transport};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::live::QuicView;
use crate::Shared;

/// A gear the edge asks every selection period, and how it switches.
pub struct PeriodGear {
    /// The gear (Floo's selector, or a baseline).
    pub gear: Box<dyn CcaPeriodGear>,
    /// The selection period SP (Floo §5.1: 12 s).
    pub period: Duration,
    /// Full or part switching (Floo §3.4; P-Floo is part).
    pub mode: SwitchMode,
}

impl std::fmt::Debug for PeriodGear {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeriodGear")
            .field("period", &self.period)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

/// The decision record.
#[derive(Debug, Serialize)]
struct DecisionEvent<'a> {
    side: &'static str,
    schema: u32,
    event: &'static str,
    time_unix_ms: f64,
    conn_id: u64,
    transport: Transport,
    cca: Cca,
    choice: Cca,
    reason: &'a str,
    switched: bool,
    /// The Monitor the gear was shown (Floo Table 2, raw units).
    stats: &'a ConnectionStats,
}

/// Counters of a connection at the previous tick.
#[derive(Clone, Copy)]
struct Last {
    at: Instant,
    sent: u64,
    lost: u64,
    delivered: u64,
    wait_ms: Option<f64>,
}

/// Runs `pg` every period until `cancel`.
pub(crate) async fn run(shared: Arc<Shared>, mut pg: PeriodGear, cancel: CancellationToken) {
    let mut last: HashMap<u64, Last> = HashMap::new();
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + pg.period, pg.period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tick.tick() => {}
        }
        let now = Instant::now();
        let views = shared.live.quic_views();
        last.retain(|id, _| views.iter().any(|v| v.conn_id == *id));
        for v in views {
            let prev = last.get(&v.conn_id).copied();
            let (stats, next) = monitor(&v, prev, now, pg.period);
            last.insert(v.conn_id, next);
            let d = pg.gear.choose(&stats, now);
            let switched = d.choice != stats.cca && shared.live.switch(v.conn_id, d.choice, pg.mode).is_ok();
            tracing::debug!(conn_id = v.conn_id, cca = %stats.cca, choice = %d.choice, reason = %d.reason, "floo decision");
            shared.telemetry.write(&DecisionEvent {
                side: "edge",
                schema: 1,
                event: "cc_decision",
                time_unix_ms: unix_ms_now(),
                conn_id: v.conn_id,
                transport: Transport::Quic,
                cca: stats.cca,
                choice: d.choice,
                reason: &d.reason,
                switched,
                stats: &stats,
            });
        }
    }
}

/// The Monitor of one connection over the period since `prev` (or since its start).
fn monitor(v: &QuicView, prev: Option<Last>, now: Instant, period: Duration) -> (ConnectionStats, Last) {
    let s = &v.status;
    let p = &s.path;
    let (unsent, waits) = v.app.take();
    let wait_ms = (!waits.is_empty()).then(|| waits.iter().sum::<f64>() / waits.len() as f64);
    let (dt, sent, lost, delivered) = match prev {
        Some(l) => (
            now.saturating_duration_since(l.at),
            p.sent.saturating_sub(l.sent),
            p.lost.saturating_sub(l.lost),
            p.delivered.saturating_sub(l.delivered),
        ),
        None => (period, p.sent, p.lost, p.delivered),
    };
    let secs = dt.as_secs_f64();
    let gradient = match (wait_ms, prev.and_then(|l| l.wait_ms)) {
        (Some(w), Some(before)) if secs > 0.0 => Some((w - before) / secs),
        _ => None,
    };
    let ms = |d: Duration| (d != Duration::MAX).then_some(d.as_secs_f64() * 1e3);
    let rate = |bytes_per_s: u64| (bytes_per_s > 0).then_some(bytes_per_s * 8);
    let stats = ConnectionStats {
        conn_id: v.conn_id,
        transport: Transport::Quic,
        cca: s.cca,
        period_ms: secs * 1e3,
        max_delivery_rate_bps: rate(p.btl_bw),
        min_rtt_ms: ms(p.min_rtt),
        srtt_ms: ms(p.srtt),
        rtt_var_ms2: ms(p.rttvar).map(|v| v * v),
        loss_rate: (sent > 0).then(|| lost as f64 / sent as f64),
        cwnd_bytes: s.cwnd,
        pacing_rate_bps: rate(s.pacing_rate),
        goodput_bps: (secs > 0.0).then(|| delivered as f64 * 8.0 / secs),
        unsent_bytes: unsent,
        response_wait_ms: wait_ms,
        response_wait_gradient_ms_per_s: gradient,
        bytes_sent: sent,
    };
    let next = Last {
        at: now,
        sent: p.sent,
        lost: p.lost,
        delivered: p.delivered,
        wait_ms: wait_ms.or(prev.and_then(|l| l.wait_ms)),
    };
    (stats, next)
}
