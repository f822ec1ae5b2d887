//! The transport gear: which transport a request takes when the caller leaves it to the
//! client (`TransportPref::Auto`).
//!
//! WiseTrans (seed 000, §III-A) decides TCP or QUIC per request on the client, as "a shim
//! layer between the application layer and transport layer" that collects what finished
//! requests cost and makes the next decision. That is exactly the gear shape of
//! DESIGN.md: a sans-IO object that is asked to [`TransportGear::choose`] at request start
//! and told what happened with [`TransportGear::observe`], both given `now`. It owns no
//! sockets and no clock, so the WiseTrans gear, baselines and oracles are tested with
//! invented time and records, and the simulator drives them the same way.
//!
//! Rejected alternative: a callback that receives the live connection pool. It would let
//! a gear look at sockets directly, but then it could not run in virtual time.

use std::time::Instant;

use gearbox_dataplane::telemetry::ClientRecord;

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

/// A transport gear: chooses the transport of each `Auto` request and learns from the
/// records of finished ones.
pub trait TransportGear: Send {
    /// The transport for the next request to `origin` (`host:port`), and a short reason
    /// that goes into the record's `decision` field. Returning `Auto` is treated as `Tcp`.
    fn choose(&mut self, origin: &str, now: Instant) -> (TransportPref, String);

    /// A request finished (successfully or not); `record` is what was written to telemetry.
    fn observe(&mut self, record: &ClientRecord, now: Instant);
}

/// A boxed gear is a gear, so wrappers (such as the CLI's record collector) can hold
/// either a concrete gear or one chosen at run time.
impl<G: TransportGear + ?Sized> TransportGear for Box<G> {
    fn choose(&mut self, origin: &str, now: Instant) -> (TransportPref, String) {
        (**self).choose(origin, now)
    }

    fn observe(&mut self, record: &ClientRecord, now: Instant) {
        (**self).observe(record, now)
    }
}

/// The static baseline: always the same transport (WiseTrans §IV-A's "TCP-only" and
/// "QUIC-only").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaticTransport {
    /// The transport every request takes.
    pub transport: TransportPref,
}

impl StaticTransport {
    /// Always `transport` (`Auto` means `Tcp`).
    pub fn new(transport: TransportPref) -> Self {
        let transport = if transport == TransportPref::Auto {
            TransportPref::Tcp
        } else {
            transport
        };
        StaticTransport { transport }
    }
}

impl Default for StaticTransport {
    /// TCP, the web's usual default.
    fn default() -> Self {
        StaticTransport::new(TransportPref::Tcp)
    }
}

impl TransportGear for StaticTransport {
    fn choose(&mut self, _origin: &str, _now: Instant) -> (TransportPref, String) {
        (self.transport, format!("static:{}", self.transport.name()))
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
        assert_eq!(g.choose("a:443", now), (TransportPref::Quic, "static:quic".to_string()));
        assert_eq!(g.choose("b:443", now).0, TransportPref::Quic);
    }

    #[test]
    fn static_gear_never_answers_auto() {
        let mut g = StaticTransport::new(TransportPref::Auto);
        assert_eq!(g.choose("a:443", Instant::now()).0, TransportPref::Tcp);
    }
}
