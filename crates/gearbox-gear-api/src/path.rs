//! Client, per request on a multipath client: which local path carries it (SAILfish
//! §4.2.1).
//!
//! gearbox's multipath is one connection per local address (docs/architecture.md), so
//! scheduling a stream onto a path (SAILfish's action, §4.2.1.2) is choosing the local
//! address whose connection carries the request. SAILfish's state (§4.2.1.1) is, per
//! path and per scheduling epoch, the bandwidth estimate, the smoothed RTT and the
//! counts of lost, retransmitted and sent packets: that is [`PathState`]. Its reward
//! (§4.2.1.3, eq. 4.1) needs the stream's completion time, which the request's
//! [`ClientRecord`] carries (`rct_ms`, with `local_addr` naming the path).
//!
//! The static choice the client makes today (each emulated workload client pinned to
//! path `client_index % paths`) is the baseline this decision point replaces, so the
//! request says which workload client it belongs to.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::decision::Decision;
use crate::record::ClientRecord;

/// A request about to be scheduled onto a path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathRequest {
    /// The request URL.
    pub url: String,
    /// RFC 9218 urgency, 0 (most urgent) to 7 (SAILfish schedules prioritised streams,
    /// §4.1).
    pub urgency: u8,
    /// Response size the workload expects, bytes, when it is known in advance.
    pub expected_bytes: Option<u64>,
    /// The emulated workload client the request belongs to (`prefix << 8 | host`),
    /// when it comes from a workload.
    pub workload_client: Option<u32>,
}

/// How many recent sRTT samples [`PathState::srtt_history_ms`] keeps (the input of
/// SAILfish's 1-D convolution over each path's recent RTTs, §5.1.2).
pub const SRTT_HISTORY: usize = 8;

/// One path's state at a scheduling decision (SAILfish §4.2.1.1), the one place where
/// per-path state lives: every path scheduler, heuristic or learned, reads this.
///
/// The client fills it from quinn's statistics of the path's QUIC connection and from
/// what it has scheduled on the path. Counters cover the scheduling epoch, which is one
/// page load (SAILfish §5.1.4: one epoch = one page load).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct PathState {
    /// Position of the path in the client's list of local addresses.
    pub index: usize,
    /// The local address the path's connection is bound to.
    pub local_addr: String,
    /// Bandwidth estimate: delivery rate towards the client, bits per second, the
    /// largest of the recent samples taken while the path had streams in flight (BBR's
    /// windowed maximum, which SAILfish's monitor follows, §4.1.2). `None`: no sample yet.
    pub delivery_rate_bps: Option<u64>,
    /// Smoothed RTT, milliseconds (`None`: no connection on the path yet).
    pub srtt_ms: Option<f64>,
    /// The last [`SRTT_HISTORY`] sRTT samples, oldest first, milliseconds (fewer early on).
    pub srtt_history_ms: Vec<f64>,
    /// Smallest RTT seen on the connection, milliseconds.
    pub min_rtt_ms: Option<f64>,
    /// Congestion window of the client's side of the connection, bytes.
    pub cwnd_bytes: Option<u64>,
    /// Response bytes requested on the path and not yet received: the download still
    /// in flight as the client sees it (the sender's own bytes in flight are not in
    /// quinn's statistics).
    pub bytes_in_flight: u64,
    /// Streams scheduled on the path and not yet complete.
    pub streams_in_flight: usize,
    /// Packets declared lost in the epoch.
    pub lost_packets: u64,
    /// Packets retransmitted in the epoch. QUIC never resends a packet as such: the
    /// frames of each lost packet go out again in new ones, so this counts the lost
    /// packets whose frames were resent (equal to `lost_packets` in quinn).
    pub retransmitted_packets: u64,
    /// Packets sent in the epoch.
    pub sent_packets: u64,
}

impl PathState {
    /// The path's throughput estimate, bits per second: the measured delivery rate, or
    /// else one congestion window per sRTT (`None` when neither is known).
    pub fn rate_bps(&self) -> Option<f64> {
        if let Some(rate) = self.delivery_rate_bps.filter(|&r| r > 0) {
            return Some(rate as f64);
        }
        match (self.cwnd_bytes, self.srtt_ms) {
            (Some(cwnd), Some(rtt)) if rtt > 0.0 => Some(cwnd as f64 * 8.0 * 1e3 / rtt),
            _ => None,
        }
    }

    /// The window of the download on this path as the client can estimate it, bytes:
    /// the larger of the connection's congestion window and the bandwidth-delay product
    /// of the measured delivery rate and the sRTT. The client's own window tracks what
    /// the client sends (requests, a few kB), not the responses, so once the path has
    /// delivered a rate sample the BDP is what says how much response data the path
    /// carries per round (BBR's window target); before that, the initial window, which
    /// both ends start with. `None` when neither is known.
    pub fn window_bytes(&self) -> Option<u64> {
        let bdp = match (self.delivery_rate_bps, self.srtt_ms) {
            (Some(rate), Some(rtt)) if rate > 0 && rtt > 0.0 => Some((rate as f64 * rtt / 1e3 / 8.0) as u64),
            _ => None,
        };
        match (self.cwnd_bytes, bdp) {
            (Some(c), Some(b)) => Some(c.max(b)),
            (c, b) => c.or(b),
        }
    }

    /// Spread of the recent sRTT samples (largest minus smallest), milliseconds: the RTT
    /// deviation the ECF and BLEST rules add as their margin δ (0 with fewer than two).
    pub fn rtt_spread_ms(&self) -> f64 {
        let max = self.srtt_history_ms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let min = self.srtt_history_ms.iter().copied().fold(f64::INFINITY, f64::min);
        if self.srtt_history_ms.len() < 2 {
            0.0
        } else {
            max - min
        }
    }
}

/// A path gear: chooses the path of each request on a multipath client and learns from
/// the requests' records (SAILfish §4.2).
pub trait PathGear: Send {
    /// The position in `paths` of the path that carries `request` (the client maps it
    /// to the path's [`PathState::index`]). `paths` holds the paths that are up, never
    /// none; a path that failed is left out.
    fn choose(&mut self, request: &PathRequest, paths: &[PathState], now: Instant) -> Decision<usize>;

    /// A request finished; `record.local_addr` names the path it took. The stream
    /// schedulers and SAILfish's fixed policy learn nothing from it: by default, nothing.
    fn observe(&mut self, _record: &ClientRecord, _now: Instant) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_download_window_is_the_larger_of_cwnd_and_the_measured_bdp() {
        let mut p = PathState {
            cwnd_bytes: Some(12_000),
            srtt_ms: Some(40.0),
            ..PathState::default()
        };
        assert_eq!(p.window_bytes(), Some(12_000));
        // 20 Mbit/s x 40 ms = 100 kB.
        p.delivery_rate_bps = Some(20_000_000);
        assert_eq!(p.window_bytes(), Some(100_000));
        p.cwnd_bytes = None;
        assert_eq!(p.window_bytes(), Some(100_000));
        p.srtt_ms = None;
        assert_eq!(p.window_bytes(), None);
    }
}
