//! Edge configuration: a TOML file (`--config`) whose every field can also be set
//! by a flag; flags win. Unknown fields are rejected and errors name the file,
//! line and field.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use gearbox_cc::{QuicCc, TcpCc};
use serde::{Deserialize, Serialize};

/// Default upper limit of `/bytes/{n}`: 1 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

/// Everything the edge needs to start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EdgeConfig {
    /// TCP listen address (HTTPS: h2, http/1.1).
    pub listen: SocketAddr,
    /// UDP listen address for QUIC (h3); by default the same address and port as `listen`.
    pub quic_listen: Option<SocketAddr>,
    /// Admin listen address for `/metrics` (plain HTTP); none by default.
    pub admin_listen: Option<SocketAddr>,
    /// Certificate chain, PEM.
    pub cert: PathBuf,
    /// Private key, PEM.
    pub key: PathBuf,
    /// QUIC congestion controller.
    pub cc: QuicCc,
    /// QUIC initial congestion window, packets of 1200 bytes (None: RFC 9002 default).
    pub initial_window: Option<u32>,
    /// Kernel TCP congestion control (None: the system default).
    pub tcp_cc: Option<TcpCc>,
    /// Largest n that `/bytes/{n}` serves; larger asks get 400.
    pub max_bytes: u64,
    /// Directory served for paths that name a file in it.
    pub static_dir: Option<PathBuf>,
    /// Origin (`http://host:port`) that gets every request no other route takes.
    pub upstream: Option<String>,
    /// Where per-request telemetry goes (JSON lines; `-` = stdout).
    pub telemetry: Option<PathBuf>,
    /// Advertise HTTP/3 with `Alt-Svc` on TCP responses.
    pub alt_svc: bool,
    /// Idle timeout of QUIC connections, milliseconds.
    pub idle_timeout_ms: u64,
    /// Bound on a TLS or QUIC handshake, milliseconds.
    pub handshake_timeout_ms: u64,
}

impl Default for EdgeConfig {
    fn default() -> Self {
        EdgeConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 4433)),
            quic_listen: None,
            admin_listen: None,
            cert: PathBuf::from("cert.pem"),
            key: PathBuf::from("key.pem"),
            cc: QuicCc::Cubic,
            initial_window: None,
            tcp_cc: None,
            max_bytes: DEFAULT_MAX_BYTES,
            static_dir: None,
            upstream: None,
            telemetry: None,
            alt_svc: true,
            idle_timeout_ms: 30_000,
            handshake_timeout_ms: 10_000,
        }
    }
}

/// A configuration that cannot be used, with where and why.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has a bad or unknown field.
    #[error("{path}:{line}:{column}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The parser's message, which names the field.
        message: String,
    },
    /// A field has a value out of range.
    #[error("invalid value for `{field}`: {message}")]
    Invalid {
        /// Field (and flag) name.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
}

/// 1-based line and column of a byte offset in `text`.
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

impl EdgeConfig {
    /// Reads a TOML file; missing fields take their defaults.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.into(),
            source,
        })?;
        Self::from_toml(&text, path)
    }

    /// Parses TOML text; `path` is only used in error messages.
    pub fn from_toml(text: &str, path: &Path) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| {
            let (line, column) = e.span().map_or((0, 0), |s| line_column(text, s.start));
            ConfigError::Parse {
                path: path.into(),
                line,
                column,
                message: e.message().trim().to_string(),
            }
        })
    }

    /// Checks values that parse but cannot work.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, message: String| Err(ConfigError::Invalid { field, message });
        if self.max_bytes == 0 {
            return invalid("max_bytes", "must be at least 1".into());
        }
        if self.initial_window == Some(0) {
            return invalid("initial_window", "must be at least 1 packet".into());
        }
        if self.idle_timeout_ms == 0 {
            return invalid("idle_timeout_ms", "must be positive".into());
        }
        if self.handshake_timeout_ms == 0 {
            return invalid("handshake_timeout_ms", "must be positive".into());
        }
        if let Some(dir) = &self.static_dir {
            if !dir.is_dir() {
                return invalid("static_dir", format!("{} is not a directory", dir.display()));
            }
        }
        if let Some(up) = &self.upstream {
            match up.parse::<http::Uri>() {
                Ok(u) if u.scheme_str() == Some("http") && u.authority().is_some() => {}
                _ => return invalid("upstream", format!("{up:?} is not an http://host:port origin")),
            }
        }
        Ok(())
    }

    /// The QUIC listen address.
    pub fn quic_addr(&self) -> SocketAddr {
        self.quic_listen.unwrap_or(self.listen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_field_is_named_with_its_line() {
        let text = "listen = \"127.0.0.1:1\"\nmax_byte = 5\n";
        let err = EdgeConfig::from_toml(text, Path::new("edge.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("edge.toml:2:1: unknown field `max_byte`"), "{err}");
    }

    #[test]
    fn bad_cc_name_lists_valid_ones() {
        let err = EdgeConfig::from_toml("cc = \"vegas\"", Path::new("e.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("e.toml:1:") && err.contains("newreno") && err.contains("bbr"),
            "{err}"
        );
    }

    #[test]
    fn zero_limit_is_rejected_by_field_name() {
        let cfg = EdgeConfig {
            max_bytes: 0,
            ..EdgeConfig::default()
        };
        assert_eq!(
            cfg.validate().unwrap_err().to_string(),
            "invalid value for `max_bytes`: must be at least 1"
        );
    }

    #[test]
    fn upstream_must_be_an_http_origin() {
        let cfg = EdgeConfig {
            upstream: Some("ftp://x".into()),
            ..EdgeConfig::default()
        };
        assert!(cfg.validate().unwrap_err().to_string().contains("`upstream`"));
    }
}
