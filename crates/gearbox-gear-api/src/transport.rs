//! Client, per request: which transport carries it (WiseTrans §III-A).
//!
//! WiseTrans decides TCP or QUIC for each request on the client, as a shim between the
//! application and the transports that collects what finished requests cost and makes
//! the next decision. The gear is asked at request start ([`TransportGear::choose`]) and
//! told every finished request's record ([`TransportGear::observe`]).
//!
//! The choice is the transport only. Which HTTP version runs on TCP (HTTP/2 or
//! HTTP/1.1) is settled by ALPN or by the per-page HTTP-version gear
//! ([`crate::http_version`]), never by this one; the client maps a choice onto its own
//! request preferences.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::decision::Decision;
use crate::record::{ClientRecord, Protocol};

/// The two transports a request or connection can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// TLS over kernel TCP.
    Tcp,
    /// QUIC.
    Quic,
}

impl Transport {
    /// The other one.
    pub fn other(self) -> Self {
        match self {
            Transport::Tcp => Transport::Quic,
            Transport::Quic => Transport::Tcp,
        }
    }

    /// `tcp` or `quic`.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Quic => "quic",
        }
    }

    /// The transport a record's protocol travelled on.
    pub fn of(protocol: Protocol) -> Self {
        match protocol {
            Protocol::H1 | Protocol::H2 => Transport::Tcp,
            Protocol::H3 => Transport::Quic,
        }
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a transport gear answers: a transport, or a race between the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportChoice {
    /// TCP.
    Tcp,
    /// QUIC.
    Quic,
    /// Let the client race QUIC against TCP the way Chromium does and keep the winner
    /// (the browser baseline, WiseTrans §IV-A).
    Race,
}

impl TransportChoice {
    /// `tcp`, `quic` or `race`, as written in reasons.
    pub fn name(self) -> &'static str {
        match self {
            TransportChoice::Tcp => "tcp",
            TransportChoice::Quic => "quic",
            TransportChoice::Race => "race",
        }
    }

    /// The transport chosen outright (None for a race).
    pub fn transport(self) -> Option<Transport> {
        match self {
            TransportChoice::Tcp => Some(Transport::Tcp),
            TransportChoice::Quic => Some(Transport::Quic),
            TransportChoice::Race => None,
        }
    }
}

impl From<Transport> for TransportChoice {
    fn from(t: Transport) -> Self {
        match t {
            Transport::Tcp => TransportChoice::Tcp,
            Transport::Quic => TransportChoice::Quic,
        }
    }
}

impl std::fmt::Display for TransportChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A transport gear: chooses the transport of each request the caller leaves to it and
/// learns from the records of finished ones (WiseTrans §III-A).
pub trait TransportGear: Send {
    /// The transport for the next request to `origin` (`host:port`). The reason goes
    /// into the record's `decision` field, the id (if any) into `decision_id`.
    fn choose(&mut self, origin: &str, now: Instant) -> Decision<TransportChoice>;

    /// A request finished (successfully or not); `record` is what was written to
    /// telemetry, carrying the id of the decision it was made with.
    fn observe(&mut self, record: &ClientRecord, now: Instant);
}

/// A boxed gear is a gear, so wrappers (such as a record collector) can hold either a
/// concrete gear or one chosen at run time.
impl<G: TransportGear + ?Sized> TransportGear for Box<G> {
    fn choose(&mut self, origin: &str, now: Instant) -> Decision<TransportChoice> {
        (**self).choose(origin, now)
    }

    fn observe(&mut self, record: &ClientRecord, now: Instant) {
        (**self).observe(record, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_protocol_names_its_transport_and_choices_name_themselves() {
        assert_eq!(Transport::of(Protocol::H1), Transport::Tcp);
        assert_eq!(Transport::of(Protocol::H2), Transport::Tcp);
        assert_eq!(Transport::of(Protocol::H3), Transport::Quic);
        assert_eq!(Transport::Tcp.other(), Transport::Quic);
        assert_eq!(TransportChoice::from(Transport::Quic).name(), "quic");
        assert_eq!(TransportChoice::Race.transport(), None);
        assert_eq!(serde_json::to_string(&TransportChoice::Race).unwrap(), "\"race\"");
    }
}
