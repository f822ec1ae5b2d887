//! Prometheus-style counters, served as text on the admin port.
//!
//! A dozen atomic counters rendered in the text exposition format by hand: the
//! `prometheus` / `prometheus-client` crates bring a registry and label machinery
//! that this fixed set does not need.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use gearbox_dataplane::telemetry::Protocol;

const PROTOCOLS: [Protocol; 3] = [Protocol::H1, Protocol::H2, Protocol::H3];

fn slot(p: Protocol) -> usize {
    match p {
        Protocol::H1 => 0,
        Protocol::H2 => 1,
        Protocol::H3 => 2,
    }
}

/// Edge counters, by protocol.
#[derive(Default)]
pub struct Metrics {
    requests: [AtomicU64; 3],
    response_bytes: [AtomicU64; 3],
    connections: [AtomicU64; 3],
    open_connections: [AtomicU64; 3],
    /// TLS or QUIC handshakes that failed or timed out.
    pub handshake_failures_tcp: AtomicU64,
    /// QUIC handshakes that failed or timed out.
    pub handshake_failures_quic: AtomicU64,
    switch_counts: std::sync::OnceLock<Arc<crate::live::SwitchCounts>>,
    /// Requests and connections stopped by a limit (docs/edge.md "Limits").
    pub limit_hits: crate::limits::HitCounts,
}

impl Metrics {
    /// Counts a finished request and its response bytes.
    pub fn request(&self, p: Protocol, bytes: u64) {
        self.requests[slot(p)].fetch_add(1, Relaxed);
        self.response_bytes[slot(p)].fetch_add(bytes, Relaxed);
    }

    /// Counts a connection opening; the guard counts it closed when dropped.
    pub fn connection(self: &Arc<Self>, p: Protocol) -> OpenGuard {
        self.connections[slot(p)].fetch_add(1, Relaxed);
        self.open_connections[slot(p)].fetch_add(1, Relaxed);
        OpenGuard { m: self.clone(), p }
    }

    /// Where congestion-control switches are counted (set once by the edge).
    pub(crate) fn set_switch_counts(&self, counts: Arc<crate::live::SwitchCounts>) {
        let _ = self.switch_counts.set(counts);
    }

    /// Requests served so far over `p`.
    pub fn requests(&self, p: Protocol) -> u64 {
        self.requests[slot(p)].load(Relaxed)
    }

    /// The text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let series: [(&str, &str, &str, &[AtomicU64; 3]); 4] = [
            ("gearbox_requests_total", "counter", "Requests served.", &self.requests),
            (
                "gearbox_response_bytes_total",
                "counter",
                "Response body bytes sent.",
                &self.response_bytes,
            ),
            (
                "gearbox_connections_total",
                "counter",
                "Connections accepted.",
                &self.connections,
            ),
            (
                "gearbox_open_connections",
                "gauge",
                "Connections open now.",
                &self.open_connections,
            ),
        ];
        for (name, kind, help, values) in series {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for p in PROTOCOLS {
                let _ = writeln!(out, "{name}{{protocol=\"{p}\"}} {}", values[slot(p)].load(Relaxed));
            }
        }
        let _ = writeln!(
            out,
            "# HELP gearbox_handshake_failures_total Handshakes that failed or timed out.\n\
             # TYPE gearbox_handshake_failures_total counter\n\
             gearbox_handshake_failures_total{{transport=\"tcp\"}} {}\n\
             gearbox_handshake_failures_total{{transport=\"quic\"}} {}",
            self.handshake_failures_tcp.load(Relaxed),
            self.handshake_failures_quic.load(Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP gearbox_limit_hits_total Requests and connections stopped by a limit.\n\
             # TYPE gearbox_limit_hits_total counter"
        );
        for hit in crate::limits::Hit::ALL {
            let _ = writeln!(
                out,
                "gearbox_limit_hits_total{{limit=\"{}\"}} {}",
                hit.name(),
                self.limit_hits.get(hit)
            );
        }
        let _ = writeln!(
            out,
            "# HELP process_cpu_seconds_total User and system CPU time of the edge process.\n\
             # TYPE process_cpu_seconds_total counter\n\
             process_cpu_seconds_total {:.6}",
            process_cpu_seconds()
        );
        let _ = writeln!(
            out,
            "# HELP gearbox_cc_switches_total Congestion-control switches of live connections, by pair and mode.\n\
             # TYPE gearbox_cc_switches_total counter"
        );
        for (from, to, mode, n) in self.switch_counts.get().map(|c| c.snapshot()).unwrap_or_default() {
            let _ = writeln!(
                out,
                "gearbox_cc_switches_total{{from=\"{from}\",to=\"{to}\",mode=\"{mode}\"}} {n}"
            );
        }
        out
    }
}

/// Decrements the open-connection gauge when the connection ends.
pub struct OpenGuard {
    m: Arc<Metrics>,
    p: Protocol,
}

impl OpenGuard {
    /// The connection turned out to speak another protocol (ALPN chose h1, not h2).
    pub fn reclassify(&mut self, p: Protocol) {
        if p != self.p {
            self.m.connections[slot(self.p)].fetch_sub(1, Relaxed);
            self.m.open_connections[slot(self.p)].fetch_sub(1, Relaxed);
            self.m.connections[slot(p)].fetch_add(1, Relaxed);
            self.m.open_connections[slot(p)].fetch_add(1, Relaxed);
            self.p = p;
        }
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.m.open_connections[slot(self.p)].fetch_sub(1, Relaxed);
    }
}

/// User plus system CPU seconds of this process so far (`getrusage(RUSAGE_SELF)`), the
/// standard `process_cpu_seconds_total` of Prometheus exporters.
pub fn process_cpu_seconds() -> f64 {
    // SAFETY: getrusage writes one rusage into the zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return f64::NAN;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}
