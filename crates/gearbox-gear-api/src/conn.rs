//! Edge, per connection: the congestion controller and the initial window a connection
//! starts with (at accept), and the controller it runs for each selection period.
//!
//! Two gears act at accept. Floo (Floo §3.1) picks the congestion control algorithm of
//! a connection; TCP WISE's Connection Manager (TCP WISE §IV-A) picks the initial
//! congestion window for the client's cluster (/24 prefix × hour of day, §IV-C1) before
//! any data is sent. Both are told the same [`AcceptedConnection`] and learn from the
//! edge's per-response records ([`EdgeRecord`]; TCP WISE's Data Collector, §IV-B, keeps
//! one per response). Floo then re-chooses every selection period (12 s in Floo §5.1)
//! from the connection's statistics ([`ConnectionStats`], Floo §3.2 Table 2): a
//! separate decision point, [`CcaPeriodGear`], because it runs on a timer for the life
//! of the connection rather than once.
//!
//! The controller is named by what it does ([`Cca`]), not by a stack's own type, so a
//! gear needs neither quinn nor the kernel: the edge maps the name onto quinn's
//! controller or the kernel's `TCP_CONGESTION` name.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::decision::Decision;
use crate::record::{EdgeRecord, IwChoice};
use crate::transport::Transport;

/// A congestion control algorithm a connection can run.
///
/// Floo's candidates are Cubic, BBR, Copa and Westwood+ (Floo §2.1), NewReno is the
/// RFC baseline and PCC Vivace the learned-rate baseline of Floo §5.2. Every one runs on
/// QUIC (the suite's own controllers); on kernel TCP, NewReno, Cubic and BBR are the
/// kernel's and Westwood+ gearbox's BPF controller, while Copa and Vivace have no
/// kernel implementation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cca {
    /// NewReno (RFC 9002 §7 for QUIC; the kernel's `reno` for TCP).
    NewReno,
    /// CUBIC (RFC 9438).
    Cubic,
    /// BBR v1 (Cardwell et al., ACM Queue 2016).
    Bbr,
    /// Copa (Arun & Balakrishnan, NSDI 2018).
    Copa,
    /// TCP Westwood+ (Grieco & Mascolo, 2004).
    Westwood,
    /// PCC Vivace (Dong et al., NSDI 2018).
    Vivace,
}

impl Cca {
    /// Every algorithm.
    pub const ALL: [Cca; 6] = [
        Cca::NewReno,
        Cca::Cubic,
        Cca::Bbr,
        Cca::Copa,
        Cca::Westwood,
        Cca::Vivace,
    ];

    /// `newreno`, `cubic`, `bbr`, `copa`, `westwood` or `vivace`.
    pub fn name(self) -> &'static str {
        match self {
            Cca::NewReno => "newreno",
            Cca::Cubic => "cubic",
            Cca::Bbr => "bbr",
            Cca::Copa => "copa",
            Cca::Westwood => "westwood",
            Cca::Vivace => "vivace",
        }
    }

    /// The algorithm named `name` (case-insensitive; `reno` is NewReno).
    pub fn from_name(name: &str) -> Option<Cca> {
        if name.eq_ignore_ascii_case("reno") {
            return Some(Cca::NewReno);
        }
        Cca::ALL.into_iter().find(|c| c.name().eq_ignore_ascii_case(name))
    }
}

impl std::fmt::Display for Cca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The group of clients a connection belongs to for TCP WISE (§IV-C1): the client's
/// network prefix and the hour of day.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ClientCluster {
    /// `a.b.c.0/24` for IPv4 (TCP WISE's unit: one ISP and region). For IPv6 the
    /// paper gives none; gearbox uses the /48, a site's usual allocation.
    pub prefix: String,
    /// Hour of the day, UTC, 0..=23.
    pub hour: u8,
}

impl ClientCluster {
    /// The cluster of a client at `ip` connecting at `time_unix_ms`.
    pub fn of(ip: IpAddr, time_unix_ms: f64) -> Self {
        let prefix = match ip {
            IpAddr::V4(v4) => {
                let [a, b, c, _] = v4.octets();
                format!("{a}.{b}.{c}.0/24")
            }
            IpAddr::V6(v6) => {
                let s = v6.segments();
                format!("{:x}:{:x}:{:x}::/48", s[0], s[1], s[2])
            }
        };
        let hours = (time_unix_ms.max(0.0) / 3_600_000.0).floor() as u64;
        ClientCluster {
            prefix,
            hour: (hours % 24) as u8,
        }
    }
}

/// A connection the edge has just accepted, before any data is sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AcceptedConnection {
    /// Edge-local connection id (the `conn_id` of the connection's records).
    pub conn_id: u64,
    /// Client socket address as the edge sees it.
    pub client_addr: SocketAddr,
    /// The client's TCP WISE cluster.
    pub cluster: ClientCluster,
    /// The transport the connection arrived on.
    pub transport: Transport,
    /// Wall-clock time of the accept, milliseconds since the Unix epoch.
    pub time_unix_ms: f64,
}

