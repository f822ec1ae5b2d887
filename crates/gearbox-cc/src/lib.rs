//! The congestion-control suite: which controller a connection runs, and switching it
//! while the connection lives.
//!
//! QUIC connections run the suite's own controllers on quinn's `Controller` trait:
//! NewReno, Cubic, BBR v1, Copa, Westwood+ and PCC Vivace, one module each, every one
//! inside a [`Switchable`] so the Floo gear can change a live connection's algorithm
//! with state migration (Floo §3.4). quinn's built-in NewReno, Cubic and BBR stay
//! available under `quinn-*` names as peers to compare with. TCP connections use the
//! kernel's controllers, chosen per socket with `TCP_CONGESTION`
//! (docs/architecture.md "Congestion control"; docs/cc.md).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use quinn_proto::congestion::{
    BbrConfig as QuinnBbrConfig, ControllerFactory, CubicConfig as QuinnCubicConfig,
    NewRenoConfig as QuinnNewRenoConfig,
};

pub use gearbox_gear_api::Cca;
/// quinn's controller trait, which [`Switchable`] implements.
pub use quinn_proto::congestion::Controller;

pub mod algorithm;
pub mod bbr;
pub mod config;
pub mod copa;
pub mod cubic;
pub mod effect;
pub mod kernel;
pub mod loss_based;
pub mod newreno;
pub mod path;
pub mod switchable;
#[cfg(test)]
pub(crate) mod testbed;
pub mod vivace;
pub mod westwood;

pub use algorithm::{Ack, Algorithm, Phase, SendingRate};
pub use config::{CcConfig, InvalidParameter, MAX_INITIAL_WINDOW_PACKETS};
pub use effect::{EffectWindow, SwitchEffect, EFFECT_WINDOW};
pub use kernel::{TcpCc, TcpCcHandle, TcpCcSetting, TcpSwitchError, DEFAULT_TCP_CC};
pub use path::{PathEstimator, PathState};
pub use switchable::{
    ControllerStatus, SwitchConfig, SwitchHandle, SwitchMode, SwitchOutcome, SwitchRecord, Switchable,
    SwitchableFactory,
};

/// Bytes per packet used to turn an initial window in packets into bytes.
///
/// 1200 is QUIC's minimum datagram size (RFC 9000 §14) and quinn's initial MTU,
/// so "10 packets" means what RFC 9002 §7.2 means by the initial window.
pub const PACKET_BYTES: u64 = 1200;

/// Initial window when none is asked for, packets (RFC 9002 §7.2: ten datagrams).
pub const DEFAULT_INITIAL_WINDOW_PACKETS: u32 = 10;

/// Error for a congestion-control name nobody implements.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown congestion control {name:?}; valid: {valid}")]
pub struct UnknownCc {
    /// The name that was asked for.
    pub name: String,
    /// Comma-separated list of valid names.
    pub valid: String,
}

/// A QUIC congestion controller gearbox can run: one of the suite's own (switchable)
/// or one of quinn's built-ins (a fixed peer to compare with).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum QuicCc {
    /// The suite's own controller for this algorithm, inside a [`Switchable`].
    Suite(Cca),
    /// quinn's RFC 9002 NewReno.
    QuinnNewReno,
    /// quinn's Cubic (RFC 9438, no HyStart++).
    QuinnCubic,
    /// quinn's experimental BBR.
    QuinnBbr,
}

impl QuicCc {
    /// Every controller, in the order `--help` lists them.
    pub const ALL: [QuicCc; 9] = [
        QuicCc::Suite(Cca::NewReno),
        QuicCc::Suite(Cca::Cubic),
        QuicCc::Suite(Cca::Bbr),
        QuicCc::Suite(Cca::Copa),
        QuicCc::Suite(Cca::Westwood),
        QuicCc::Suite(Cca::Vivace),
        QuicCc::QuinnNewReno,
        QuicCc::QuinnCubic,
        QuicCc::QuinnBbr,
    ];

