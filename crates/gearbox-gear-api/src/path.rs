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

/// One path's state over the last scheduling epoch (SAILfish §4.2.1.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathState {
    /// Position of the path in the client's list of local addresses (what
    /// [`PathGear::choose`] returns).
    pub index: usize,
    /// The local address the path's connections are bound to.
    pub local_addr: String,
    /// Bandwidth estimate (delivery rate, as BBR measures it), bits per second.
    pub delivery_rate_bps: Option<u64>,
    /// Smoothed RTT, milliseconds (`None`: no connection on the path yet).
    pub srtt_ms: Option<f64>,
    /// Packets declared lost in the epoch.
    pub lost_packets: u64,
    /// Packets retransmitted in the epoch.
    pub retransmitted_packets: u64,
    /// Packets sent in the epoch.
    pub sent_packets: u64,
}

/// A path gear: chooses the path of each request on a multipath client and learns from
/// the requests' records (SAILfish §4.2).
pub trait PathGear: Send {
    /// The index (into `paths`) of the path that carries `request`. `paths` is never
    /// empty.
    fn choose(&mut self, request: &PathRequest, paths: &[PathState], now: Instant) -> Decision<usize>;

    /// A request finished; `record.local_addr` names the path it took.
    fn observe(&mut self, record: &ClientRecord, now: Instant);
}
