//! The records gears read: one per request, written by both ends as JSON lines.
//!
//! Gears learn only from these records (docs/architecture.md, "Telemetry first"), so
//! they live with the gear shape rather than with the telemetry writer: a gear, the
//! simulator and a test build and read them without a network stack. The writer
//! (`gearbox_dataplane::telemetry::TelemetrySink`) re-exports them under their old path.
//! The schema is documented in `docs/telemetry.md`; a field added here must be added
//! there. Records are flat JSON objects so that DuckDB, pandas and `jq` read them
//! without a schema of their own.

use serde::{Deserialize, Serialize};

use crate::decision::DecisionId;

/// Version of the record schema; bumped when a field changes meaning.
pub const SCHEMA_VERSION: u32 = 1;

/// The application protocol a request travelled on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// HTTP/1.1 over TLS over kernel TCP.
    H1,
    /// HTTP/2 over TLS over kernel TCP.
    H2,
    /// HTTP/3 over QUIC (quinn).
    H3,
}

impl Protocol {
    /// Name as written in telemetry and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::H1 => "h1",
            Protocol::H2 => "h2",
            Protocol::H3 => "h3",
        }
    }

    /// The transport under the protocol.
    pub fn transport(self) -> &'static str {
        match self {
            Protocol::H1 | Protocol::H2 => "tcp",
            Protocol::H3 => "quic",
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A snapshot of a connection's transport state at the end of a request.
///
/// QUIC values come from quinn's `ConnectionStats::path`; TCP values from the
/// kernel's `TCP_INFO`. Where a stack does not expose a value it is `None`
/// (written as `null`), never a made-up zero.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TransportSnapshot {
    /// Congestion controller the connection runs (kernel name for TCP).
    pub cc: String,
    /// Smoothed round-trip time, milliseconds.
    pub rtt_ms: f64,
    /// Minimum round-trip time seen on the connection, milliseconds.
    pub min_rtt_ms: Option<f64>,
    /// RTT variation, milliseconds (TCP only: `tcpi_rttvar`).
    pub rttvar_ms: Option<f64>,
    /// Congestion window, bytes (TCP: `tcpi_snd_cwnd * tcpi_snd_mss`).
    pub cwnd_bytes: u64,
    /// Packets (QUIC) or segments (TCP: `tcpi_segs_out`) sent so far.
    pub sent_packets: u64,
    /// Packets declared lost (QUIC) or segments retransmitted (TCP: `tcpi_total_retrans`).
    pub lost_packets: u64,
    /// Congestion events (QUIC: quinn's count; TCP: not exposed, `null`).
    pub congestion_events: Option<u64>,
    /// Bytes sent but not yet acknowledged (TCP only: `tcpi_unacked * mss` estimate is avoided;
    /// this is `tcpi_bytes_sent - tcpi_bytes_acked`).
    pub unacked_bytes: Option<u64>,
    /// Delivery-rate estimate, bits per second (TCP only: `tcpi_delivery_rate * 8`).
    pub delivery_rate_bps: Option<u64>,
    /// Retransmission timeouts that fired on the connection (TCP only: `tcpi_total_rto`,
    /// Linux 6.7+; TCP WISE's Table II counts timeouts). Left out of the JSON where the
    /// stack does not count them (QUIC, the simulator, an older kernel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<u64>,
}

/// Which end wrote a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// `gearbox edge`.
    Edge,
    /// `gearbox client` / `get` / `load`.
    Client,
}

/// One record per request on the edge (`side = "edge"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EdgeRecord {
    /// Always `"edge"`.
    pub side: Side,
    /// [`SCHEMA_VERSION`].
    pub schema: u32,
    /// Wall-clock time the request arrived, milliseconds since the Unix epoch.
    pub time_unix_ms: f64,
    /// Edge-local connection id (unique per edge process).
    pub conn_id: u64,
    /// Client socket address as the edge sees it.
    pub client_addr: String,
    /// h1, h2 or h3 (`null` when the handshake failed before ALPN chose).
    pub protocol: Option<Protocol>,
    /// HTTP method (empty when no request arrived).
    pub method: String,
    /// Request path and query (empty when no request arrived).
    pub path: String,
    /// Response status code (`null` when no response was sent).
    pub status: Option<u16>,
    /// Response body bytes written.
    pub bytes: u64,
    /// Milliseconds from the first response byte written to the last byte acknowledged
    /// by the client, where the stack can tell (see `server_time_source`).
    pub server_time_ms: Option<f64>,
    /// How `server_time_ms` was measured: `quic_stream_acked` (quinn: the finished
    /// stream's data all acknowledged), `tcp_unacked_zero` (`TCP_INFO` shows no
    /// unacknowledged bytes), or `written` (only the last write is known, e.g. the
    /// connection closed first).
    pub server_time_source: Option<String>,
    /// Transport state after the response.
    pub transport: Option<TransportSnapshot>,
    /// Error kind when the request failed (`handshake`, `reset`, `timeout`, ...).
    pub error: Option<String>,
    /// The connection's initial window when a gear chose it (TCP WISE §IV-B: the Data
    /// Collector's IW beside each response's latency); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iw: Option<IwChoice>,
}

