//! The Feature Extractor (WiseTrans §III-B, Table I).
//!
//! Per protocol, over a sliding time window of the client's own finished requests, the
//! seven features of Table I. They describe not only the network (loss, RTT, goodput)
//! but, because each protocol has its own window, also the historical decisions (which
//! protocol carried requests) and what they cost (TTFB, completion goodput), as §III-B
//! asks: the model of the current protocol sees how that protocol has been doing.
//!
//! Definitions, with Table I's wording and the choices made where it is vague. All are
//! over the window: requests of that protocol whose record was observed within the last
//! `window_ms` (at most `window_max_requests` of them); "ok" requests are those without
//! an error and with a completion time. A feature with nothing to average is missing
//! (NaN), which the trees route by their default direction.
//!
//! | name | Table I | definition here |
//! |---|---|---|
//! | `retran_rate` | Retransmitted Bytes / Sent Bytes in time window | Σ lost / Σ sent packets of the window's requests, each request contributing the growth of its connection's counters since the previous record on that connection (QUIC: quinn's `lost_packets`/`sent_packets`; TCP: `tcpi_total_retrans`/`tcpi_segs_out`). Packets, not bytes: the snapshots count packets, and for full-size packets the ratio is the same. These are the client's own sent packets (for downloads mostly ACKs), the loss the client can see. |
//! | `rtt_avg_ms` | Average RTT in time window | mean of the smoothed RTT in the snapshot at the end of each request |
//! | `resp_rec_goodput_mbps` | Received Bytes / time between the first and last bytes of the response body | Σ bytes × 8 / Σ (rct − ttfb) over ok requests, in Mbit/s. Table I states it per request; a single small response arrives in one read (interval ≈ 0), so the window's ratio of sums is used |
//! | `ttfb_avg_ms` | Average TTFB in time window | mean TTFB of ok requests |
//! | `ttfb_ms` | TTFB of the current request | TTFB of the most recently observed ok request |
//! | `ttfb_rate` | TTFB / TTFB_avg | `ttfb_ms / ttfb_avg_ms` |
//! | `req_cmpl_goodput_mbps` | Received Bytes / time from sending the request to receiving the whole body | Σ bytes × 8 / Σ rct over ok requests, Mbit/s (rct includes a new connection's handshake) |
//!
//! TTFB and RCT are the client's (docs/client.md): from the request's start to the
//! first body byte, and to the last.
//!
//! Four more, gearbox's addition to Table I (issue 19: Table I's features describe a
//! protocol's own queue, and a policed or blackholed UDP path hides in them; the seed's
//! §II-B names UDP policing as what makes QUIC lose). Same window, same "ok" rule:
//!
//! | name | definition |
//! |---|---|
//! | `ttfb_rtt_ratio` | `ttfb_avg_ms / rtt_avg_ms`: round trips to the first byte. About 1-2 on a clean path (one for the request, more for a new connection's handshake); a policer that drops or queues the protocol's packets makes it grow while the smoothed RTT, taken from the packets that got through, does not |
//! | `cost_rtt_ratio` | mean over ok requests of `rct_ms / (1 + bytes / 14600)` (the Probe Agent's size-normalised cost: a response within the initial window takes about one round trip whatever its size), divided by `rtt_avg_ms`: round trips per request. A rate limit below the path's rate raises it |
//! | `fail_rate` | failed requests (not ok) / requests in the window. A blocked protocol's requests fail (the client gives up on a silent QUIC path in seconds, docs/client.md) |
//! | `loss_streak` | the number of most recent requests in a row, newest first, that failed or whose connection lost packets since its previous record: the request-level view of consecutive losses and probe timeouts (the snapshot carries no PTO count) |
//!
//! `gearbox.wisetrans.features` is the same code in Python; both are checked against one
//! test-vector file, `crates/gearbox-gears/tests/vectors/wisetrans_features.json`.
//!
//! Sums are kept running (added on arrival, subtracted on departure) so an update is
//! O(1); rejected alternative: recomputing over the window on every request, which costs
//! microseconds once the window holds hundreds of requests.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use gearbox_gear_api::ClientRecord;

use super::Transport;

/// Every feature name: Table I's seven in Table I order, then gearbox's four (module doc).
pub const FEATURE_NAMES: [&str; 11] = [
    "retran_rate",
    "rtt_avg_ms",
    "resp_rec_goodput_mbps",
    "ttfb_avg_ms",
    "ttfb_ms",
    "ttfb_rate",
    "req_cmpl_goodput_mbps",
    "ttfb_rtt_ratio",
    "cost_rtt_ratio",
    "fail_rate",
    "loss_streak",
];

