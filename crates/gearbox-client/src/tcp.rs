//! TCP+TLS: opening a connection (what HTTP/1.1 and HTTP/2 both start from) and the
//! one hyper exchange both send their requests with.
//!
//! HTTP/1.1 and HTTP/2 differ in how connections are pooled (`crate::h1`,
//! `crate::h2`), not in how a request goes out and its response comes back: hyper's
//! two `SendRequest`s take the same request and give the same response, so
//! [`exchange`] is written once and each protocol hands it a closure that sends on its
//! own sender. Rejected alternative: a trait over the two senders, which adds a type
//! for what one closure says.

use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Version};
use http_body_util::{BodyExt, Full};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::client::TlsStream;

use crate::client::{ParsedUrl, Request};
use crate::conn::{ms_since, Dial};
use crate::error::ClientError;
use crate::exchange::{Exchanged, Failure, Progress};

/// Request body type on hyper connections.
pub(crate) type HyperBody = Full<Bytes>;

/// A TLS-over-TCP connection fresh from its handshake.
pub(crate) struct TcpTls {
    pub stream: TlsStream<TcpStream>,
    pub fd: Arc<OwnedFd>,
    pub local_addr: String,
    pub handshake_ms: f64,
    /// The ALPN id the server picked (None: it picked nothing).
    pub alpn: Option<Vec<u8>>,
}

impl TcpTls {
    /// Whether the server agreed to HTTP/2.
    pub fn is_h2(&self) -> bool {
        self.alpn.as_deref() == Some(b"h2".as_slice())
    }
}

/// TCP connect (bound to the path's local address, with the chosen kernel congestion
/// controller set before the SYN so it governs the whole connection) and TLS handshake,
/// bounded by the connect timeout.
pub(crate) async fn open_tcp_tls(dial: &Dial<'_>, tls: &tokio_rustls::TlsConnector) -> Result<TcpTls, ClientError> {
    let addr = dial.target.addr;
    let started = Instant::now();
    let connect_err = |source: std::io::Error| ClientError::Connect {
        addr: addr.to_string(),
        source,
    };
    let work = async {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        }
        .map_err(connect_err)?;
        if let Some(ip) = dial.local {
            socket.bind(SocketAddr::new(ip, 0)).map_err(|e| {
                connect_err(std::io::Error::new(
                    e.kind(),
                    format!("cannot bind local address {ip}: {e}"),
                ))
            })?;
        }
        if let Some(cc) = dial.tcp_cc {
            cc.apply(&socket2::SockRef::from(&socket))
                .map_err(|e| ClientError::Config(format!("cannot set TCP congestion control {cc}: {e}")))?;
        }
        // Requests are small writes that must not wait for Nagle's timer.
        socket.set_nodelay(true).map_err(connect_err)?;
        let stream = socket.connect(addr).await.map_err(connect_err)?;
        let fd = Arc::new(stream.as_fd().try_clone_to_owned().map_err(connect_err)?);
        let local_addr = stream.local_addr().map(|a| a.to_string()).unwrap_or_default();
        let stream = tls
            .connect(dial.target.server_name.clone(), stream)
            .await
            .map_err(|e| ClientError::Tls {
                addr: addr.to_string(),
                reason: e.to_string(),
            })?;
        let alpn = stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
        Ok(TcpTls {
            stream,
            fd,
            local_addr,
            handshake_ms: ms_since(started),
            alpn,
        })
    };
    match tokio::time::timeout(dial.connect_timeout, work).await {
        Ok(res) => res,
        Err(_) => Err(ClientError::Timeout {
            what: "TCP+TLS handshake",
            addr: addr.to_string(),
            after: dial.connect_timeout,
        }),
    }
}

/// One request and its response on a hyper connection (`protocol`: "h1" or "h2").
/// `send` hands the request to the connection; a failure there may be retried on a new
/// connection when the connection was a pooled one (`new` false: it was found dead),
/// a failure while reading the body may not.
pub(crate) async fn exchange<F, Fut>(
    protocol: &'static str,
    version: Version,
    url: &ParsedUrl,
    req: &Request,
    new: bool,
    p: &mut Progress,
    send: F,
) -> Result<Exchanged, Failure>
where
    F: FnOnce(http::Request<HyperBody>) -> Fut,
    Fut: Future<Output = Result<http::Response<hyper::body::Incoming>, hyper::Error>>,
{
    let request = hyper_request(url, req, version)?;
    let response = send(request).await.map_err(|e| Failure {
        error: http_error(protocol, req, e),
        retry: !new,
        quic: false,
        sent: true,
    })?;
    Ok(read_hyper(response, p, req)
        .await
        .map_err(|e| http_error(protocol, req, e))?)
}

/// The request as hyper sends it: origin-form target and `Host` for HTTP/1.1, absolute
/// URI (hyper turns it into `:scheme`/`:authority`) for HTTP/2.
fn hyper_request(url: &ParsedUrl, req: &Request, version: Version) -> Result<http::Request<HyperBody>, ClientError> {
    let bad = |e: http::Error| ClientError::BadUrl {
        url: req.url.clone(),
        reason: e.to_string(),
    };
    let mut builder = http::Request::builder().method(req.method.clone()).version(version);
    builder = if version == Version::HTTP_11 {
        let host = HeaderValue::from_str(&url.authority).map_err(|e| ClientError::BadUrl {
            url: req.url.clone(),
            reason: e.to_string(),
        })?;
        builder
            .uri(url.path_and_query.as_str())
            .header(http::header::HOST, host)
    } else {
        builder.uri(url.uri.clone())
    };
    let mut request = builder.body(Full::new(req.body.clone())).map_err(bad)?;
    for (name, value) in &req.headers {
        if name != http::header::HOST {
            request.headers_mut().append(name.clone(), value.clone());
        }
    }
    Ok(request)
}

/// Reads a hyper response to its end, timing the first body byte.
async fn read_hyper(
    response: http::Response<hyper::body::Incoming>,
    p: &mut Progress,
    req: &Request,
) -> Result<(u16, HeaderMap, Bytes), hyper::Error> {
    p.headers(response.status().as_u16());
    let (parts, mut incoming) = response.into_parts();
    let mut body = BytesMut::new();
    while let Some(frame) = incoming.frame().await {
        if let Ok(data) = frame?.into_data() {
            p.data(data.len());
            if !req.discard_body {
                body.extend_from_slice(&data);
            }
        }
    }
    Ok((parts.status.as_u16(), parts.headers, body.freeze()))
}

fn http_error(protocol: &'static str, req: &Request, e: hyper::Error) -> ClientError {
    // hyper's Display is terse ("connection closed before message completed"); the
    // source chain carries the h2 or io reason.
    let mut reason = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        reason.push_str(": ");
        reason.push_str(&s.to_string());
        source = s.source();
    }
    ClientError::Http {
        protocol,
        url: req.url.clone(),
        reason,
    }
}
