//! Workload files: the TOML schema, the built-in workloads and the errors a bad file gives.
//!
//! A workload file names the workload and has exactly one pattern section:
//! `[clicks]` (bursts of requests separated by think time: `feed`, `app`, `search`),
//! `[bulk]` (one long transfer) or `[page]` (web pages as dependency graphs), plus an
//! optional `[clients]` section for workloads that come from many client addresses.
//! The schema is documented field by field on the structs below and in `docs/workloads.md`.
//!
//! Validation happens while the file is read, so that a mistake is reported with the
//! file, line, column and field it is in: CDF tables check themselves during
//! deserialisation (toml then attaches the span), and the cross-field checks done after
//! parsing look the offending key up in the text.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cdf::Cdf;
use crate::page::PageSpec;

/// The workloads shipped with gearbox, by name, as the text of their TOML files.
const BUILTINS: [(&str, &str); 5] = [
    ("feed", include_str!("../../../workloads/feed.toml")),
    ("app", include_str!("../../../workloads/app.toml")),
    ("search", include_str!("../../../workloads/search.toml")),
    ("bulk", include_str!("../../../workloads/bulk.toml")),
    ("page", include_str!("../../../workloads/page.toml")),
];

/// Maximum segment size assumed when a file gives response sizes in segments without
/// saying how large a segment is: TCP WISE §V-B2, Fig. 10 ("generally it is 1440B").
pub const DEFAULT_MSS_BYTES: u64 = 1440;

/// Everything that can go wrong when a workload is looked up, read or checked.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// The name is neither a built-in workload nor a file that exists.
    #[error("unknown workload `{name}`: built-in workloads are {valid} (or give the path of a .toml workload file)")]
    UnknownWorkload {
        /// The name that was asked for.
        name: String,
        /// The built-in names, comma separated.
        valid: String,
    },
    /// The workload file could not be read.
    #[error("cannot read workload file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The file is not valid TOML, or a field is missing, unknown, of the wrong type or out
    /// of range.
    #[error("{source_name}{}, field `{field}`: {message}", at_line(*.line, *.column))]
    Invalid {
        /// The file (or built-in name) the text came from.
        source_name: String,
        /// 1-based line of the problem; 0 for a spec built in code.
        line: usize,
        /// 1-based column of the problem; 0 for a spec built in code.
        column: usize,
        /// Dotted path of the field, e.g. `clicks.gap_ms`.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A page was asked of a workload that has no `[page]` section.
    #[error("workload `{name}` is not a page workload (it has no [page] section)")]
    NotAPage {
        /// The workload's name.
        name: String,
    },
}

fn at_line(line: usize, column: usize) -> String {
    if line == 0 {
        String::new()
    } else {
        format!(", line {line}, column {column}")
    }
}

/// When the client opens a new connection instead of reusing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnectionReuse {
    /// One connection for the whole run (Floo §4.2: the app's connections are persistent
    /// and last 206 s on average).
    #[default]
    Persistent,
    /// A new connection at the first request of every click (page load).
    PerClick,
    /// A new connection for every request (TCP WISE §V-B2: one search response per flow).
    PerRequest,
}

/// A workload, as read from a TOML file.
///
/// Exactly one of `clicks`, `bulk` and `page` is present in a valid spec
/// ([`WorkloadSpec::validate`]); the constructors check this.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// Short name, e.g. `app`.
    pub name: String,
    /// One line saying what the workload models and where it comes from.
    #[serde(default)]
    pub description: String,
    /// When a new connection is opened.
    #[serde(default)]
    pub connection: ConnectionReuse,
    /// Requests in clicks separated by think time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clicks: Option<ClickSpec>,
    /// One long transfer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bulk: Option<BulkSpec>,
    /// Web pages as dependency graphs of objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<PageSpec>,
    /// Many client addresses; without it every request has client index 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients: Option<ClientSpec>,
}

/// Requests sent in clicks: a click is a burst of requests whose send times are separated
/// by short gaps, and clicks are separated by the user's think time (Floo §4.2 calls two
/// requests more than 1 s apart two clicks).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClickSpec {
    /// Milliseconds from the last request of a click to the first request of the next.
    pub think_time_ms: Cdf,
    /// Requests per click; each draw is rounded to the nearest integer and at least 1.
    pub requests_per_click: Cdf,
    /// Milliseconds between consecutive sends inside a click; 0 means concurrent.
    /// Defaults to all-concurrent.
    #[serde(default = "all_concurrent")]
    pub gap_ms: Cdf,
    /// Request (upload) size in bytes.
    pub request_bytes: Cdf,
    /// Response size in bytes. Exactly one of `response_bytes` and `response_mss`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_bytes: Option<Cdf>,
    /// Response size in maximum-size segments (TCP WISE Fig. 10 plots sizes this way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_mss: Option<Cdf>,
    /// Bytes per segment for `response_mss`; defaults to [`DEFAULT_MSS_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mss_bytes: Option<u64>,
}

