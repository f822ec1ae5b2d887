//! Edge configuration: a TOML file (`--config`) whose every field can also be set
//! by a flag; flags win. Unknown fields are rejected and errors name the file,
//! line and field.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use gearbox_cc::{QuicCc, TcpCc};
use gearbox_dataplane::toml_file::{self, TomlFileError};
use serde::{Deserialize, Serialize};

/// Default upper limit of `/bytes/{n}`: 1 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

/// Default `TCP_NOTSENT_LOWAT` of accepted TCP connections (docs/flexhttp.md, "HTTP/2 on the demo's
/// WiFi": measured there).
pub const DEFAULT_TCP_NOTSENT_LOWAT_BYTES: u32 = 16 * 1024;

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
    /// QUIC congestion controller: one of the suite's (switchable) or a `quinn-*`
    /// built-in.
    pub cc: QuicCc,
    /// Parameters of the suite's controllers and of switching (the `[congestion]`
    /// table; docs/cc.md).
    pub congestion: gearbox_cc::CcConfig,
    /// QUIC initial congestion window, packets of 1200 bytes (None: RFC 9002 default).
    pub initial_window: Option<u32>,
    /// Kernel TCP congestion control (default [`gearbox_cc::DEFAULT_TCP_CC`], CUBIC like
    /// QUIC's; `"system"` in TOML, None here: the system's default).
    #[serde(with = "tcp_cc_setting")]
    pub tcp_cc: Option<TcpCc>,
    /// `TCP_NOTSENT_LOWAT` of every accepted TCP connection, bytes: how much not-yet-sent data the
    /// kernel may hold in the socket (None or 0: the system's, unlimited by default). Small values keep
    /// HTTP/2's responses in hyper's per-stream queues, where they are interleaved frame by frame,
    /// instead of in one FIFO socket buffer behind a large response (docs/flexhttp.md, "HTTP/2 on
    /// the demo's WiFi").
    pub tcp_notsent_lowat_bytes: Option<u32>,
    /// TCP WISE's Cwnd Table (docs/tcpwise.md): the initial window per client cluster
    /// and hour, for TCP and QUIC; reloaded when the file changes.
    pub cwnd_table: Option<PathBuf>,
    /// Apply the Cwnd Table to TCP with per-prefix routes (`initcwnd`, one IW per entry per
    /// learning interval) even where the BPF program would attach; without BPF the edge
    /// falls back to them by itself (docs/tcpwise.md, "The route fallback"). Needs root.
    pub cwnd_routes: bool,
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
    /// Listen for TCP over Multipath TCP (the kernel's, RFC 8684): the listener is an
    /// `IPPROTO_MPTCP` socket, so a client that speaks MPTCP gets a subflow on each of
    /// its paths and any other client plain TCP. Needs `net.mptcp.enabled = 1`.
    pub mptcp: bool,
    /// Idle timeout of QUIC connections, milliseconds.
    pub idle_timeout_ms: u64,
    /// Bound on a TLS or QUIC handshake, milliseconds.
    pub handshake_timeout_ms: u64,
    /// Added server processing time of every request served over TCP (h1, h2),
    /// milliseconds: a changed server implementation for WiseTrans §IV-D's
    /// generalisation test (Fig. 11). 0 in normal use.
    pub tcp_processing_ms: u64,
    /// The same for requests served over QUIC (h3).
    pub quic_processing_ms: u64,
    /// Limits and timeouts against slow or hostile clients (the `[limits]` table;
    /// docs/edge.md "Limits").
    pub limits: crate::limits::Limits,
    /// The control plane this edge uploads its records to and polls its policies from
    /// (the `[control]` table; docs/control.md, "Native upload and polling").
    pub control: Option<gearbox_dataplane::control::ControlConfig>,
}

impl Default for EdgeConfig {
    fn default() -> Self {
        EdgeConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 4433)),
            quic_listen: None,
            admin_listen: None,
            cert: PathBuf::from("cert.pem"),
            key: PathBuf::from("key.pem"),
            cc: QuicCc::CUBIC,
            congestion: gearbox_cc::CcConfig::default(),
            initial_window: None,
            tcp_cc: Some(gearbox_cc::DEFAULT_TCP_CC),
            tcp_notsent_lowat_bytes: Some(DEFAULT_TCP_NOTSENT_LOWAT_BYTES),
            cwnd_table: None,
            cwnd_routes: false,
            max_bytes: DEFAULT_MAX_BYTES,
            static_dir: None,
            upstream: None,
            telemetry: None,
            alt_svc: true,
            mptcp: false,
            idle_timeout_ms: 30_000,
            handshake_timeout_ms: 10_000,
            tcp_processing_ms: 0,
            quic_processing_ms: 0,
            limits: crate::limits::Limits::default(),
            control: None,
        }
    }
}

