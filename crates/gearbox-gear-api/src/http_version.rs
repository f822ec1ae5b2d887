//! Client, per page load: which HTTP version fetches the page (FlexHTTP §3.4).
//!
//! FlexHTTP chooses HTTP/2 or HTTP/3 once per page load and judges the choice by how
//! long the whole page took, not by any one request (FlexHTTP §2.1 measures Speed
//! Index per page). Its HTTP Version Selector (§3.4) answers from a cache keyed by the
//! page URL, falling back to a classifier over network and page-structure features
//! (§3.5.1, Table 1), and its local trace pool (§3.5.2) grows by one entry per finished
//! page. So the gear is asked with the page's URL and told a [`PageRecord`]: the
//! version used, the page load time and every object's own record (sizes, types and
//! transport state are all there).
//!
//! This is a separate decision point from the transport gear's: a request-level
//! transport choice inside a page would split the page over two connections, which
//! is exactly what FlexHTTP's per-page unit avoids.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::decision::{Decision, DecisionId};
use crate::record::ClientRecord;
use crate::transport::Transport;

/// The HTTP versions a page can be loaded with (FlexHTTP chooses between the two).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HttpVersion {
    /// HTTP/2 over TLS over TCP.
    H2,
    /// HTTP/3 over QUIC.
    H3,
}

impl HttpVersion {
    /// `h2` or `h3`, as telemetry names protocols.
    pub fn name(self) -> &'static str {
        match self {
            HttpVersion::H2 => "h2",
            HttpVersion::H3 => "h3",
        }
    }

    /// The transport the version runs on.
    pub fn transport(self) -> Transport {
        match self {
            HttpVersion::H2 => Transport::Tcp,
            HttpVersion::H3 => Transport::Quic,
        }
    }
}

impl std::fmt::Display for HttpVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The outcome of one page load, as an HTTP-version gear is told it (one FlexHTTP trace
/// entry, §3.3.2, before its label).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PageRecord {
    /// URL of the page (its HTML), the key FlexHTTP's cache is looked up by.
    pub page_url: String,
    /// Wall-clock time the load started, milliseconds since the Unix epoch (FlexHTTP's
    /// cache keys on the moment in the week, §3.4).
    pub time_unix_ms: f64,
    /// The version the page was loaded with.
    pub http_version: HttpVersion,
    /// The reason of the decision that chose it.
    pub decision: Option<String>,
    /// The id of that decision, as the gear set it.
    pub decision_id: Option<DecisionId>,
    /// Milliseconds from the start to the last object's last byte (`None`: the load
    /// failed).
    pub page_load_ms: Option<f64>,
    /// Every object's request record, the HTML first.
    pub objects: Vec<ClientRecord>,
    /// Error kind of the first object that failed.
    pub error: Option<String>,
}

impl PageRecord {
    /// Response bytes of the whole page.
    pub fn bytes(&self) -> u64 {
        self.objects.iter().map(|r| r.bytes).sum()
    }
}

/// An HTTP-version gear: chooses HTTP/2 or HTTP/3 for each page load and learns from
/// whole pages (FlexHTTP §3.4, §3.5).
pub trait HttpVersionGear: Send {
    /// The version for loading the page at `page_url`.
    fn choose(&mut self, page_url: &str, now: Instant) -> Decision<HttpVersion>;

    /// A page load finished (or failed).
    fn observe(&mut self, page: &PageRecord, now: Instant);
}