/// Response bytes a request carries in about one round trip: ten 1460-byte segments, the
/// initial window (the Probe Agent's default `size_norm_bytes`), for `cost_rtt_ratio`.
pub const COST_NORM_BYTES: f64 = 14_600.0;

/// The TCP model's features: Table I's top 7 by rank for TCP (§IV-B1), in rank order.
pub const TCP_FEATURES: [&str; 7] = [
    "retran_rate",
    "ttfb_avg_ms",
    "rtt_avg_ms",
    "ttfb_ms",
    "resp_rec_goodput_mbps",
    "ttfb_rate",
    "req_cmpl_goodput_mbps",
];

/// The QUIC model's features: Table I's top 5 by rank for QUIC (§IV-B1), in rank order.
pub const QUIC_FEATURES: [&str; 5] = [
    "retran_rate",
    "ttfb_avg_ms",
    "ttfb_rate",
    "resp_rec_goodput_mbps",
    "rtt_avg_ms",
];

/// The features of one protocol at one moment (NaN: missing).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Features {
    /// Lost / sent packets in the window.
    pub retran_rate: f64,
    /// Mean smoothed RTT, ms.
    pub rtt_avg_ms: f64,
    /// Response receive goodput, Mbit/s.
    pub resp_rec_goodput_mbps: f64,
    /// Mean TTFB, ms.
    pub ttfb_avg_ms: f64,
    /// TTFB of the latest ok request, ms.
    pub ttfb_ms: f64,
    /// `ttfb_ms / ttfb_avg_ms`.
    pub ttfb_rate: f64,
    /// Request completion goodput, Mbit/s.
    pub req_cmpl_goodput_mbps: f64,
    /// `ttfb_avg_ms / rtt_avg_ms`.
    pub ttfb_rtt_ratio: f64,
    /// Mean size-normalised RCT of ok requests / `rtt_avg_ms`.
    pub cost_rtt_ratio: f64,
    /// Failed / all requests in the window.
    pub fail_rate: f64,
    /// Most recent requests in a row that failed or saw their connection lose packets.
    pub loss_streak: f64,
    /// Requests in the window (ok or not).
    pub requests: usize,
    /// Ok requests in the window.
    pub ok_requests: usize,
}

impl Features {
    /// A feature by its name (None: no such name).
    pub fn get(&self, name: &str) -> Option<f64> {
        Some(match name {
            "retran_rate" => self.retran_rate,
            "rtt_avg_ms" => self.rtt_avg_ms,
            "resp_rec_goodput_mbps" => self.resp_rec_goodput_mbps,
            "ttfb_avg_ms" => self.ttfb_avg_ms,
            "ttfb_ms" => self.ttfb_ms,
            "ttfb_rate" => self.ttfb_rate,
            "req_cmpl_goodput_mbps" => self.req_cmpl_goodput_mbps,
            "ttfb_rtt_ratio" => self.ttfb_rtt_ratio,
            "cost_rtt_ratio" => self.cost_rtt_ratio,
            "fail_rate" => self.fail_rate,
            "loss_streak" => self.loss_streak,
            _ => return None,
        })
    }

    /// `(name, value)` pairs in [`FEATURE_NAMES`] order.
    pub fn pairs(&self) -> [(&'static str, f64); 11] {
        [
            ("retran_rate", self.retran_rate),
            ("rtt_avg_ms", self.rtt_avg_ms),
            ("resp_rec_goodput_mbps", self.resp_rec_goodput_mbps),
            ("ttfb_avg_ms", self.ttfb_avg_ms),
            ("ttfb_ms", self.ttfb_ms),
            ("ttfb_rate", self.ttfb_rate),
            ("req_cmpl_goodput_mbps", self.req_cmpl_goodput_mbps),
            ("ttfb_rtt_ratio", self.ttfb_rtt_ratio),
            ("cost_rtt_ratio", self.cost_rtt_ratio),
            ("fail_rate", self.fail_rate),
            ("loss_streak", self.loss_streak),
        ]
    }
}

/// What one finished request adds to its protocol's window.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    ok: bool,
    rct_ms: f64,
    /// NaN when the record has none.
    ttfb_ms: f64,
    bytes: f64,
    /// NaN without a transport snapshot.
    rtt_ms: f64,
    sent: f64,
    lost: f64,
    /// Failed, or its connection lost packets since its previous record.
    lossy: bool,
}

