//! The Floo loop of the edge: every selection period, each live connection's
//! Monitor (Floo §3.2, Table 2) goes to the period gear (§3.3, the Selector), and a
//! choice other than the running controller becomes a switch with state migration
//! (§3.4, the suite's Switcher, full or part).
//!
//! Kernel TCP connections get the same treatment through `TCP_INFO` and
//! `TCP_CONGESTION` (the suite's kernel side: Reno, Cubic, BBR, gearbox's BPF Westwood+;
//! a choice the kernel lacks, such as Copa, is refused and recorded), so a policy trained
//! on QUIC can be run on TCP and its decisions read from telemetry.
//!
//! The QUIC transport metrics come from the connection's own controller state (the suite's
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

use gearbox_cc::{ControllerStatus, SwitchMode, TcpCc, TcpCcHandle};
use gearbox_dataplane::telemetry::unix_ms_now;
use gearbox_gear_api::{Cca, CcaPeriodGear, ConnectionStats, Transport};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::live::{AppCounters, PeriodView};
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
        let views = shared.live.period_views();
        last.retain(|id, _| views.iter().any(|v| v.conn_id() == *id));
        for v in views {
            let conn_id = v.conn_id();
            let prev = last.get(&conn_id).copied();
            let Some((stats, next)) = (match &v {
                PeriodView::Quic { status, app, .. } => Some(quic_monitor(conn_id, status, app, prev, now, pg.period)),
                PeriodView::Tcp { handle, .. } => tcp_monitor(conn_id, handle, prev, now, pg.period),
            }) else {
                continue;
            };
            last.insert(conn_id, next);
            let d = pg.gear.choose(&stats, now);
            let switched = d.choice != stats.cca && shared.live.switch(conn_id, d.choice, pg.mode).is_ok();
            tracing::debug!(conn_id, cca = %stats.cca, choice = %d.choice, reason = %d.reason, "floo decision");
            shared.telemetry.write(&DecisionEvent {
                side: "edge",
                schema: 1,
                event: "cc_decision",
                time_unix_ms: unix_ms_now(),
                conn_id,
                transport: stats.transport,
                cca: stats.cca,
                choice: d.choice,
                reason: &d.reason,
                switched,
                stats: &stats,
            });
        }
    }
}

/// The Monitor of one QUIC connection over the period since `prev` (or since its start).
fn quic_monitor(
    conn_id: u64,
    s: &ControllerStatus,
    app: &AppCounters,
    prev: Option<Last>,
    now: Instant,
    period: Duration,
) -> (ConnectionStats, Last) {
    let p = &s.path;
    let (unsent, waits) = app.take();
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
        conn_id,
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

/// The Monitor of one kernel TCP connection from its `TCP_INFO` (None when the socket
/// cannot be read or runs a controller gearbox does not name). The kernel gives the
/// latest delivery-rate sample, not the period's maximum, and no response wait: the
/// Monitor's `Thpt_max` is that sample and `Qws` is missing (the HTTP/2 path does not
/// count it). Loss is retransmitted over sent bytes in the period.
fn tcp_monitor(
    conn_id: u64,
    handle: &TcpCcHandle,
    prev: Option<Last>,
    now: Instant,
    period: Duration,
) -> Option<(ConnectionStats, Last)> {
    let info = gearbox_dataplane::transport::tcp_info(handle.socket()).ok()?;
    let cca = handle.current().ok()?.parse::<TcpCc>().ok()?.cca();
    let (sent_total, lost_total, acked_total) = (info.tcpi_bytes_sent, info.tcpi_bytes_retrans, info.tcpi_bytes_acked);
    let (dt, sent, lost, delivered) = match prev {
        Some(l) => (
            now.saturating_duration_since(l.at),
            sent_total.saturating_sub(l.sent),
            lost_total.saturating_sub(l.lost),
            acked_total.saturating_sub(l.delivered),
        ),
        None => (period, sent_total, lost_total, acked_total),
    };
    let secs = dt.as_secs_f64();
    let us = |v: u32| (v != 0 && v != u32::MAX).then_some(f64::from(v) / 1e3);
    let stats = ConnectionStats {
        conn_id,
        transport: Transport::Tcp,
        cca,
        period_ms: secs * 1e3,
        max_delivery_rate_bps: (info.tcpi_delivery_rate > 0).then_some(info.tcpi_delivery_rate * 8),
        min_rtt_ms: us(info.tcpi_min_rtt),
        srtt_ms: us(info.tcpi_rtt),
        rtt_var_ms2: us(info.tcpi_rttvar).map(|v| v * v),
        loss_rate: (sent > 0).then(|| lost as f64 / sent as f64),
        cwnd_bytes: u64::from(info.tcpi_snd_cwnd) * u64::from(info.tcpi_snd_mss),
        pacing_rate_bps: (info.tcpi_pacing_rate > 0 && info.tcpi_pacing_rate != u64::MAX)
            .then_some(info.tcpi_pacing_rate.saturating_mul(8)),
        goodput_bps: (secs > 0.0).then(|| delivered as f64 * 8.0 / secs),
        unsent_bytes: u64::from(info.tcpi_notsent_bytes),
        response_wait_ms: None,
        response_wait_gradient_ms_per_s: None,
        bytes_sent: sent,
    };
    let next = Last {
        at: now,
        sent: sent_total,
        lost: lost_total,
        delivered: acked_total,
        wait_ms: None,
    };
    Some((stats, next))
}