fn all_concurrent() -> Cdf {
    Cdf::zero()
}

/// One long transfer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BulkSpec {
    /// Bytes in the response.
    pub size_bytes: u64,
    /// Bytes in the request.
    #[serde(default = "default_bulk_request_bytes")]
    pub request_bytes: u64,
}

fn default_bulk_request_bytes() -> u64 {
    100
}

/// Many emulated client addresses, grouped in /24 prefixes (TCP WISE §IV-C1 clusters
/// clients by /24 prefix). A request's `client_index` is `prefix << 8 | host`, so
/// `client_index >> 8` is the prefix and the index maps onto an IPv4 address block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientSpec {
    /// Index of the /24 prefix a click comes from (floored to an integer); the table sets
    /// how requests are spread over prefixes. Values must lie in `[0, 2^24)`.
    pub prefix_index: Cdf,
    /// Hosts used in each prefix, 1 to 256; the host is drawn uniformly.
    pub hosts_per_prefix: u32,
}

/// Which pattern a spec follows, borrowed from it.
#[derive(Debug, Clone, Copy)]
pub enum Pattern<'a> {
    /// `[clicks]`.
    Clicks(&'a ClickSpec),
    /// `[bulk]`.
    Bulk(&'a BulkSpec),
    /// `[page]`.
    Page(&'a PageSpec),
}

/// A problem found after parsing: which key, in which table, and what is wrong.
pub(crate) struct FieldProblem {
    pub(crate) table: &'static str,
    pub(crate) key: &'static str,
    pub(crate) message: String,
}

impl FieldProblem {
    pub(crate) fn new(table: &'static str, key: &'static str, message: impl Into<String>) -> Self {
        Self {
            table,
            key,
            message: message.into(),
        }
    }
}

impl WorkloadSpec {
    /// The names of the built-in workloads.
    pub fn builtin_names() -> Vec<&'static str> {
        BUILTINS.iter().map(|(name, _)| *name).collect()
    }

    /// The TOML text of a built-in workload, to show or to copy as a starting point.
    pub fn builtin_text(name: &str) -> Option<&'static str> {
        BUILTINS
            .iter()
            .find(|(builtin, _)| *builtin == name)
            .map(|(_, text)| *text)
    }

    /// A built-in workload by name (`feed`, `app`, `search`, `bulk`, `page`).
    pub fn builtin(name: &str) -> Result<Self, WorkloadError> {
        match Self::builtin_text(name) {
            Some(text) => Self::from_toml_str(text, &format!("built-in workload `{name}`")),
            None => Err(WorkloadError::UnknownWorkload {
                name: name.to_string(),
                valid: Self::builtin_names().join(", "),
            }),
        }
    }

    /// Reads a workload file.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Self, WorkloadError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| WorkloadError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_toml_str(&text, &path.display().to_string())
    }

    /// A built-in name, else the path of a workload file; an unknown name that is not a
    /// file lists the built-in names.
    pub fn load(name_or_path: &str) -> Result<Self, WorkloadError> {
        if Self::builtin_text(name_or_path).is_some() {
            return Self::builtin(name_or_path);
        }
        let path = Path::new(name_or_path);
        if path.exists() || name_or_path.ends_with(".toml") {
            return Self::from_path(path);
        }
        Self::builtin(name_or_path)
    }

    /// Parses and validates workload text; `source_name` (a file name) is used in errors.
    pub fn from_toml_str(text: &str, source_name: &str) -> Result<Self, WorkloadError> {
        let spec: Self = toml::from_str(text).map_err(|error| toml_error(text, source_name, &error))?;
        spec.check().map_err(|problem| located(text, source_name, problem))?;
        Ok(spec)
    }

    /// The bulk workload with another transfer size.
    pub fn bulk(size_bytes: u64) -> Self {
        Self {
            name: "bulk".to_string(),
            description: format!("one transfer of {size_bytes} bytes"),
            connection: ConnectionReuse::PerRequest,
            clicks: None,
            bulk: Some(BulkSpec {
                size_bytes,
                request_bytes: default_bulk_request_bytes(),
            }),
            page: None,
            clients: None,
        }
    }

    /// Checks the cross-field rules (exactly one pattern section, ranges, ...).
    pub fn validate(&self) -> Result<(), WorkloadError> {
        self.check().map_err(|problem| WorkloadError::Invalid {
            source_name: format!("workload `{}`", self.name),
            line: 0,
            column: 0,
            field: dotted(problem.table, problem.key),
            message: problem.message,
        })
    }

    /// The pattern section of the spec (the first present of clicks, bulk and page).
    pub fn pattern(&self) -> Option<Pattern<'_>> {
        if let Some(clicks) = &self.clicks {
            Some(Pattern::Clicks(clicks))
        } else if let Some(bulk) = &self.bulk {
            Some(Pattern::Bulk(bulk))
        } else {
            self.page.as_ref().map(Pattern::Page)
        }
    }

    fn check(&self) -> Result<(), FieldProblem> {
        let sections = [self.clicks.is_some(), self.bulk.is_some(), self.page.is_some()];
        match sections.iter().filter(|present| **present).count() {
            1 => {}
            0 => {
                return Err(FieldProblem::new(
                    "",
                    "name",
                    "a workload needs one of the sections [clicks], [bulk], [page]",
                ))
            }
            _ => {
                let second = if self.clicks.is_some() && self.bulk.is_some() {
                    "bulk"
                } else {
                    "page"
                };
                return Err(FieldProblem::new(
                    second,
                    "",
                    "a workload has exactly one of the sections [clicks], [bulk], [page]",
                ));
            }
        }
        if let Some(clicks) = &self.clicks {
            clicks.check()?;
        }
        if let Some(bulk) = &self.bulk {
            if bulk.size_bytes == 0 {
                return Err(FieldProblem::new("bulk", "size_bytes", "must be at least 1 byte"));
            }
        }
        if let Some(page) = &self.page {
            page.check()?;
        }
        if let Some(clients) = &self.clients {
            if !(1..=256).contains(&clients.hosts_per_prefix) {
                return Err(FieldProblem::new(
                    "clients",
                    "hosts_per_prefix",
                    "must be between 1 and 256",
                ));
            }
            if clients.prefix_index.min() < 0.0 || clients.prefix_index.max() >= f64::from(1u32 << 24) {
                return Err(FieldProblem::new(
                    "clients",
                    "prefix_index",
                    "prefix indices must lie in [0, 2^24)",
                ));
            }
        }
        Ok(())
    }
}