/// Running sums over a window's samples.
#[derive(Debug, Clone, Copy, Default)]
struct Sums {
    sent: f64,
    lost: f64,
    rtt: f64,
    rtt_n: f64,
    ttfb: f64,
    ttfb_n: f64,
    ok_n: f64,
    ok_bytes: f64,
    rct: f64,
    /// Bytes and receive interval of ok requests with both a TTFB and an RCT.
    recv_bytes: f64,
    recv_ms: f64,
    /// Σ rct / (1 + bytes / COST_NORM_BYTES) of ok requests.
    cost: f64,
}

impl Sums {
    fn apply(&mut self, s: &Sample, sign: f64) {
        self.sent += sign * s.sent;
        self.lost += sign * s.lost;
        if s.rtt_ms.is_finite() {
            self.rtt += sign * s.rtt_ms;
            self.rtt_n += sign;
        }
        if s.ok {
            self.ok_n += sign;
            self.ok_bytes += sign * s.bytes;
            self.rct += sign * s.rct_ms;
            self.cost += sign * s.rct_ms / (1.0 + s.bytes / COST_NORM_BYTES);
            if s.ttfb_ms.is_finite() {
                self.ttfb += sign * s.ttfb_ms;
                self.ttfb_n += sign;
                let interval = s.rct_ms - s.ttfb_ms;
                if interval >= 0.0 {
                    self.recv_bytes += sign * s.bytes;
                    self.recv_ms += sign * interval;
                }
            }
        }
    }
}

/// One protocol's window.
#[derive(Debug, Clone, Default)]
struct Window {
    samples: VecDeque<Sample>,
    sums: Sums,
}

impl Window {
    fn push(&mut self, s: Sample, cap: usize) {
        self.sums.apply(&s, 1.0);
        self.samples.push_back(s);
        while self.samples.len() > cap.max(1) {
            self.pop();
        }
    }

    fn pop(&mut self) {
        if let Some(old) = self.samples.pop_front() {
            self.sums.apply(&old, -1.0);
        }
        if self.samples.is_empty() {
            // Start exact again: running sums drift by rounding.
            self.sums = Sums::default();
        }
    }

    fn evict(&mut self, now: Instant, window: Duration) {
        while let Some(front) = self.samples.front() {
            if now.saturating_duration_since(front.at) > window {
                self.pop();
            } else {
                break;
            }
        }
    }

    fn features(&self) -> Features {
        let s = &self.sums;
        let div = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
        let ttfb_ms = self
            .samples
            .iter()
            .rev()
            .find(|x| x.ok && x.ttfb_ms.is_finite())
            .map_or(f64::NAN, |x| x.ttfb_ms);
        let ttfb_avg_ms = div(s.ttfb, s.ttfb_n);
        let rtt_avg_ms = div(s.rtt, s.rtt_n);
        let n = self.samples.len() as f64;
        let ok_n = s.ok_n.round().max(0.0);
        let loss_streak = self.samples.iter().rev().take_while(|x| x.lossy).count();
        Features {
            retran_rate: div(s.lost, s.sent),
            rtt_avg_ms,
            // bits / (ms * 1000) = Mbit/s
            resp_rec_goodput_mbps: div(s.recv_bytes * 8.0, s.recv_ms * 1e3),
            ttfb_avg_ms,
            ttfb_ms,
            ttfb_rate: div(ttfb_ms, ttfb_avg_ms),
            req_cmpl_goodput_mbps: div(s.ok_bytes * 8.0, s.rct * 1e3),
            ttfb_rtt_ratio: div(ttfb_avg_ms, rtt_avg_ms),
            cost_rtt_ratio: div(div(s.cost, ok_n), rtt_avg_ms),
            fail_rate: div(n - ok_n, n),
            loss_streak: if self.samples.is_empty() {
                f64::NAN
            } else {
                loss_streak as f64
            },
            requests: self.samples.len(),
            ok_requests: ok_n as usize,
        }
    }
}

/// Cumulative packet counters last seen on a connection.
#[derive(Debug, Clone, Copy)]
struct ConnCounters {
    sent: u64,
    lost: u64,
    seen: Instant,
}

/// Keeps a window per protocol and turns finished requests into [`Features`].
#[derive(Debug, Clone)]
pub struct FeatureExtractor {
    /// Window length.
    window: Duration,
    /// Most samples per protocol window.
    max_requests: usize,
    tcp: Window,
    quic: Window,
    /// Per connection id: the counters of its previous record, to take deltas.
    conns: HashMap<u64, ConnCounters>,
}

/// Connections remembered before old ones are forgotten.
const MAX_CONNS: usize = 512;

