//! Per-connection gears: which congestion controller and initial window a new
//! connection gets, asked at accept before any data is sent.
//!
//! The decision points are the gear shape's own (`gearbox-gear-api`): a [`CcaGear`]
//! (Floo §3.1) and an [`InitialWindowGear`] (TCP WISE §IV-A), each told the
//! [`AcceptedConnection`] (client address, its /24 × hour cluster, the transport). The
//! edge depends on that small crate only, so a gear built for the edge brings neither the
//! client library nor its HTTP/3 stack with it. This module maps the gears' stack-neutral
//! answers onto quinn's controllers and the kernel's `TCP_CONGESTION`, and holds the
//! static baseline the `--cc`, `--tcp-cc` and `--initial-window` flags describe.
//!
//! The gears are `&mut` objects (they keep state per cluster or connection) behind one
//! lock each; an accept holds it for one `choose`, microseconds against a handshake.

use std::sync::Mutex;
use std::time::Instant;

use gearbox_cc::{QuicCc, TcpCc};
use gearbox_gear_api::{
    AcceptedConnection, Cca, CcaGear, Decision, EdgeRecord, InitialWindowGear, IwChoice, Transport,
};

/// What a QUIC connection runs, chosen when it is accepted.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QuicChoice {
    /// Congestion controller.
    pub cc: QuicCc,
    /// Initial congestion window in packets (None: quinn's RFC 9002 default).
    pub initial_window_packets: Option<u32>,
}

/// The gears the edge asks at every accept.
pub struct ConnectionGears {
    cca: Mutex<Box<dyn CcaGear>>,
    initial_window: Mutex<Box<dyn InitialWindowGear>>,
    /// The QUIC controller that runs a gear's algorithm when it is the configured one
    /// (so `--cc quinn-cubic` keeps quinn's Cubic); other algorithms run the suite's.
    quic_default: QuicCc,
    /// The gear asked every selection period (Floo), taken by the edge when it starts
    /// serving.
    period: Mutex<Option<crate::floo::PeriodGear>>,
}

impl ConnectionGears {
    /// The edge asks `cca` for every connection's controller and `initial_window` for its
    /// initial window.
    pub fn new(cca: Box<dyn CcaGear>, initial_window: Box<dyn InitialWindowGear>) -> Self {
        ConnectionGears {
            cca: Mutex::new(cca),
            initial_window: Mutex::new(initial_window),
            quic_default: QuicCc::CUBIC,
            period: Mutex::new(None),
        }
    }

    /// The static choice the configuration's `cc`, `tcp_cc` and `initial_window` describe.
    pub fn from_config(config: &crate::EdgeConfig) -> Self {
        let mut gears = ConnectionGears::new(
            Box::new(StaticCca {
                quic: config.cc.cca(),
                tcp: config.tcp_cc.map(TcpCc::cca),
            }),
            Box::new(StaticInitialWindow {
                quic_packets: config.initial_window,
            }),
        );
        gears.quic_default = config.cc;
        gears
    }

    /// Sets the gear the edge asks every selection period for each live QUIC connection
    /// (Floo; crate::floo).
    pub fn set_period_gear(&mut self, gear: crate::floo::PeriodGear) {
        self.period = Mutex::new(Some(gear));
    }

    pub(crate) fn take_period_gear(&self) -> Option<crate::floo::PeriodGear> {
        self.period.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Replaces the initial-window gear (TCP WISE's table, given at start).
    pub fn set_initial_window(&mut self, gear: Box<dyn InitialWindowGear>) {
        self.initial_window = Mutex::new(gear);
    }

    fn ask_cca(&self, conn: &AcceptedConnection) -> Decision<Option<Cca>> {
        let d = self
            .cca
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .choose(conn, Instant::now());
        tracing::debug!(conn_id = conn.conn_id, cca = ?d.choice, reason = %d.reason, "congestion control chosen");
        d
    }

    fn ask_initial_window(&self, conn: &AcceptedConnection) -> Decision<Option<IwChoice>> {
        let d = self
            .initial_window
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .choose(conn, Instant::now());
        tracing::debug!(conn_id = conn.conn_id, packets = ?d.choice.as_ref().map(|c| c.iw), reason = %d.reason, "initial window chosen");
        d
    }

    /// Controller and initial window of a new QUIC connection, applied through
    /// `quinn::Incoming::accept_with` (no controller named: the configured one), and
    /// the window's origin for the connection's records.
    pub(crate) fn quic(&self, conn: &AcceptedConnection) -> (QuicChoice, Option<IwChoice>) {
        let iw = self.ask_initial_window(conn).choice;
        let choice = QuicChoice {
            cc: match self.ask_cca(conn).choice {
                Some(c) if c != self.quic_default.cca() => QuicCc::Suite(c),
                _ => self.quic_default,
            },
            initial_window_packets: iw.as_ref().map(|c| c.iw),
        };
        (choice, iw)
    }

    /// Kernel congestion control of a new TCP connection (None: the system default),
    /// applied with `TCP_CONGESTION` on the accepted socket before any data is sent.
    ///
    /// The initial-window gear is asked too, so it sees every connection; a TCP window
    /// can only be set by the edge's BPF `sock_ops` program before the kernel sends
    /// anything (TCP WISE's table, `crate::tcpwise`), so an answer here is logged, not
    /// applied.
    pub(crate) fn tcp(&self, conn: &AcceptedConnection) -> Option<TcpCc> {
        let cc = self.ask_cca(conn).choice.and_then(tcp_cc);
        if let Some(c) = self.ask_initial_window(conn).choice {
            tracing::debug!(
                conn_id = conn.conn_id,
                packets = c.iw,
                "TCP initial window from a gear not applied (only the kernel's sock_ops program can)"
            );
        }
        cc
    }
}

/// The same controller for every connection of a transport (the `--cc` and `--tcp-cc`
/// flags): the static baselines every learned choice is measured against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaticCca {
    /// Controller of every QUIC connection.
    pub quic: Cca,
    /// Controller of every TCP connection (None: the kernel's default).
    pub tcp: Option<Cca>,
}

impl CcaGear for StaticCca {
    fn choose(&mut self, conn: &AcceptedConnection, _now: Instant) -> Decision<Option<Cca>> {
        let choice = match conn.transport {
            Transport::Quic => Some(self.quic),
            Transport::Tcp => self.tcp,
        };
        let name = choice.map_or("default", Cca::name);
        Decision::new(choice, format!("static:{name}"))
    }

