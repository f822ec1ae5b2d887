//! The transport gear in the client: which transport a request takes when the caller
//! leaves it to the client (`TransportPref::Auto`).
//!
//! WiseTrans (WiseTrans §III-A) decides TCP or QUIC per request on the client, as "a shim
//! layer between the application layer and transport layer" that collects what finished
//! requests cost and makes the next decision. The gear's trait, [`TransportGear`], lives
//! in `gearbox-gear-api` with the other decision points (docs/architecture.md, "The gear
//! shape"): a sans-IO object asked to choose at request start and told every finished
//! request's record, both given `now`. This module holds what only the client needs: the
//! caller's request preference ([`TransportPref`], which also names HTTP/1.1 and racing),
//! how a gear's [`TransportChoice`] becomes one, and the static baseline the client uses
//! when no gear is set.
//!
//! Rejected alternative: a callback that receives the live connection pool. It would let
//! a gear look at sockets directly, but then it could not run in virtual time.

use std::time::Instant;

use gearbox_gear_api::{ClientRecord, Decision};
pub use gearbox_gear_api::{TransportChoice, TransportGear};

/// Which transport (and HTTP version) a request travels on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportPref {
    /// TCP with TLS, offering ALPN `h2` then `http/1.1`: HTTP/2 when the server agrees,
    /// HTTP/1.1 when it picks that.
    Tcp,
    /// TCP with TLS, offering only `http/1.1`: a pool of keep-alive HTTP/1.1 connections.
    H1,
    /// QUIC with ALPN `h3`: HTTP/3.
    Quic,
    /// Race QUIC against TCP the way Chromium does (see `crate::race`): a new connection
    /// starts with the QUIC handshake, TCP joins after a delay, the first to connect
    /// carries the request; QUIC that fails or loses while TCP works is marked broken
    /// for a while and skipped. Later requests reuse what the race chose.
    Race,
    /// Ask the client's transport gear.
    #[default]
    Auto,
}

impl TransportPref {
    /// Name on the command line and in decision strings.
    pub fn name(self) -> &'static str {
        match self {
            TransportPref::Tcp => "tcp",
            TransportPref::H1 => "h1",
            TransportPref::Quic => "quic",
            TransportPref::Race => "race",
            TransportPref::Auto => "auto",
        }
    }
}

impl std::fmt::Display for TransportPref {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl From<TransportChoice> for TransportPref {
    fn from(c: TransportChoice) -> Self {
        match c {
            TransportChoice::Tcp => TransportPref::Tcp,
            TransportChoice::Quic => TransportPref::Quic,
            TransportChoice::Race => TransportPref::Race,
        }
    }
}

/// The static baseline: always the same transport (WiseTrans §IV-A's "TCP-only" and
/// "QUIC-only").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaticTransport {
    /// The transport every request takes.
    pub choice: TransportChoice,
}

impl StaticTransport {
    /// Always the transport under `transport`: `H1` and `Auto` mean TCP (the HTTP version
    /// on TCP is not the transport gear's to choose).
    pub fn new(transport: TransportPref) -> Self {
        let choice = match transport {
            TransportPref::Tcp | TransportPref::H1 | TransportPref::Auto => TransportChoice::Tcp,
            TransportPref::Quic => TransportChoice::Quic,
            TransportPref::Race => TransportChoice::Race,
        };
        StaticTransport { choice }
    }
}

impl Default for StaticTransport {
    /// TCP, the web's usual default.
    fn default() -> Self {
        StaticTransport::new(TransportPref::Tcp)
    }
}

impl TransportGear for StaticTransport {
    fn choose(&mut self, _origin: &str, _now: Instant) -> Decision<TransportChoice> {
        Decision::new(self.choice, format!("static:{}", self.choice.name()))
    }

    fn observe(&mut self, _record: &ClientRecord, _now: Instant) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_gear_always_gives_its_transport_and_says_so() {
        let mut g = StaticTransport::new(TransportPref::Quic);
        let now = Instant::now();
        assert_eq!(
            g.choose("a:443", now),
            Decision::new(TransportChoice::Quic, "static:quic")
        );
        assert_eq!(g.choose("b:443", now).choice, TransportChoice::Quic);
    }

    #[test]
    fn static_gear_never_answers_auto() {
        let mut g = StaticTransport::new(TransportPref::Auto);
        assert_eq!(g.choose("a:443", Instant::now()).choice, TransportChoice::Tcp);
        let mut h1 = StaticTransport::new(TransportPref::H1);
        assert_eq!(h1.choose("a:443", Instant::now()).choice, TransportChoice::Tcp);
    }

    #[test]
    fn every_gear_choice_is_a_request_preference() {
        assert_eq!(TransportPref::from(TransportChoice::Tcp), TransportPref::Tcp);
        assert_eq!(TransportPref::from(TransportChoice::Quic), TransportPref::Quic);
        assert_eq!(TransportPref::from(TransportChoice::Race), TransportPref::Race);
    }
}
