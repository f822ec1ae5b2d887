//! What can go wrong with a request, as a typed error whose [`ClientError::kind`] is the
//! `error` field of the request's telemetry record.
//!
//! Every failure is reported, never panicked on, and every wait is bounded: a request
//! ends with a response or with one of these within the configured request timeout
//! (docs/architecture.md, "Safe by default").

use std::time::Duration;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The URL cannot be requested (not https, no host, unparsable).
    #[error("bad URL {url:?}: {reason}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The request named a local path the client does not have.
    #[error("path index {index} does not exist: the client has {available} local path(s)")]
    Path {
        /// The index asked for.
        index: usize,
        /// How many paths the client has.
        available: usize,
    },
    /// A local path address the client was given cannot be bound: it is not an address
    /// of this host (or not up).
    #[error("local path address {addr} cannot be used: {reason} (is it an address of this host?)")]
    LocalAddr {
        /// The address given.
        addr: std::net::IpAddr,
        /// What binding it said.
        reason: String,
    },
    /// The host name did not resolve to an address.
    #[error("cannot resolve {host}: {reason}")]
    Resolve {
        /// Host (and port) looked up.
        host: String,
        /// Why.
        reason: String,
    },
    /// The TCP connection could not be made (refused, unreachable, local bind failed).
    #[error("TCP connect to {addr} failed: {source}")]
    Connect {
        /// Server address.
        addr: String,
        /// The socket error.
        source: std::io::Error,
    },
    /// The TLS handshake over TCP failed, or the QUIC handshake failed on a TLS alert
    /// (untrusted certificate, no common ALPN, ...).
    #[error("TLS handshake with {addr} failed: {reason}")]
    Tls {
        /// Server address.
        addr: String,
        /// rustls' reason.
        reason: String,
    },
    /// The QUIC connection failed or was closed (quinn's connection error).
    #[error("QUIC connection to {addr} failed: {reason}")]
    Quic {
        /// Server address.
        addr: String,
        /// quinn's (or h3's) reason.
        reason: String,
    },
    /// The QUIC connection went silent: requests were outstanding on it and nothing
    /// arrived from the server for `silent_ms` (a UDP blackhole, see `crate::silence`);
    /// the client closed it instead of waiting for the idle timeout.
    #[error("QUIC path to {addr} went silent: nothing received for {silent_ms} ms with requests outstanding")]
    QuicSilent {
        /// Server address.
        addr: String,
        /// How long nothing had arrived when the connection was given up, ms.
        silent_ms: u64,
    },
    /// A bounded wait ran out: the handshake (connect timeout) or the whole request
    /// (request timeout).
    #[error("{what} with {addr} timed out after {} ms", after.as_millis())]
    Timeout {
        /// What was being waited for: `connect` or `request`.
        what: &'static str,
        /// Server address (or the URL's authority when no address was known yet).
        addr: String,
        /// The bound that ran out.
        after: Duration,
    },
    /// The HTTP exchange failed after the connection was up (reset stream, malformed
    /// response, connection lost mid-response).
    #[error("{protocol} request to {url} failed: {reason}")]
    Http {
        /// h1, h2 or h3.
        protocol: &'static str,
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The client configuration cannot be used (certificate files, congestion control
    /// not available in the kernel, ...).
    #[error("client configuration: {0}")]
    Config(String),
    /// A page given to `load_page` is not a loadable dependency graph.
    #[error("page cannot be loaded: {0}")]
    Page(String),
}

impl ClientError {
    /// The same failure for another request that waited on it (a shared handshake):
    /// the same kind and message; an I/O source is carried as its text.
    pub(crate) fn same_again(&self) -> ClientError {
        match self {
            ClientError::Connect { addr, source } => ClientError::Connect {
                addr: addr.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            ClientError::BadUrl { url, reason } => ClientError::BadUrl {
                url: url.clone(),
                reason: reason.clone(),
            },
            ClientError::Path { index, available } => ClientError::Path {
                index: *index,
                available: *available,
            },
            ClientError::LocalAddr { addr, reason } => ClientError::LocalAddr {
                addr: *addr,
                reason: reason.clone(),
            },
            ClientError::Resolve { host, reason } => ClientError::Resolve {
                host: host.clone(),
                reason: reason.clone(),
            },
            ClientError::Tls { addr, reason } => ClientError::Tls {
                addr: addr.clone(),
                reason: reason.clone(),
            },
            ClientError::Quic { addr, reason } => ClientError::Quic {
                addr: addr.clone(),
                reason: reason.clone(),
            },
            ClientError::QuicSilent { addr, silent_ms } => ClientError::QuicSilent {
                addr: addr.clone(),
                silent_ms: *silent_ms,
            },
            ClientError::Timeout { what, addr, after } => ClientError::Timeout {
                what,
                addr: addr.clone(),
                after: *after,
            },
            ClientError::Http { protocol, url, reason } => ClientError::Http {
                protocol,
                url: url.clone(),
                reason: reason.clone(),
            },
            ClientError::Config(s) => ClientError::Config(s.clone()),
            ClientError::Page(s) => ClientError::Page(s.clone()),
        }
    }

    /// Short kind written to the telemetry record's `error` field.
    pub fn kind(&self) -> &'static str {
        match self {
            ClientError::BadUrl { .. } => "bad_url",
            ClientError::Path { .. } => "path",
            ClientError::LocalAddr { .. } => "local_addr",
            ClientError::Resolve { .. } => "resolve",
            ClientError::Connect { .. } => "connect",
            ClientError::Tls { .. } => "tls",
            ClientError::Quic { .. } => "quic",
            ClientError::QuicSilent { .. } => "quic_silent",
            ClientError::Timeout { .. } => "timeout",
            ClientError::Http { .. } => "http",
            ClientError::Config(_) => "config",
            ClientError::Page(_) => "page",
        }
    }
}

/// Maps a quinn connection error: a CRYPTO_ERROR (a TLS alert, RFC 9001 §4.8) is a TLS
/// failure, an idle timeout during the handshake is a timeout, anything else is QUIC's.
pub(crate) fn from_quic(addr: &str, err: &quinn::ConnectionError, connect_timeout: Duration) -> ClientError {
    match err {
        quinn::ConnectionError::TransportError(t) if is_crypto(u64::from(t.code)) => ClientError::Tls {
            addr: addr.to_string(),
            reason: t.to_string(),
        },
        quinn::ConnectionError::ConnectionClosed(c) if is_crypto(u64::from(c.error_code)) => ClientError::Tls {
            addr: addr.to_string(),
            reason: c.to_string(),
        },
        quinn::ConnectionError::TimedOut => ClientError::Timeout {
            what: "QUIC handshake",
            addr: addr.to_string(),
            after: connect_timeout,
        },
        other => ClientError::Quic {
            addr: addr.to_string(),
            reason: other.to_string(),
        },
    }
}

/// QUIC's CRYPTO_ERROR range is 0x0100-0x01ff (RFC 9000 §20.1).
fn is_crypto(code: u64) -> bool {
    code & !0xff == 0x100
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_alerts_in_quic_are_reported_as_tls_failures() {
        assert!(is_crypto(0x12a));
        assert!(!is_crypto(0x0a));
        assert!(!is_crypto(0x200));
    }

    #[test]
    fn error_kinds_are_the_telemetry_names() {
        let e = ClientError::Timeout {
            what: "request",
            addr: "a:1".into(),
            after: Duration::from_millis(1500),
        };
        assert_eq!(e.kind(), "timeout");
        assert_eq!(e.to_string(), "request with a:1 timed out after 1500 ms");
    }
}