impl FeatureExtractor {
    /// Windows of `window` holding at most `max_requests` requests each.
    pub fn new(window: Duration, max_requests: usize) -> Self {
        FeatureExtractor {
            window,
            max_requests,
            tcp: Window::default(),
            quic: Window::default(),
            conns: HashMap::new(),
        }
    }

    /// Adds a finished request (its record, observed at `now`) to its protocol's
    /// window, and returns that protocol.
    pub fn observe(&mut self, record: &ClientRecord, now: Instant) -> Transport {
        let transport = Transport::of(record.protocol);
        let (sent, lost) = self.deltas(record, now);
        let ok = record.error.is_none() && record.rct_ms.is_some_and(f64::is_finite);
        let sample = Sample {
            at: now,
            ok,
            rct_ms: record.rct_ms.filter(|v| v.is_finite() && *v >= 0.0).unwrap_or(0.0),
            ttfb_ms: record
                .ttfb_ms
                .filter(|v| v.is_finite() && *v >= 0.0)
                .unwrap_or(f64::NAN),
            bytes: record.bytes as f64,
            rtt_ms: record
                .transport
                .as_ref()
                .map(|t| t.rtt_ms)
                .filter(|v| v.is_finite() && *v >= 0.0)
                .unwrap_or(f64::NAN),
            sent: sent as f64,
            lost: lost as f64,
            lossy: !ok || lost > 0,
        };
        let (window, cap) = (self.window, self.max_requests);
        let w = self.window_mut(transport);
        w.evict(now, window);
        w.push(sample, cap);
        transport
    }

    /// The features of `transport`'s window at `now`.
    pub fn features(&mut self, transport: Transport, now: Instant) -> Features {
        let window = self.window;
        let w = self.window_mut(transport);
        w.evict(now, window);
        w.features()
    }

    fn window_mut(&mut self, t: Transport) -> &mut Window {
        match t {
            Transport::Tcp => &mut self.tcp,
            Transport::Quic => &mut self.quic,
        }
    }

