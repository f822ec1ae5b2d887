//! Per-connection hooks: which congestion controller and initial window a new
//! connection gets. The Floo (seed 001 §3) and TCP WISE (seed 003 §III) gears
//! plug in here; today the only implementation is the static one from the flags.

use std::net::SocketAddr;
use std::time::SystemTime;

use gearbox_cc::{QuicCc, TcpCc};

/// What a QUIC connection runs, chosen when it is accepted.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QuicChoice {
    /// Congestion controller.
    pub cc: QuicCc,
    /// Initial congestion window in packets (None: quinn's RFC 9002 default).
    pub initial_window_packets: Option<u32>,
}

/// Decides per connection, from the client's address and the time of arrival
/// (TCP WISE clusters clients by /24 prefix and hour of day).
pub trait ConnectionPolicy: Send + Sync + 'static {
    /// Controller and initial window of a new QUIC connection; applied through
    /// `quinn::Incoming::accept_with`.
    fn quic(&self, client: SocketAddr, now: SystemTime) -> QuicChoice;
    /// Kernel congestion control of a new TCP connection (None: the system default),
    /// applied with `TCP_CONGESTION` on the accepted socket before any data is sent.
    fn tcp(&self, client: SocketAddr, now: SystemTime) -> Option<TcpCc>;
}

/// The same choice for every connection (the `--cc`, `--initial-window`, `--tcp-cc` flags).
#[derive(Debug, Clone)]
pub struct StaticPolicy {
    /// QUIC choice for everyone.
    pub quic: QuicChoice,
    /// TCP controller for everyone.
    pub tcp: Option<TcpCc>,
}

impl StaticPolicy {
    /// The choice the configuration's `cc`, `initial_window` and `tcp_cc` describe.
    pub fn from_config(config: &crate::EdgeConfig) -> Self {
        StaticPolicy {
            quic: QuicChoice {
                cc: config.cc,
                initial_window_packets: config.initial_window,
            },
            tcp: config.tcp_cc,
        }
    }
}

impl ConnectionPolicy for StaticPolicy {
    fn quic(&self, _client: SocketAddr, _now: SystemTime) -> QuicChoice {
        self.quic.clone()
    }
    fn tcp(&self, _client: SocketAddr, _now: SystemTime) -> Option<TcpCc> {
        self.tcp
    }
}
