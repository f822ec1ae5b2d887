//! One HTTP/1.1 exchange with the control plane over TLS 1.3 (hyper's connection API on
//! tokio-rustls), with the bearer token and a bound on the whole exchange.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;

use super::{ControlConfig, ControlError};
use crate::tls::{self, Trust};

/// Largest answer read (an artifact is the largest; the service takes 8 MiB requests).
const MAX_ANSWER_BYTES: usize = 256 << 20;

/// Where the service is: host, port, path prefix.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    host: String,
    port: u16,
    prefix: String,
}

impl Target {
    pub(crate) fn parse(url: &str) -> Result<Target, ControlError> {
        let bad = |m: String| ControlError::Config {
            field: "url",
            message: format!("{url:?}: {m}"),
        };
        let uri: http::Uri = url.parse().map_err(|e| bad(format!("not a URL ({e})")))?;
        if uri.scheme_str() != Some("https") {
            return Err(bad(
                "the control plane is served over HTTPS only: https://HOST:PORT".into()
            ));
        }
        let host = uri
            .host()
            .ok_or_else(|| bad("no host".into()))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        Ok(Target {
            host,
            port: uri.port_u16().unwrap_or(443),
            prefix: uri.path().trim_end_matches('/').to_string(),
        })
    }
}

/// A reply: status, headers, the whole body.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: http::HeaderMap,
    /// Body.
    pub body: Bytes,
}

impl Reply {
    /// A header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body as text, for error messages (at most 300 characters).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).chars().take(300).collect()
    }
}

/// The control plane's address, trust root and token.
pub struct ControlClient {
    target: Target,
    server_name: ServerName<'static>,
    tls: tokio_rustls::TlsConnector,
    auth: http::HeaderValue,
    timeout: Duration,
}

impl std::fmt::Debug for ControlClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlClient")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl ControlClient {
    /// A client for `config`'s URL, CA and token (validated here).
    pub fn new(config: &ControlConfig) -> Result<ControlClient, ControlError> {
        config.validate()?;
        let target = Target::parse(&config.url)?;
        let server_name = ServerName::try_from(target.host.clone()).map_err(|e| ControlError::Config {
            field: "url",
            message: format!("{}: not a host name or address ({e})", target.host),
        })?;
        let tls = tls::client_config(&Trust::Roots(vec![config.ca.clone()]), &[b"http/1.1"])?;
        let auth =
            http::HeaderValue::from_str(&format!("Bearer {}", config.token)).map_err(|_| ControlError::Config {
                field: "token",
                message: "not a valid header value".into(),
            })?;
        Ok(ControlClient {
            target,
            server_name,
            tls: tokio_rustls::TlsConnector::from(Arc::new(tls)),
            auth,
            timeout: Duration::from_millis(config.timeout_ms),
        })
    }

    /// One request on a fresh connection; `path` starts with `/v1`.
    pub async fn request(
        &self,
        method: http::Method,
        path: &str,
        headers: &[(&'static str, String)],
        body: Bytes,
    ) -> Result<Reply, ControlError> {
        match tokio::time::timeout(self.timeout, self.exchange(method, path, headers, body)).await {
            Ok(r) => r,
            Err(_) => Err(ControlError::Unreachable(format!(
                "{}:{}: no answer within {:?}",
                self.target.host, self.target.port, self.timeout
            ))),
        }
    }

    async fn exchange(
        &self,
        method: http::Method,
        path: &str,
        headers: &[(&'static str, String)],
        body: Bytes,
    ) -> Result<Reply, ControlError> {
        let at = format!("{}:{}", self.target.host, self.target.port);
        let down = |what: &str, e: &dyn std::fmt::Display| ControlError::Unreachable(format!("{at}: {what}: {e}"));
        let tcp = tokio::net::TcpStream::connect((self.target.host.as_str(), self.target.port))
            .await
            .map_err(|e| down("connect", &e))?;
        let _ = tcp.set_nodelay(true);
        let stream = self
            .tls
            .connect(self.server_name.clone(), tcp)
            .await
            .map_err(|e| down("TLS", &e))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(stream))
            .await
            .map_err(|e| down("HTTP", &e))?;
        let driver = tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("{}{}", self.target.prefix, path))
            .header(http::header::HOST, format!("{}:{}", self.target.host, self.target.port))
            .header(http::header::AUTHORIZATION, self.auth.clone());
        for (k, v) in headers {
            req = req.header(*k, v.as_str());
        }
        let req = req.body(Full::new(body)).map_err(|e| down("request", &e))?;
        let result = async {
            let resp = sender.send_request(req).await.map_err(|e| down("HTTP", &e))?;
            let (parts, body) = resp.into_parts();
            let body = Limited::new(body, MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| down("reading the answer", &e))?
                .to_bytes();
            Ok(Reply {
                status: parts.status.as_u16(),
                headers: parts.headers,
                body,
            })
        }
        .await;
        driver.abort();
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_host_port_and_prefix() {
        let t = Target::parse("https://127.0.0.1:8443/").unwrap();
        assert_eq!((t.host.as_str(), t.port, t.prefix.as_str()), ("127.0.0.1", 8443, ""));
        let t = Target::parse("https://control.example/gbx").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.prefix.as_str()),
            ("control.example", 443, "/gbx")
        );
        assert!(Target::parse("http://127.0.0.1:8443").is_err());
        assert!(Target::parse("not a url").is_err());
    }
}