    /// Packets sent and lost on the record's connection since its previous record.
    fn deltas(&mut self, record: &ClientRecord, now: Instant) -> (u64, u64) {
        let Some(t) = record.transport.as_ref() else {
            return (0, 0);
        };
        if record.conn_id == 0 {
            return (0, 0);
        }
        if self.conns.len() >= MAX_CONNS && !self.conns.contains_key(&record.conn_id) {
            let horizon = self.window * 2;
            self.conns
                .retain(|_, c| now.saturating_duration_since(c.seen) <= horizon);
            if self.conns.len() >= MAX_CONNS {
                self.conns.clear();
            }
        }
        let prev = self.conns.insert(
            record.conn_id,
            ConnCounters {
                sent: t.sent_packets,
                lost: t.lost_packets,
                seen: now,
            },
        );
        match prev {
            // Counters only grow on one connection; if they did not, it is a new one.
            Some(p) if t.sent_packets >= p.sent && t.lost_packets >= p.lost => {
                (t.sent_packets - p.sent, t.lost_packets - p.lost)
            }
            _ => (t.sent_packets, t.lost_packets),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use gearbox_gear_api::{Protocol, Side, TransportSnapshot, SCHEMA_VERSION};

    /// A successful record of `bytes` on connection `conn` with the given times.
    pub(crate) fn record(protocol: Protocol, rct_ms: f64, ttfb_ms: f64, bytes: u64, conn: u64) -> ClientRecord {
        ClientRecord {
            side: Side::Client,
            schema: SCHEMA_VERSION,
            time_unix_ms: 0.0,
            conn_id: conn,
            server_addr: "127.0.0.1:4433".into(),
            local_addr: "127.0.0.1:50000".into(),
            protocol,
            method: "GET".into(),
            url: "https://127.0.0.1:4433/bytes/1".into(),
            status: Some(200),
            bytes,
            rct_ms: Some(rct_ms),
            ttfb_ms: Some(ttfb_ms),
            new_connection: false,
            handshake_ms: None,
            transport: None,
            decision: None,
            decision_id: None,
            click: None,
            error: None,
            retried_from: None,
            retry_lost_ms: None,
            hedged: None,
            hedge_at_ms: None,
            path_index: None,
            path_decision: None,
        }
    }

    pub(crate) fn with_counters(mut r: ClientRecord, rtt_ms: f64, sent: u64, lost: u64) -> ClientRecord {
        r.transport = Some(TransportSnapshot {
            cc: "cubic".into(),
            rtt_ms,
            sent_packets: sent,
            lost_packets: lost,
            ..TransportSnapshot::default()
        });
        r
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

    #[test]
    fn features_match_hand_computed_values() {
        let t0 = Instant::now();
        let mut fx = FeatureExtractor::new(Duration::from_secs(10), 256);
        // Connection 7 (TCP): counters 100/2 then 300/5 -> deltas 100/2 and 200/3.
        fx.observe(
            &with_counters(record(Protocol::H2, 100.0, 40.0, 60_000, 7), 30.0, 100, 2),
            t0,
        );
        fx.observe(
            &with_counters(record(Protocol::H2, 200.0, 50.0, 15_000, 7), 50.0, 300, 5),
            t0 + Duration::from_secs(1),
        );
        // A failed request on connection 8: counts for loss and RTT, not for times.
        let mut failed = with_counters(record(Protocol::H1, 0.0, 0.0, 0, 8), 70.0, 100, 5);
        failed.error = Some("timeout".into());
        failed.rct_ms = None;
        failed.ttfb_ms = None;
        fx.observe(&failed, t0 + Duration::from_secs(2));
        let f = fx.features(Transport::Tcp, t0 + Duration::from_secs(2));
        assert_eq!((f.requests, f.ok_requests), (3, 2));
        assert!(close(f.retran_rate, (2.0 + 3.0 + 5.0) / (100.0 + 200.0 + 100.0)));
        assert!(close(f.rtt_avg_ms, (30.0 + 50.0 + 70.0) / 3.0));
        // 75 000 bytes over (60 + 150) ms of receiving.
        assert!(close(f.resp_rec_goodput_mbps, 75_000.0 * 8.0 / 210e-3 / 1e6));
        assert!(close(f.ttfb_avg_ms, 45.0));
        assert!(close(f.ttfb_ms, 50.0));
        assert!(close(f.ttfb_rate, 50.0 / 45.0));
        assert!(close(f.req_cmpl_goodput_mbps, 75_000.0 * 8.0 / 300e-3 / 1e6));
        // QUIC has its own (empty) window: everything missing.
        let q = fx.features(Transport::Quic, t0 + Duration::from_secs(2));
        assert_eq!(q.requests, 0);
        assert!(q.pairs().iter().all(|(_, v)| v.is_nan()));
    }

    #[test]
    fn requests_leave_the_window_after_its_length() {
        let t0 = Instant::now();
        let mut fx = FeatureExtractor::new(Duration::from_secs(10), 256);
        fx.observe(&record(Protocol::H3, 100.0, 20.0, 1000, 1), t0);
        fx.observe(&record(Protocol::H3, 300.0, 60.0, 1000, 1), t0 + Duration::from_secs(5));
        let f = fx.features(Transport::Quic, t0 + Duration::from_secs(10));
        assert!(close(f.ttfb_avg_ms, 40.0));
        let f = fx.features(Transport::Quic, t0 + Duration::from_millis(10_001));
        assert!(close(f.ttfb_avg_ms, 60.0), "the first one left");
        let f = fx.features(Transport::Quic, t0 + Duration::from_secs(16));
        assert_eq!(f.requests, 0);
        assert!(f.ttfb_avg_ms.is_nan());
    }

    #[test]
    fn the_window_holds_at_most_its_request_cap() {
        let t0 = Instant::now();
        let mut fx = FeatureExtractor::new(Duration::from_secs(10), 4);
        for i in 0..10 {
            fx.observe(&record(Protocol::H2, 100.0, f64::from(i), 10, 1), t0);
        }
        let f = fx.features(Transport::Tcp, t0);
        assert_eq!(f.requests, 4);
        assert!(close(f.ttfb_avg_ms, (6.0 + 7.0 + 8.0 + 9.0) / 4.0));
    }

    #[test]
    fn nonsense_in_a_record_does_not_poison_the_window() {
        let t0 = Instant::now();
        let mut fx = FeatureExtractor::new(Duration::from_secs(10), 16);
        let mut r = with_counters(record(Protocol::H2, f64::NAN, -5.0, 10, 3), f64::INFINITY, 5, 9);
        r.rct_ms = Some(f64::NAN);
        fx.observe(&r, t0);
        fx.observe(&record(Protocol::H2, 100.0, 50.0, 10, 4), t0);
        let f = fx.features(Transport::Tcp, t0);
        assert!(close(f.ttfb_avg_ms, 50.0));
        assert!(f.rtt_avg_ms.is_nan());
        assert!(f.retran_rate.is_finite());
    }
}