impl ClickSpec {
    fn check(&self) -> Result<(), FieldProblem> {
        non_negative(&self.think_time_ms, "clicks", "think_time_ms")?;
        non_negative(&self.gap_ms, "clicks", "gap_ms")?;
        non_negative(&self.request_bytes, "clicks", "request_bytes")?;
        if self.requests_per_click.max() < 0.5 {
            return Err(FieldProblem::new(
                "clicks",
                "requests_per_click",
                "a click has at least one request",
            ));
        }
        if self.requests_per_click.min() < 0.0 {
            return Err(FieldProblem::new(
                "clicks",
                "requests_per_click",
                "counts cannot be negative",
            ));
        }
        match (&self.response_bytes, &self.response_mss) {
            (Some(bytes), None) => non_negative(bytes, "clicks", "response_bytes")?,
            (None, Some(segments)) => non_negative(segments, "clicks", "response_mss")?,
            (Some(_), Some(_)) => {
                return Err(FieldProblem::new(
                    "clicks",
                    "response_mss",
                    "give response sizes once: either response_bytes or response_mss",
                ))
            }
            (None, None) => {
                return Err(FieldProblem::new(
                    "clicks",
                    "",
                    "missing response sizes: add response_bytes or response_mss",
                ))
            }
        }
        if self.mss_bytes == Some(0) {
            return Err(FieldProblem::new(
                "clicks",
                "mss_bytes",
                "a segment has at least 1 byte",
            ));
        }
        if self.mss_bytes.is_some() && self.response_mss.is_none() {
            return Err(FieldProblem::new(
                "clicks",
                "mss_bytes",
                "mss_bytes only applies to response_mss",
            ));
        }
        Ok(())
    }

    /// Bytes per segment used for `response_mss`.
    pub fn segment_bytes(&self) -> u64 {
        self.mss_bytes.unwrap_or(DEFAULT_MSS_BYTES)
    }
}

pub(crate) fn non_negative(cdf: &Cdf, table: &'static str, key: &'static str) -> Result<(), FieldProblem> {
    if cdf.min() < 0.0 {
        Err(FieldProblem::new(
            table,
            key,
            format!("values cannot be negative (smallest is {})", cdf.min()),
        ))
    } else {
        Ok(())
    }
}