impl AcceptedConnection {
    /// The record of connection `conn_id` from `client_addr` on `transport`, accepted at
    /// `time_unix_ms`; the cluster is derived from the two.
    pub fn new(conn_id: u64, client_addr: SocketAddr, transport: Transport, time_unix_ms: f64) -> Self {
        AcceptedConnection {
            conn_id,
            client_addr,
            cluster: ClientCluster::of(client_addr.ip(), time_unix_ms),
            transport,
            time_unix_ms,
        }
    }
}

/// A connection's statistics over the last selection period (Floo §3.2, Table 2).
///
/// The path metrics are computed over Floo's monitor window (10 s) and the
/// application metrics over the selection period. A value the stack does not expose is
/// `None`, never a made-up zero.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnectionStats {
    /// Edge-local connection id.
    pub conn_id: u64,
    /// The transport the connection runs on.
    pub transport: Transport,
    /// The algorithm it ran during the period (Table 2's `CCA_name`).
    pub cca: Cca,
    /// Length of the period, milliseconds.
    pub period_ms: f64,
    /// Maximum delivery rate in the window, bits per second (`Thpt_max`: bottleneck
    /// bandwidth).
    pub max_delivery_rate_bps: Option<u64>,
    /// Minimum RTT, milliseconds (`RTT_min`: propagation delay).
    pub min_rtt_ms: Option<f64>,
    /// Smoothed RTT, milliseconds (`RTT_rate` is this over `min_rtt_ms`: the queue).
    pub srtt_ms: Option<f64>,
    /// Variance of the RTT samples, ms² (`RTT_var`).
    pub rtt_var_ms2: Option<f64>,
    /// Lost over sent packets in the window (`Loss_rate`).
    pub loss_rate: Option<f64>,
    /// Congestion window at the end of the period, bytes.
    pub cwnd_bytes: u64,
    /// Pacing rate at the end of the period, bits per second, for rate-based algorithms.
    pub pacing_rate_bps: Option<u64>,
    /// Mean size over duration of the responses finished in the period, bits per
    /// second (`Good put`).
    pub goodput_bps: Option<f64>,
    /// Response bytes waiting to be written to the send buffer (`Unsent_size`).
    pub unsent_bytes: u64,
    /// Mean time a response waited before being written to the send buffer,
    /// milliseconds (`Qws`).
    pub response_wait_ms: Option<f64>,
    /// Change of that wait over the period, milliseconds per second (`Qws_gradient`).
    pub response_wait_gradient_ms_per_s: Option<f64>,
    /// Bytes sent in the period (`Bytes_interval`).
    pub bytes_sent: u64,
}

/// The congestion-control gear at accept: which algorithm a new connection starts with
/// (Floo §3.1).
pub trait CcaGear: Send {
    /// The algorithm for `conn`; `None` leaves the stack's default (quinn's, or the
    /// kernel's `net.ipv4.tcp_congestion_control`).
    fn choose(&mut self, conn: &AcceptedConnection, now: Instant) -> Decision<Option<Cca>>;

    /// A response finished on a connection (the edge's telemetry record).
    fn observe(&mut self, record: &EdgeRecord, now: Instant);
}

/// The congestion-control gear every selection period: the algorithm a running
/// connection switches to, from its statistics (Floo §3.2 Monitor, §3.3 Selector; the
/// switch itself migrates the controller's state, §3.4).
pub trait CcaPeriodGear: Send {
    /// The algorithm for the next period (`stats.cca` to keep the current one).
    fn choose(&mut self, stats: &ConnectionStats, now: Instant) -> Decision<Cca>;
}

/// The initial-window gear at accept: the congestion window a new connection starts
/// with (TCP WISE §IV-A, Connection Manager).
pub trait InitialWindowGear: Send {
    /// The initial window of `conn` (its `iw`, in packets, and where it came from, for
    /// the record); `None` leaves the stack's default (10 for the kernel, RFC 9002's for
    /// QUIC).
    fn choose(&mut self, conn: &AcceptedConnection, now: Instant) -> Decision<Option<IwChoice>>;

    /// A response finished (TCP WISE §IV-B: one performance entry per response, whose
    /// latency the learner compares between windows, §IV-C).
    fn observe(&mut self, record: &EdgeRecord, now: Instant);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_cluster_by_prefix_and_hour_of_day() {
        // 2024-01-01T13:20:00Z.
        let t = 1_704_115_200_000.0;
        let c = ClientCluster::of("192.168.1.77".parse().unwrap(), t);
        assert_eq!(c.prefix, "192.168.1.0/24");
        assert_eq!(c.hour, 13);
        assert_eq!(ClientCluster::of("192.168.1.3".parse().unwrap(), t), c);
        assert_eq!(
            ClientCluster::of("192.168.1.3".parse().unwrap(), t + 3_600_000.0).hour,
            14
        );
        let v6 = ClientCluster::of("2001:db8:12:34::1".parse().unwrap(), 0.0);
        assert_eq!(v6.prefix, "2001:db8:12::/48");
        assert_eq!(v6.hour, 0);
    }

    #[test]
    fn an_accepted_connection_knows_its_cluster() {
        let c = AcceptedConnection::new(5, "10.1.2.3:5000".parse().unwrap(), Transport::Quic, 7_200_000.0);
        assert_eq!(c.cluster.prefix, "10.1.2.0/24");
        assert_eq!(c.cluster.hour, 2);
    }
}