impl EdgeRecord {
    /// The record of connection `conn_id` from `client_addr` at `time_unix_ms`, before
    /// any request: every request field empty, no transport, no error. The edge fills in
    /// what it knows (one constructor for the request records and the connection-level
    /// failure records alike).
    pub fn for_connection(
        conn_id: u64,
        client_addr: std::net::SocketAddr,
        protocol: Option<Protocol>,
        time_unix_ms: f64,
    ) -> Self {
        EdgeRecord {
            side: Side::Edge,
            schema: SCHEMA_VERSION,
            time_unix_ms,
            conn_id,
            client_addr: client_addr.to_string(),
            protocol,
            method: String::new(),
            path: String::new(),
            status: None,
            bytes: 0,
            server_time_ms: None,
            server_time_source: None,
            transport: None,
            error: None,
            iw: None,
        }
    }
}

/// A connection's initial congestion window as chosen at accept (TCP WISE §IV-A).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IwChoice {
    /// The table entry's prefix that matched the client (`others` when none did);
    /// absent for a static window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// Hour of day (UTC) the entry was chosen for; absent for a static window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hour: Option<u8>,
    /// The set under test, α first (α and β; more for TCP WISE's fast start), packets;
    /// absent for a static window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iw_set: Option<Vec<u32>>,
    /// The window this connection drew, packets.
    pub iw: u32,
    /// The `version` of the Cwnd Table it was drawn from (TCP WISE §IV-A: the learner
    /// writes a new table each round); absent for a static window. With the control plane,
    /// the table version tells which pushed policy served the connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table_version: Option<u64>,
    /// Who chose it: `table` (the Cwnd Table, in the edge for QUIC), `kernel` (the
    /// Cwnd Table, in the edge's BPF `sock_ops` program for TCP) or `static`.
    pub source: String,
}

impl IwChoice {
    /// A fixed window, the same for every connection.
    pub fn fixed(iw: u32) -> Self {
        IwChoice {
            cluster: None,
            hour: None,
            iw_set: None,
            iw,
            table_version: None,
            source: "static".into(),
        }
    }
}

/// One record per request on the client (`side = "client"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientRecord {
    /// Always `"client"`.
    pub side: Side,
    /// [`SCHEMA_VERSION`].
    pub schema: u32,
    /// Wall-clock time the request was issued, milliseconds since the Unix epoch.
    pub time_unix_ms: f64,
    /// Client-local connection id (unique per client instance).
    pub conn_id: u64,
    /// Server socket address.
    pub server_addr: String,
    /// Local socket address the connection is bound to (multipath: which path).
    pub local_addr: String,
    /// h1, h2 or h3.
    pub protocol: Protocol,
    /// HTTP method.
    pub method: String,
    /// Full request URL.
    pub url: String,
    /// Response status (None when the request failed before a response).
    pub status: Option<u16>,
    /// Response body bytes received.
    pub bytes: u64,
    /// Request completion time: request sent to last body byte received, milliseconds.
    /// Includes the handshake when the request opened a new connection.
    pub rct_ms: Option<f64>,
    /// Time to first byte of the response body (or headers when the body is empty), ms.
    pub ttfb_ms: Option<f64>,
    /// Whether this request opened a new connection.
    pub new_connection: bool,
    /// Handshake time of that new connection (TCP+TLS or QUIC), milliseconds.
    pub handshake_ms: Option<f64>,
    /// Transport state after the response.
    pub transport: Option<TransportSnapshot>,
    /// Which gear (or static setting) chose the transport, and why (for people).
    pub decision: Option<String>,
    /// The deciding gear's own id of the decision (see [`DecisionId`]); `null` when the
    /// gear set none. Absent in records written before the field existed.
    #[serde(default)]
    pub decision_id: Option<DecisionId>,
    /// Workload click/session index, when the request came from a workload.
    pub click: Option<u32>,
    /// Error kind when the request failed (`connect`, `tls`, `quic`, `quic_silent`,
    /// `timeout`, `http`, ...).
    pub error: Option<String>,
    /// The protocol the request was first handed to when the client carried it on
    /// another one: `h3` when its QUIC connection failed or went silent after the request
    /// was given to it, or its QUIC handshake failed, and the client sent it again over
    /// TCP (`protocol` then says which). `null` when the request ran where it started.
    /// Absent in records written before the field existed.
    #[serde(default)]
    pub retried_from: Option<Protocol>,
    /// With `retried_from`: milliseconds from the request's start to the moment the
    /// client gave up on the first protocol (the time the retry cost it, included in
    /// `rct_ms`).
    #[serde(default)]
    pub retry_lost_ms: Option<f64>,
    /// The protocol of the hedge, when the client sent the request a second time while
    /// the first copy ran (a slow QUIC request of `auto` hedged over TCP: `h2`, or `h1`
    /// where the server speaks only that; docs/client.md "Hedging a slow QUIC request").
    /// The first copy to complete answers and `protocol` says which: the hedge won when
    /// `protocol` equals `hedged`. `null` when no hedge was started. Absent in records
    /// written before the field existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hedged: Option<Protocol>,
    /// With `hedged`: milliseconds from the request's start to the hedge's start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hedge_at_ms: Option<f64>,
    /// Multipath page loads: the index of the local path (in the client's list of
    /// local addresses) the path scheduler put the request on. `null` when no path
    /// scheduler chose (single-path requests). Absent in records written before the
    /// field existed.
    #[serde(default)]
    pub path_index: Option<usize>,
    /// Multipath page loads: the path scheduler's reason, `scheduler:rule:path`
    /// (e.g. `ecf:wait-for-fast:0`), with `;reissued-from=N` when the request is sent
    /// again after path N failed. `null` when no path scheduler chose.
    #[serde(default)]
    pub path_decision: Option<String>,
}