fn dotted(table: &str, key: &str) -> String {
    match (table.is_empty(), key.is_empty()) {
        (true, _) => key.to_string(),
        (false, true) => table.to_string(),
        (false, false) => format!("{table}.{key}"),
    }
}

/// Turns a toml error into one naming the file, line, column and field.
fn toml_error(text: &str, source_name: &str, error: &toml::de::Error) -> WorkloadError {
    let offset = error.span().map(|span| span.start).unwrap_or(0).min(text.len());
    let (line, column) = line_column(text, offset);
    let message = error.message().trim().to_string();
    let table = table_at(text, offset);
    let named = ["unknown field `", "missing field `"]
        .iter()
        .find_map(|prefix| message.split(prefix).nth(1).and_then(|rest| rest.split('`').next()));
    let key = match named {
        Some(name) => name.to_string(),
        None => key_at(text, offset).unwrap_or_default(),
    };
    WorkloadError::Invalid {
        source_name: source_name.to_string(),
        line,
        column,
        field: dotted(&table, &key),
        message,
    }
}

/// Locates a post-parse problem in the text by its table and key.
fn located(text: &str, source_name: &str, problem: FieldProblem) -> WorkloadError {
    let (line, column) = find_key(text, problem.table, problem.key).unwrap_or((1, 1));
    WorkloadError::Invalid {
        source_name: source_name.to_string(),
        line,
        column,
        field: dotted(problem.table, problem.key),
        message: problem.message,
    }
}

fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..floor_char_boundary(text, offset)];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map(|tail| tail.chars().count()).unwrap_or(0) + 1;
    (line, column)
}

fn floor_char_boundary(text: &str, mut offset: usize) -> usize {
    while offset > 0 && !text.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

/// The table header (`[a.b]` → `a.b`) in force at a byte offset; `""` for the top level.
fn table_at(text: &str, offset: usize) -> String {
    let mut table = String::new();
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        if start > offset {
            break;
        }
        if let Some(header) = header_of(line) {
            table = header;
        }
        start += line.len();
    }
    table
}

/// The table name if the line is a table header (`[a.b]`, `[[a]]`, or a broken `[a`); rows
/// of multi-line arrays such as `[100, 0.5],` are not headers.
fn header_of(line: &str) -> Option<String> {
    let trimmed = line.trim();
    let inner = trimmed.strip_prefix('[')?.trim_start_matches('[');
    let name = inner.split(']').next().unwrap_or(inner).trim();
    let starts_like_a_key = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '"' || c == '_');
    let is_header = starts_like_a_key && !name.contains(',') && !name.contains('=');
    is_header.then(|| name.to_string())
}

/// The key whose value contains the byte offset: the nearest `key =` at or above it,
/// looking no further up than the table header.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let mut key = None;
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        if start > offset {
            break;
        }
        if header_of(line).is_some() {
            key = None;
        } else if let Some(name) = key_of(line) {
            key = Some(name);
        }
        start += line.len();
    }
    key
}

fn key_of(line: &str) -> Option<String> {
    let trimmed = line.trim_start();
    if trimmed.starts_with('#') {
        return None;
    }
    let (name, _) = trimmed.split_once('=')?;
    let name = name.trim();
    let simple = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || "_-.\"".contains(c));
    simple.then(|| name.trim_matches('"').to_string())
}

/// 1-based line and column of `key` inside `[table]` (or of the header when `key` is empty).
fn find_key(text: &str, table: &str, key: &str) -> Option<(usize, usize)> {
    let mut current = String::new();
    for (index, line) in text.lines().enumerate() {
        if let Some(header) = header_of(line) {
            current = header;
            if key.is_empty() && current == table {
                return Some((index + 1, 1));
            }
            continue;
        }
        if current == table && !key.is_empty() && key_of(line).as_deref() == Some(key) {
            let column = line.len() - line.trim_start().len() + 1;
            return Some((index + 1, column));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_workload_parses_and_validates() {
        for name in WorkloadSpec::builtin_names() {
            let spec = WorkloadSpec::builtin(name).unwrap_or_else(|error| panic!("{error}"));
            assert_eq!(spec.name, name);
            spec.validate().unwrap();
        }
    }

    #[test]
    fn a_key_is_found_under_its_table() {
        let text = "name = \"x\"\n[clicks]\n  gap_ms = [[0, 1]]\n";
        assert_eq!(find_key(text, "clicks", "gap_ms"), Some((3, 3)));
        assert_eq!(find_key(text, "clicks", ""), Some((2, 1)));
        assert_eq!(table_at(text, text.len() - 2), "clicks");
        assert_eq!(key_at(text, text.len() - 2).as_deref(), Some("gap_ms"));
    }
}