/// A configuration that cannot be used, with where and why.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read, is not valid TOML, or has a bad or unknown field
    /// (the message names the file, line, column and field).
    #[error(transparent)]
    File(#[from] TomlFileError),
    /// A field has a value out of range.
    #[error("invalid value for `{field}`: {message}")]
    Invalid {
        /// Field (and flag) name.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
}

impl EdgeConfig {
    /// Reads a TOML file; missing fields take their defaults.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        Ok(toml_file::read(path)?)
    }

    /// Parses TOML text; `path` is only used in error messages.
    pub fn from_toml(text: &str, path: &Path) -> Result<Self, ConfigError> {
        Ok(toml_file::from_toml(text, path)?)
    }

    /// Checks values that parse but cannot work.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, message: String| Err(ConfigError::Invalid { field, message });
        if self.max_bytes == 0 {
            return invalid("max_bytes", "must be at least 1".into());
        }

        if let Some(p) = self.initial_window {
            if let Err(e) = gearbox_cc::config::initial_window_bytes(p) {
                return invalid("initial_window", e.reason);
            }
        }
        if let Err(e) = self.congestion.validate() {
            return Err(ConfigError::Invalid {
                field: "congestion",
                message: format!("congestion.{} = {}: {}", e.field, e.value, e.reason),
            });
        }
        let polls_a_table = self.control.as_ref().is_some_and(|c| c.policies.is_some());
        if self.cwnd_routes && self.cwnd_table.is_none() && !polls_a_table {
            return invalid(
                "cwnd_routes",
                "applies a Cwnd Table: give --cwnd-table FILE (or poll one with --policies)".into(),
            );
        }
        if self.idle_timeout_ms == 0 {
            return invalid("idle_timeout_ms", "must be positive".into());
        }
        if self.handshake_timeout_ms == 0 {
            return invalid("handshake_timeout_ms", "must be positive".into());
        }
        self.limits.validate()?;
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

/// `tcp_cc` in TOML: a controller's name or `"system"` ([`gearbox_cc::TcpCcSetting`]).
mod tcp_cc_setting {
    use gearbox_cc::{TcpCc, TcpCcSetting};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(cc: &Option<TcpCc>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&TcpCcSetting(*cc))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<TcpCc>, D::Error> {
        let name = String::deserialize(d)?;
        name.parse::<TcpCcSetting>()
            .map(|s| s.0)
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_cc_defaults_to_cubic_and_system_keeps_the_hosts() {
        let at = Path::new("edge.toml");
        assert_eq!(EdgeConfig::from_toml("", at).unwrap().tcp_cc, Some(TcpCc::Cubic));
        assert_eq!(EdgeConfig::from_toml("tcp_cc = \"system\"\n", at).unwrap().tcp_cc, None);
        assert_eq!(
            EdgeConfig::from_toml("tcp_cc = \"bbr\"\n", at).unwrap().tcp_cc,
            Some(TcpCc::Bbr)
        );
        let err = EdgeConfig::from_toml("\ntcp_cc = \"vegas\"\n", at)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("edge.toml:2:") && err.contains("vegas") && err.contains("system"),
            "{err}"
        );
        let round = toml::to_string(&EdgeConfig {
            tcp_cc: None,
            ..EdgeConfig::default()
        })
        .unwrap();
        assert!(round.contains("tcp_cc = \"system\""), "{round}");
    }

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
    fn limits_table_sets_fields_and_rejects_unknown_ones() {
        let cfg = EdgeConfig::from_toml(
            "[limits]\nmax_headers = 7\nbody_read_timeout_ms = 500\n",
            Path::new("e.toml"),
        )
        .unwrap();
        assert_eq!(cfg.limits.max_headers, 7);
        assert_eq!(cfg.limits.body_read_timeout_ms, 500);
        assert_eq!(
            cfg.limits.max_connections,
            crate::limits::Limits::default().max_connections
        );
        let err = EdgeConfig::from_toml("[limits]\nmax_header = 7\n", Path::new("e.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("e.toml:2:") && err.contains("max_header"), "{err}");
    }

    #[test]
    fn zero_or_inconsistent_limits_are_rejected_by_field_name() {
        let mut cfg = EdgeConfig::default();
        cfg.limits.max_connections = 0;
        assert_eq!(
            cfg.validate().unwrap_err().to_string(),
            "invalid value for `limits.max_connections`: must be positive"
        );
        let mut cfg = EdgeConfig::default();
        cfg.limits.max_buffered_body_bytes = cfg.limits.body_memory_bytes + 1;
        assert!(cfg
            .validate()
            .unwrap_err()
            .to_string()
            .contains("`limits.max_buffered_body_bytes`"));
    }

    /// Not a fuzzer (issue 18 asks for cargo-fuzz targets, still to come), but the same
    /// promise on a fixed budget: 20,000 mutations of a full config (bytes flipped,
    /// dropped, duplicated, replaced by TOML's punctuation) never panic the parser or
    /// the validation; each is either a config or an error.
    #[test]
    fn mutated_config_files_are_errors_or_configs_never_panics() {
        let seed_text = toml::to_string(&EdgeConfig {
            static_dir: Some(PathBuf::from("/nonexistent")),
            upstream: Some("http://127.0.0.1:1".into()),
            initial_window: Some(10),
            ..EdgeConfig::default()
        })
        .unwrap();
        let seed = seed_text.as_bytes();
        let punct = b"[]=\"'.{},#\n0123456789-+e_";
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let (mut parsed, mut refused) = (0, 0);
        for _ in 0..20_000 {
            let mut t = seed.to_vec();
            for _ in 0..(1 + next() % 4) {
                let at = (next() % t.len() as u64) as usize;
                match next() % 4 {
                    0 => t[at] = punct[(next() % punct.len() as u64) as usize],
                    1 => {
                        t.remove(at);
                    }
                    2 => t.insert(at, t[at]),
                    _ => t[at] ^= 1 << (next() % 7),
                }
            }
            let text = String::from_utf8_lossy(&t);
            match EdgeConfig::from_toml(&text, Path::new("m.toml")) {
                Ok(c) => {
                    let _ = c.validate();
                    parsed += 1;
                }
                Err(e) => {
                    assert!(e.to_string().starts_with("m.toml"), "{e}");
                    refused += 1;
                }
            }
        }
        assert!(parsed > 0 && refused > 0, "{parsed} parsed, {refused} refused");
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