    fn observe(&mut self, _record: &EdgeRecord, _now: Instant) {}
}

/// The same initial window for every QUIC connection (the `--initial-window` flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaticInitialWindow {
    /// Initial window of every QUIC connection, packets (None: RFC 9002's default).
    pub quic_packets: Option<u32>,
}

impl InitialWindowGear for StaticInitialWindow {
    fn choose(&mut self, conn: &AcceptedConnection, _now: Instant) -> Decision<Option<IwChoice>> {
        let choice = match conn.transport {
            Transport::Quic => self.quic_packets,
            Transport::Tcp => None,
        };
        match choice {
            Some(p) => Decision::new(Some(IwChoice::fixed(p)), format!("static:{p}")),
            None => Decision::new(None, "static:default"),
        }
    }

    fn observe(&mut self, _record: &EdgeRecord, _now: Instant) {}
}

/// The kernel's controller for an algorithm; one the kernel lacks keeps the system
/// default (logged).
fn tcp_cc(c: Cca) -> Option<TcpCc> {
    let cc = TcpCc::for_cca(c);
    if cc.is_none() {
        tracing::warn!(cca = %c, "no kernel TCP implementation; keeping the system default");
    }
    cc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(transport: Transport) -> AcceptedConnection {
        AcceptedConnection::new(1, "192.0.2.7:40000".parse().unwrap(), transport, 0.0)
    }

    #[test]
    fn the_flags_choose_per_transport_and_reach_each_stack_by_its_own_name() {
        let config = crate::EdgeConfig {
            cc: QuicCc::Suite(Cca::Bbr),
            tcp_cc: Some(TcpCc::Reno),
            initial_window: Some(32),
            ..crate::EdgeConfig::default()
        };
        let gears = ConnectionGears::from_config(&config);
        assert_eq!(
            gears.quic(&conn(Transport::Quic)),
            (
                QuicChoice {
                    cc: QuicCc::Suite(Cca::Bbr),
                    initial_window_packets: Some(32)
                },
                Some(IwChoice::fixed(32))
            )
        );
        assert_eq!(gears.tcp(&conn(Transport::Tcp)), Some(TcpCc::Reno));
    }

    #[test]
    fn tcp_runs_cubic_by_default_and_system_keeps_the_kernel_default() {
        let gears = ConnectionGears::from_config(&crate::EdgeConfig::default());
        assert_eq!(gears.tcp(&conn(Transport::Tcp)), Some(TcpCc::Cubic));
        let system = crate::EdgeConfig {
            tcp_cc: None,
            ..crate::EdgeConfig::default()
        };
        assert_eq!(ConnectionGears::from_config(&system).tcp(&conn(Transport::Tcp)), None);
        let mut iw = StaticInitialWindow { quic_packets: Some(10) };
        assert_eq!(iw.choose(&conn(Transport::Tcp), Instant::now()).choice, None);
        assert_eq!(iw.choose(&conn(Transport::Quic), Instant::now()).reason, "static:10");
    }

    #[test]
    fn every_algorithm_maps_to_both_stacks_and_back() {
        for c in Cca::ALL {
            assert_eq!(QuicCc::Suite(c).cca(), c);
            assert_eq!(QuicCc::Suite(c).name(), c.name());
            if let Some(t) = tcp_cc(c) {
                assert_eq!(t.cca(), c);
            }
        }
        assert_eq!(tcp_cc(Cca::Copa), None);
    }
}
