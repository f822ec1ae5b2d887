//! Client settings.

use std::net::IpAddr;
use std::time::Duration;

use gearbox_cc::{QuicCc, TcpCc};
use gearbox_dataplane::telemetry::TelemetrySink;
use gearbox_dataplane::tls::Trust;

/// How a [`crate::Client`] connects, how long it waits, and where its records go.
#[derive(Clone)]
pub struct ClientConfig {
    /// Which server certificates are trusted.
    pub trust: Trust,
    /// Local addresses to bind connections to, one per path of a multipath client
    /// (docs/architecture.md: multipath is one connection per local path). A request's
    /// `path_index` picks one. Empty: one unbound path (index 0), the kernel chooses the source.
    pub local_addrs: Vec<IpAddr>,
    /// Congestion controller of QUIC connections (quinn's, set per connection).
    pub quic_cc: QuicCc,
    /// QUIC initial window in packets of 1200 bytes (None: quinn's RFC 9002 default).
    pub quic_initial_window_packets: Option<u32>,
    /// Kernel congestion controller of TCP connections, set with `TCP_CONGESTION` before
    /// connect (default [`gearbox_cc::DEFAULT_TCP_CC`], CUBIC as QUIC's; None: the system's default).
    pub tcp_cc: Option<TcpCc>,
    /// Open TCP connections over Multipath TCP (the kernel's, RFC 8684): the socket is
    /// `IPPROTO_MPTCP`, and the kernel adds subflows over the endpoints configured with
    /// `ip mptcp endpoint` and schedules packets on them itself. Needs
    /// `net.mptcp.enabled = 1`; a server without MPTCP gets plain TCP.
    pub mptcp: bool,
    /// Bound on opening a connection: TCP connect plus TLS handshake, or the QUIC handshake.
    pub connect_timeout: Duration,
    /// Bound on a whole request, from its start (including any connection setup and
    /// waiting for a pooled connection) to its last body byte.
    pub request_timeout: Duration,
    /// A connection unused for this long is closed instead of reused (and QUIC's
    /// `max_idle_timeout` is set to it).
    pub idle_timeout: Duration,
    /// No QUIC connection with requests outstanding is declared silent, and no QUIC
    /// handshake given up, sooner than this (`crate::silence`). The default,
    /// [`crate::silence::SILENCE_FLOOR`] (1 s), suits a host that schedules the client
    /// promptly; a load generator sharing starved cores with the server it loads stalls
    /// for longer than that and would count its own stalls as dead paths.
    pub quic_silence_floor: Duration,
    /// Hedge slow QUIC requests over TCP (`crate::hedge`): an idempotent `auto` request
    /// the gear sent over QUIC is sent again over TCP when it has not completed after
    /// the rule's delay, and the first copy to complete answers. `None` (the default):
    /// never. Fixed transports and the race never hedge.
    pub hedge: Option<crate::hedge::HedgeRule>,
    /// Most HTTP/1.1 connections open at once per origin and path; more concurrent
    /// requests wait for one (browsers use 6).
    pub max_h1_connections_per_origin: usize,
    /// Where one record per request goes.
    pub telemetry: TelemetrySink,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            trust: Trust::default(),
            local_addrs: Vec::new(),
            quic_cc: QuicCc::CUBIC,
            quic_initial_window_packets: None,
            tcp_cc: Some(gearbox_cc::DEFAULT_TCP_CC),
            mptcp: false,
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(30),
            quic_silence_floor: crate::silence::SILENCE_FLOOR,
            hedge: None,
            max_h1_connections_per_origin: 6,
            telemetry: TelemetrySink::disabled(),
        }
    }
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("trust", &self.trust)
            .field("local_addrs", &self.local_addrs)
            .field("quic_cc", &self.quic_cc)
            .field("quic_initial_window_packets", &self.quic_initial_window_packets)
            .field("tcp_cc", &self.tcp_cc)
            .field("mptcp", &self.mptcp)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("quic_silence_floor", &self.quic_silence_floor)
            .field("hedge", &self.hedge)
            .field("max_h1_connections_per_origin", &self.max_h1_connections_per_origin)
            .finish_non_exhaustive()
    }
}
