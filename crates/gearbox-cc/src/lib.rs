//! The congestion-control suite: which controller a connection runs.
//!
//! QUIC connections run a controller on quinn's `Controller` trait; this crate
//! names them and builds their factories with a chosen initial window
//! (docs/architecture.md "Congestion control"). TCP connections use the kernel's own
//! controllers, chosen per socket with `TCP_CONGESTION`.
//!
//! The Floo gear adds Copa, Westwood and a switchable controller (Floo §3.4) here;
//! for now the suite is quinn's NewReno, Cubic and BBR, which are the static
//! baselines every learned choice is measured against.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use quinn_proto::congestion::{BbrConfig, ControllerFactory, CubicConfig, NewRenoConfig};

/// Bytes per packet used to turn an initial window in packets into bytes.
///
/// 1200 is QUIC's minimum datagram size (RFC 9000 §14) and quinn's initial MTU,
/// so "10 packets" means what RFC 9002 §7.2 means by the initial window.
pub const PACKET_BYTES: u64 = 1200;

/// Error for a congestion-control name nobody implements.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown congestion control {name:?}; valid: {valid}")]
pub struct UnknownCc {
    /// The name that was asked for.
    pub name: String,
    /// Comma-separated list of valid names.
    pub valid: String,
}

/// A QUIC congestion controller gearbox can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QuicCc {
    /// RFC 9002 NewReno.
    NewReno,
    /// RFC 9438 Cubic (quinn's default).
    Cubic,
    /// BBR (quinn's experimental BBRv1).
    Bbr,
}

impl QuicCc {
    /// Every controller, in the order `--help` lists them.
    pub const ALL: [QuicCc; 3] = [QuicCc::NewReno, QuicCc::Cubic, QuicCc::Bbr];

    /// The name used on the command line and in telemetry.
    pub fn name(self) -> &'static str {
        match self {
            QuicCc::NewReno => "newreno",
            QuicCc::Cubic => "cubic",
            QuicCc::Bbr => "bbr",
        }
    }

    /// Factory for this controller with an initial window of
    /// `initial_window_packets` packets of [`PACKET_BYTES`] (None: quinn's default,
    /// RFC 9002's `min(10 * mss, max(14720, 2 * mss))`).
    pub fn factory(self, initial_window_packets: Option<u32>) -> Arc<dyn ControllerFactory + Send + Sync> {
        let iw = initial_window_packets.map(|p| u64::from(p) * PACKET_BYTES);
        match self {
            QuicCc::NewReno => {
                let mut c = NewRenoConfig::default();
                if let Some(iw) = iw {
                    c.initial_window(iw);
                }
                Arc::new(c)
            }
            QuicCc::Cubic => {
                let mut c = CubicConfig::default();
                if let Some(iw) = iw {
                    c.initial_window(iw);
                }
                Arc::new(c)
            }
            QuicCc::Bbr => {
                let mut c = BbrConfig::default();
                if let Some(iw) = iw {
                    c.initial_window(iw);
                }
                Arc::new(c)
            }
        }
    }
}

impl fmt::Display for QuicCc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for QuicCc {
    type Err = UnknownCc;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        QuicCc::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(s) || (s.eq_ignore_ascii_case("reno") && *c == QuicCc::NewReno))
            .ok_or_else(|| UnknownCc {
                name: s.to_string(),
                valid: QuicCc::ALL.map(|c| c.name()).join(", "),
            })
    }
}

/// A kernel TCP congestion controller, set per socket with `TCP_CONGESTION`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TcpCc {
    /// The kernel's Reno.
    Reno,
    /// The kernel's CUBIC (the usual system default).
    Cubic,
    /// The kernel's BBR (`tcp_bbr`).
    Bbr,
}

impl TcpCc {
    /// Every kernel controller gearbox knows, in `--help` order.
    pub const ALL: [TcpCc; 3] = [TcpCc::Reno, TcpCc::Cubic, TcpCc::Bbr];

    /// The kernel's name for it (what `tcp_available_congestion_control` lists).
    pub fn name(self) -> &'static str {
        match self {
            TcpCc::Reno => "reno",
            TcpCc::Cubic => "cubic",
            TcpCc::Bbr => "bbr",
        }
    }

    /// Sets this controller on `socket`. Fails with the kernel's error when the
    /// module is not loaded or not allowed for an unprivileged process.
    pub fn apply(self, socket: &socket2::SockRef<'_>) -> std::io::Result<()> {
        socket.set_tcp_congestion(self.name().as_bytes())
    }

    /// Reads the controller a socket runs, as the kernel names it.
    pub fn current(socket: &socket2::SockRef<'_>) -> std::io::Result<String> {
        let raw = socket.tcp_congestion()?;
        let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        Ok(String::from_utf8_lossy(&raw[..end]).into_owned())
    }
}

impl fmt::Display for TcpCc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TcpCc {
    type Err = UnknownCc;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TcpCc::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownCc {
                name: s.to_string(),
                valid: TcpCc::ALL.map(|c| c.name()).join(", "),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_quic_cc_lists_the_valid_ones() {
        let err = "vegas".parse::<QuicCc>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown congestion control \"vegas\"; valid: newreno, cubic, bbr"
        );
    }

    #[test]
    fn names_round_trip() {
        for c in QuicCc::ALL {
            assert_eq!(c.name().parse::<QuicCc>().unwrap(), c);
        }
        for c in TcpCc::ALL {
            assert_eq!(c.name().parse::<TcpCc>().unwrap(), c);
        }
    }

    #[test]
    fn initial_window_is_counted_in_packets() {
        let f = QuicCc::Cubic.factory(Some(32));
        let c = f.build(std::time::Instant::now(), 1200);
        assert_eq!(c.initial_window(), 32 * PACKET_BYTES);
    }

    #[test]
    fn kernel_tcp_congestion_is_set_per_socket() {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        let r = socket2::SockRef::from(&s);
        TcpCc::Reno.apply(&r).unwrap();
        assert_eq!(TcpCc::current(&r).unwrap(), "reno");
    }
}