    /// The suite's Cubic: the edge's and client's default.
    pub const CUBIC: QuicCc = QuicCc::Suite(Cca::Cubic);

    /// The name used on the command line and in telemetry.
    pub fn name(self) -> &'static str {
        match self {
            QuicCc::Suite(c) => c.name(),
            QuicCc::QuinnNewReno => "quinn-newreno",
            QuicCc::QuinnCubic => "quinn-cubic",
            QuicCc::QuinnBbr => "quinn-bbr",
        }
    }

    /// The algorithm this controller runs.
    pub fn cca(self) -> Cca {
        match self {
            QuicCc::Suite(c) => c,
            QuicCc::QuinnNewReno => Cca::NewReno,
            QuicCc::QuinnCubic => Cca::Cubic,
            QuicCc::QuinnBbr => Cca::Bbr,
        }
    }

    /// Factory for this controller with default parameters and an initial window of
    /// `initial_window_packets` packets of [`PACKET_BYTES`] (None: ten, RFC 9002 §7.2).
    /// A window of 0 or above [`MAX_INITIAL_WINDOW_PACKETS`] is an error naming it.
    pub fn factory(
        self,
        initial_window_packets: Option<u32>,
    ) -> Result<Arc<dyn ControllerFactory + Send + Sync>, InvalidParameter> {
        self.factory_with(
            &Arc::new(CcConfig::default()),
            initial_window_packets,
            SwitchHandle::new(),
        )
    }

    /// Factory with the suite's parameters `config`; the suite's controllers answer to
    /// `handle` (quinn's built-ins cannot switch and ignore it).
    pub fn factory_with(
        self,
        config: &Arc<CcConfig>,
        initial_window_packets: Option<u32>,
        handle: SwitchHandle,
    ) -> Result<Arc<dyn ControllerFactory + Send + Sync>, InvalidParameter> {
        let iw = config::initial_window_bytes(initial_window_packets.unwrap_or(DEFAULT_INITIAL_WINDOW_PACKETS))?;
        Ok(match self {
            QuicCc::Suite(c) => Arc::new(SwitchableFactory::with_handle(config.clone(), c, iw, handle)),
            QuicCc::QuinnNewReno => {
                let mut c = QuinnNewRenoConfig::default();
                c.initial_window(iw);
                Arc::new(c)
            }
            QuicCc::QuinnCubic => {
                let mut c = QuinnCubicConfig::default();
                c.initial_window(iw);
                Arc::new(c)
            }
            QuicCc::QuinnBbr => {
                let mut c = QuinnBbrConfig::default();
                c.initial_window(iw);
                Arc::new(c)
            }
        })
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
        if let Some(c) = Cca::from_name(s) {
            return Ok(QuicCc::Suite(c));
        }
        QuicCc::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownCc {
                name: s.to_string(),
                valid: QuicCc::ALL.map(|c| c.name()).join(", "),
            })
    }
}

impl TryFrom<String> for QuicCc {
    type Error = UnknownCc;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<QuicCc> for String {
    fn from(c: QuicCc) -> String {
        c.name().to_string()
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
            "unknown congestion control \"vegas\"; valid: newreno, cubic, bbr, copa, westwood, vivace, quinn-newreno, quinn-cubic, quinn-bbr"
        );
    }

    #[test]
    fn names_round_trip() {
        for c in QuicCc::ALL {
            assert_eq!(c.name().parse::<QuicCc>().unwrap(), c);
        }
    }

    #[test]
    fn initial_window_is_counted_in_packets() {
        let f = QuicCc::CUBIC.factory(Some(32)).unwrap();
        let c = f.build(std::time::Instant::now(), 1200);
        assert_eq!(c.initial_window(), 32 * PACKET_BYTES);
        let c = QuicCc::QuinnCubic
            .factory(None)
            .unwrap()
            .build(std::time::Instant::now(), 1200);
        assert_eq!(c.initial_window(), 10 * PACKET_BYTES);
        let e = QuicCc::CUBIC.factory(Some(0)).err().unwrap();
        assert_eq!(e.field, "initial_window");
    }
}
