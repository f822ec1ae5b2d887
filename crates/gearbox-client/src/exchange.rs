//! What every protocol module shares about one request in flight: its [`Progress`]
//! (what is known so far, for the record), the [`Failure`] a send path reports to
//! the client's retry and fallback rules, and the [`Exchanged`] response.
//!
//! The protocol modules (`crate::h1`, `crate::h2`, `crate::h3`, the race in
//! `crate::race`) fill these in; `crate::client` reads them to decide what to do next
//! and to write the record.

use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;
use gearbox_dataplane::telemetry::Protocol;
use http::HeaderMap;

use crate::conn::{ConnInfo, SnapshotSource};
use crate::error::ClientError;

/// A whole response: status, headers and body.
pub(crate) type Exchanged = (u16, HeaderMap, Bytes);

/// What is known about a request while it runs; a timeout drops the running future,
/// and the record is then written from what got this far.
pub(crate) struct Progress {
    pub protocol: Protocol,
    pub server_addr: Option<SocketAddr>,
    pub conn: Option<ConnInfo>,
    pub new_connection: bool,
    pub snapshot: Option<SnapshotSource>,
    pub status: Option<u16>,
    pub headers_at: Option<Instant>,
    pub first_byte_at: Option<Instant>,
    pub bytes: u64,
    /// What a `Race` request did (appended to the decision as `;race=...`).
    pub race: Option<&'static str>,
    /// What the fallback rules did (appended to the decision as `;fallback=...`).
    pub fallback: Option<&'static str>,
    /// The protocol the request was first handed to, when it was retried on another.
    pub retried_from: Option<Protocol>,
    /// With `retried_from`: time from the request's start to the retry, ms.
    pub retry_lost_ms: Option<f64>,
    /// The protocol of the hedge when one was started (`crate::hedge`).
    pub hedged: Option<Protocol>,
    /// With `hedged`: time from the request's start to the hedge's start, ms.
    pub hedge_at_ms: Option<f64>,
    /// How the hedge ended (appended to the decision as `;hedge=...`).
    pub hedge: Option<&'static str>,
}

impl Progress {
    pub fn new(protocol: Protocol) -> Self {
        Progress {
            protocol,
            server_addr: None,
            conn: None,
            new_connection: false,
            snapshot: None,
            status: None,
            headers_at: None,
            first_byte_at: None,
            bytes: 0,
            race: None,
            fallback: None,
            retried_from: None,
            retry_lost_ms: None,
            hedged: None,
            hedge_at_ms: None,
            hedge: None,
        }
    }

    /// The exchange of `other` (a hedge that answered) replaces this one's: connection,
    /// protocol, status, times and bytes; what the fallback and hedge rules noted stays.
    pub fn take_exchange(&mut self, other: Progress) {
        self.protocol = other.protocol;
        self.server_addr = other.server_addr.or(self.server_addr);
        self.conn = other.conn;
        self.new_connection = other.new_connection;
        self.snapshot = other.snapshot;
        self.status = other.status;
        self.headers_at = other.headers_at;
        self.first_byte_at = other.first_byte_at;
        self.bytes = other.bytes;
    }

    /// The request now runs on `info`'s connection (a fresh one when `new`).
    pub fn attach(&mut self, info: &ConnInfo, new: bool, snapshot: SnapshotSource, protocol: Protocol) {
        self.conn = Some(info.clone());
        self.new_connection = new;
        self.snapshot = Some(snapshot);
        self.protocol = protocol;
        self.status = None;
        self.headers_at = None;
        self.first_byte_at = None;
        self.bytes = 0;
    }

    /// Response headers arrived with `status`.
    pub fn headers(&mut self, status: u16) {
        self.status = Some(status);
        self.headers_at = Some(Instant::now());
    }

    /// `len` body bytes arrived.
    pub fn data(&mut self, len: usize) {
        if len > 0 && self.first_byte_at.is_none() {
            self.first_byte_at = Some(Instant::now());
        }
        self.bytes += len as u64;
    }
}

/// A failure, and what may be done about it.
pub(crate) struct Failure {
    pub error: ClientError,
    /// It may be retried once on a fresh connection of the same protocol (a pooled
    /// connection turned out dead before any response header).
    pub retry: bool,
    /// It happened on QUIC (handshake, connection or HTTP/3 exchange), so a fallback
    /// mode may carry the request over TCP instead.
    pub quic: bool,
    /// The request had been handed to the connection (it may have reached the server).
    pub sent: bool,
}

impl From<ClientError> for Failure {
    fn from(error: ClientError) -> Self {
        Failure {
            error,
            retry: false,
            quic: false,
            sent: false,
        }
    }
}
