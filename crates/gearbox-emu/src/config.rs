//! `EMU.toml`: the topology and its links (schema in `docs/emu.md`).
//!
//! Every link table is a [`gearbox_link::LinkConfig`] verbatim, so traces, loss,
//! queues, policers and schedules mean here exactly what they mean in the
//! simulator. The file is read with spans so that an error names the file, the
//! line and the field (docs/architecture.md principle 6); a value the link model refuses
//! (a zero rate, a negative delay) is reported with the field path the link
//! model gives, prefixed by where the table sits (`path[1].uplink.rate_bps`).
//!
//! Population overrides are *shallow* merges of TOML tables: a key given in
//! `[population.prefix.uplink]` replaces that key of `[population.uplink]`
//! whole. A deep merge was rejected because the tagged tables (`loss`,
//! `policer`) would mix fields of two models into one invalid table.

use std::fmt;
use std::path::{Path, PathBuf};

use gearbox_link::LinkConfig;
use serde::Deserialize;
use toml::Spanned;

use crate::addr::{MAX_HOSTS, MAX_PREFIXES};

/// Most paths a `multipath` topology may have (one /24 each, `100.64.p.1`).
pub const MAX_PATHS: usize = 256;

/// Most client addresses of a population (each is one `ip addr add`; 4096
/// take about a second to set up here, and the kernel's per-device address
/// list is linear to search).
pub const MAX_CLIENT_ADDRS: u64 = 65_536;

/// A config problem: where it is and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (or the name given to a string config).
    pub origin: String,
    /// 1-based line of the offending table or value, when known.
    pub line: Option<usize>,
    /// Field path, e.g. `path[0].uplink.rate_bps` (empty when the file is not TOML).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.origin)?;
        if let Some(line) = self.line {
            write!(f, ": line {line}")?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

/// How clients reach the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Topology {
    /// One path, one client address.
    Single,
    /// Several paths, one client address each (`100.64.p.1` for path `p`).
    Multipath,
    /// Many client /24s, each with its own pair of links, optionally behind a
    /// shared access path.
    Population,
}

fn default_timer_slack_ns() -> u64 {
    50_000
}

/// Knobs of the relay itself.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayConfig {
    /// `prctl(PR_SET_TIMERSLACK)` of the relay thread, ns (1 ..= 10^9): how
    /// late the kernel may fire the relay's timer to batch wake-ups. The
    /// default is the kernel's own default, 50 µs.
    /// Ignored while `realtime` is on: the kernel gives real-time threads no slack.
    #[serde(default = "default_timer_slack_ns")]
    pub timer_slack_ns: u64,
    /// Run the relay thread under SCHED_FIFO (priority [`REALTIME_PRIORITY`]) so
    /// that busy neighbours (compilers, the commands under test) delay its
    /// wake-ups by microseconds, not milliseconds. It sleeps whenever it has
    /// nothing due and the kernel's real-time throttling (95% by default)
    /// bounds what it can take. Falls back to normal scheduling, with a
    /// warning, where the kernel refuses. Default on.
    #[serde(default = "default_realtime")]
    pub realtime: bool,
    /// Take the relay's own hops off every packet's delay: enter each packet
    /// into its link at the kernel's time of its transmission into the TUN
    /// device (`crate::arrival`), and write packets early by the measured lower
    /// bound of the write, the receiver's wake-up and the sender's own path
    /// (`crate::calibrate`). Without it every round trip is 0.3-0.9 ms longer
    /// than configured on a 2-core VM (docs/emu.md "Delay bias"). Default on;
    /// `false` still measures and reports the figures.
    #[serde(default = "default_compensate_hops")]
    pub compensate_hops: bool,
}

fn default_realtime() -> bool {
    true
}

fn default_compensate_hops() -> bool {
    true
}

/// SCHED_FIFO priority of the relay with `realtime = true` (1 = lowest, 99 = highest;
/// kept low so kernel threads and anything deliberately urgent still come first).
pub const REALTIME_PRIORITY: i32 = 10;

/// SCHED_FIFO priority of the server and client commands with
/// [`crate::RunOptions::realtime_endpoints`]: below the relay's, the probe's and the
/// calibrator's, so the path's own timing still comes first.
pub const ENDPOINT_PRIORITY: i32 = 2;

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            timer_slack_ns: default_timer_slack_ns(),
            realtime: default_realtime(),
            compensate_hops: default_compensate_hops(),
        }
    }
}

/// One path: a pair of links.
#[derive(Debug, Clone, PartialEq)]
pub struct PathConfig {
    /// Label in the event log and the summary.
    pub name: String,
    /// Client → server.
    pub uplink: LinkConfig,
    /// Server → client.
    pub downlink: LinkConfig,
}

/// The clients of a `population` topology.
#[derive(Debug, Clone, PartialEq)]
pub struct PopulationConfig {
    /// Number of client /24s (1 ..= 16384).
    pub prefixes: u32,
    /// Client addresses in each /24 (1 ..= 254).
    pub hosts_per_prefix: u32,
    /// The link pair of each prefix, index = prefix (defaults with overrides applied).
    pub prefix_links: Vec<(LinkConfig, LinkConfig)>,
}

/// A whole emulator configuration, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct EmuConfig {
    /// The topology.
    pub topology: Topology,
    /// Relay knobs.
    pub relay: RelayConfig,
    /// The paths (`single`: one; `multipath`: one per client address;
    /// `population`: none, or one shared access path).
    pub paths: Vec<PathConfig>,
    /// The clients of a `population` topology.
    pub population: Option<PopulationConfig>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    topology: Spanned<Topology>,
    #[serde(default)]
    relay: Option<Spanned<RelayConfig>>,
    #[serde(default)]
    path: Vec<Spanned<RawPath>>,
    #[serde(default)]
    population: Option<Spanned<RawPopulation>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPath {
    #[serde(default)]
    name: Option<Spanned<String>>,
    uplink: Spanned<LinkConfig>,
    downlink: Spanned<LinkConfig>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPopulation {
    prefixes: Spanned<u32>,
    hosts_per_prefix: Spanned<u32>,
    uplink: Spanned<toml::Table>,
    downlink: Spanned<toml::Table>,
    #[serde(default)]
    prefix: Vec<Spanned<RawPrefix>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrefix {
    index: Spanned<u32>,
    #[serde(default)]
    uplink: Option<Spanned<toml::Table>>,
    #[serde(default)]
    downlink: Option<Spanned<toml::Table>>,
}

/// Turns byte offsets into lines and builds errors.
struct Locator<'a> {
    origin: &'a str,
    text: &'a str,
}

impl Locator<'_> {
    fn line_of(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.text.as_bytes()[..end].iter().filter(|&&b| b == b'\n').count() + 1
    }

    fn error(&self, offset: Option<usize>, field: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            origin: self.origin.to_string(),
            line: offset.map(|o| self.line_of(o)),
            field: field.into(),
            message: message.into(),
        }
    }

    /// Validates one link table; errors get `prefix.` before the link model's field path.
    fn link(&self, cfg: &LinkConfig, prefix: &str, offset: usize) -> Result<(), ConfigError> {
        cfg.validate()
            .map_err(|e| self.error(Some(offset), format!("{prefix}.{}", e.field), e.message))?;
        for (field, path) in trace_files(cfg) {
            if !path.is_file() {
                return Err(self.error(
                    Some(offset),
                    format!("{prefix}.{field}"),
                    format!("no such trace file: {}", path.display()),
                ));
            }
        }
        Ok(())
    }
}

/// The trace files a link config names, with their field paths.
fn trace_files(cfg: &LinkConfig) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    if let Some(p) = &cfg.trace_file {
        out.push(("trace_file".to_string(), p.clone()));
    }
    for (i, c) in cfg.schedule.iter().enumerate() {
        if let Some(p) = &c.trace_file {
            out.push((format!("schedule[{i}].trace_file"), p.clone()));
        }
    }
    out
}

/// Makes relative trace paths relative to the config file's folder.
fn resolve_traces(cfg: &mut LinkConfig, base: Option<&Path>) {
    let Some(base) = base else { return };
    let fix = |p: &mut Option<PathBuf>| {
        if let Some(path) = p.as_mut() {
            if path.is_relative() {
                *path = base.join(&*path);
            }
        }
    };
    fix(&mut cfg.trace_file);
    for c in &mut cfg.schedule {
        fix(&mut c.trace_file);
    }
}

/// The TOML parser's message without its multi-line source excerpt (we give the line ourselves).
fn toml_message(e: &toml::de::Error) -> String {
    e.message().trim().to_string()
}

impl EmuConfig {
    /// Reads and validates a config file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            origin: origin.clone(),
            line: None,
            field: String::new(),
            message: format!("cannot read: {e}"),
        })?;
        let base = path
            .parent()
            .map(|p| if p.as_os_str().is_empty() { Path::new(".") } else { p });
        Self::from_toml_str(&text, &origin, base)
    }

    /// Parses and validates config text. `origin` names it in errors; relative
    /// trace paths are resolved against `base_dir` (left as they are if `None`).
    pub fn from_toml_str(text: &str, origin: &str, base_dir: Option<&Path>) -> Result<Self, ConfigError> {
        let loc = Locator { origin, text };
        let raw: RawConfig =
            toml::from_str(text).map_err(|e| loc.error(e.span().map(|s| s.start), "", toml_message(&e)))?;
        let topology = *raw.topology.get_ref();
        let topo_at = raw.topology.span().start;
        let relay = match raw.relay {
            Some(r) => {
                let at = r.span().start;
                let r = r.into_inner();
                if !(1..=1_000_000_000).contains(&r.timer_slack_ns) {
                    return Err(loc.error(Some(at), "relay.timer_slack_ns", "must be in 1 ..= 1000000000 ns"));
                }
                r
            }
            None => RelayConfig::default(),
        };

        let mut paths = Vec::with_capacity(raw.path.len());
        for (i, p) in raw.path.into_iter().enumerate() {
            let p = p.into_inner();
            let name = match p.name {
                Some(n) => {
                    let at = n.span().start;
                    let n = n.into_inner();
                    if n.is_empty() || n.len() > 64 {
                        return Err(loc.error(Some(at), format!("path[{i}].name"), "must be 1 to 64 characters"));
                    }
                    if paths.iter().any(|q: &PathConfig| q.name == n) || n.starts_with("prefix") {
                        return Err(loc.error(
                            Some(at),
                            format!("path[{i}].name"),
                            format!("{n:?} is taken (names must be unique and not start with \"prefix\")"),
                        ));
                    }
                    n
                }
                None => format!("path{i}"),
            };
            let mut links = [p.uplink, p.downlink].map(|l| {
                let at = l.span().start;
                (at, l.into_inner())
            });
            for ((at, cfg), dir) in links.iter_mut().zip(["uplink", "downlink"]) {
                resolve_traces(cfg, base_dir);
                loc.link(cfg, &format!("path[{i}].{dir}"), *at)?;
            }
            let [(_, uplink), (_, downlink)] = links;
            paths.push(PathConfig { name, uplink, downlink });
        }

        let population = match raw.population {
            Some(pop) => {
                if topology != Topology::Population {
                    return Err(loc.error(
                        Some(pop.span().start),
                        "population",
                        "only allowed with topology = \"population\"",
                    ));
                }
                Some(Self::population(&loc, pop.into_inner(), base_dir)?)
            }
            None => None,
        };

        let n = paths.len();
        match topology {
            Topology::Single if n != 1 => {
                return Err(loc.error(
                    Some(topo_at),
                    "path",
                    format!("topology \"single\" needs exactly one [[path]], found {n}"),
                ))
            }
            Topology::Multipath if !(1..=MAX_PATHS).contains(&n) => {
                return Err(loc.error(
                    Some(topo_at),
                    "path",
                    format!("topology \"multipath\" needs 1 to {MAX_PATHS} [[path]] entries, found {n}"),
                ))
            }
            Topology::Population if population.is_none() => {
                return Err(loc.error(
                    Some(topo_at),
                    "population",
                    "topology \"population\" needs a [population] table",
                ))
            }
            Topology::Population if n > 1 => {
                return Err(loc.error(
                    Some(topo_at),
                    "path",
                    format!("topology \"population\" takes at most one [[path]] (the shared access path), found {n}"),
                ))
            }
            _ => {}
        }
        Ok(EmuConfig {
            topology,
            relay,
            paths,
            population,
        })
    }

    fn population(loc: &Locator<'_>, pop: RawPopulation, base: Option<&Path>) -> Result<PopulationConfig, ConfigError> {
        let prefixes = *pop.prefixes.get_ref();
        if !(1..=MAX_PREFIXES).contains(&prefixes) {
            return Err(loc.error(
                Some(pop.prefixes.span().start),
                "population.prefixes",
                format!("must be in 1 ..= {MAX_PREFIXES}, got {prefixes}"),
            ));
        }
        let hosts = *pop.hosts_per_prefix.get_ref();
        if !(1..=MAX_HOSTS).contains(&hosts) {
            return Err(loc.error(
                Some(pop.hosts_per_prefix.span().start),
                "population.hosts_per_prefix",
                format!("must be in 1 ..= {MAX_HOSTS}, got {hosts}"),
            ));
        }
        if u64::from(prefixes) * u64::from(hosts) > MAX_CLIENT_ADDRS {
            return Err(loc.error(
                Some(pop.hosts_per_prefix.span().start),
                "population.hosts_per_prefix",
                format!(
                    "{prefixes} prefixes x {hosts} hosts is {} client addresses; at most {MAX_CLIENT_ADDRS} fit one run",
                    u64::from(prefixes) * u64::from(hosts)
                ),
            ));
        }
        let build = |table: toml::Table, field: &str, at: usize| -> Result<LinkConfig, ConfigError> {
            let mut cfg: LinkConfig = toml::Value::Table(table)
                .try_into()
                .map_err(|e: toml::de::Error| loc.error(Some(at), field, toml_message(&e)))?;
            resolve_traces(&mut cfg, base);
            loc.link(&cfg, field, at)?;
            Ok(cfg)
        };
        let (up_at, down_at) = (pop.uplink.span().start, pop.downlink.span().start);
        let (up_table, down_table) = (pop.uplink.into_inner(), pop.downlink.into_inner());
        let up = build(up_table.clone(), "population.uplink", up_at)?;
        let down = build(down_table.clone(), "population.downlink", down_at)?;
        let mut links = vec![(up, down); prefixes as usize];
        let mut seen = vec![false; prefixes as usize];
        for (j, o) in pop.prefix.into_iter().enumerate() {
            let o_at = o.span().start;
            let o = o.into_inner();
            let index = *o.index.get_ref();
            let field = format!("population.prefix[{j}]");
            let Some(slot) = seen.get_mut(index as usize) else {
                return Err(loc.error(
                    Some(o.index.span().start),
                    format!("{field}.index"),
                    format!("prefix {index} does not exist (prefixes = {prefixes}, indices start at 0)"),
                ));
            };
            if std::mem::replace(slot, true) {
                return Err(loc.error(
                    Some(o.index.span().start),
                    format!("{field}.index"),
                    format!("prefix {index} is overridden twice"),
                ));
            }
            let merged = |default: &toml::Table, over: Option<Spanned<toml::Table>>, dir: &str| {
                let (at, over) = match over {
                    Some(s) => (s.span().start, s.into_inner()),
                    None => (o_at, toml::Table::new()),
                };
                let mut t = default.clone();
                t.extend(over);
                build(t, &format!("{field}.{dir}"), at)
            };
            let up = merged(&up_table, o.uplink, "uplink")?;
            let down = merged(&down_table, o.downlink, "downlink")?;
            links[index as usize] = (up, down);
        }
        Ok(PopulationConfig {
            prefixes,
            hosts_per_prefix: hosts,
            prefix_links: links,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<EmuConfig, ConfigError> {
        EmuConfig::from_toml_str(text, "emu.toml", None)
    }

    const SINGLE: &str = r#"
topology = "single"
[[path]]
[path.uplink]
rate_bps = 10_000_000
delay_ms = 20.0
[path.downlink]
rate_bps = 50_000_000
delay_ms = 20.0
"#;

    #[test]
    fn a_single_path_config_parses() {
        let c = parse(SINGLE).unwrap();
        assert_eq!(c.topology, Topology::Single);
        assert_eq!(c.paths.len(), 1);
        assert_eq!(c.paths[0].name, "path0");
        assert_eq!(c.paths[0].uplink.rate_bps, Some(10_000_000));
        assert_eq!(c.paths[0].downlink.delay_ms, Some(20.0));
        assert_eq!(c.relay.timer_slack_ns, 50_000);
    }

    #[test]
    fn a_zero_rate_is_refused_naming_file_line_and_field() {
        let e = parse(&SINGLE.replace("rate_bps = 50_000_000", "rate_bps = 0")).unwrap_err();
        assert_eq!(e.field, "path[0].downlink.rate_bps");
        assert_eq!(e.line, Some(7), "{e}");
        assert!(
            e.to_string()
                .starts_with("emu.toml: line 7: path[0].downlink.rate_bps: "),
            "{e}"
        );
    }

    #[test]
    fn unknown_fields_are_refused_with_their_line() {
        let e = parse(&SINGLE.replace(
            "delay_ms = 20.0\n[path.downlink]",
            "delay_ms = 20.0\nrate_mbps = 3\n[path.downlink]",
        ))
        .unwrap_err();
        assert_eq!(e.line, Some(7), "{e}");
        assert!(e.message.contains("rate_mbps"), "{e}");
        let e = parse(&format!("{SINGLE}\nbogus = 1\n")).unwrap_err();
        assert!(e.message.contains("bogus"), "{e}");
    }

    #[test]
    fn a_negative_delay_names_its_field() {
        let e = parse(&SINGLE.replacen("delay_ms = 20.0", "delay_ms = -1.0", 1)).unwrap_err();
        assert_eq!(e.field, "path[0].uplink.delay_ms", "{e}");
    }

    #[test]
    fn topology_and_path_count_must_agree() {
        let two = format!("{SINGLE}{}", SINGLE.replace("topology = \"single\"", ""));
        let e = parse(&two).unwrap_err();
        assert_eq!(e.field, "path");
        assert_eq!(e.line, Some(2));
        let mp = parse(&two.replace("\"single\"", "\"multipath\"")).unwrap();
        assert_eq!(
            mp.paths.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
            ["path0", "path1"]
        );
        let e = parse("topology = \"multipath\"").unwrap_err();
        assert_eq!(e.field, "path");
        let e = parse("topology = \"mesh\"").unwrap_err();
        assert_eq!(e.line, Some(1));
    }

    #[test]
    fn missing_trace_files_are_named() {
        let e = parse(&SINGLE.replace("rate_bps = 10_000_000", "trace_file = \"nope.trace\"")).unwrap_err();
        assert_eq!(e.field, "path[0].uplink.trace_file");
        assert!(e.message.contains("nope.trace"), "{e}");
    }

    const POPULATION: &str = r#"
topology = "population"
[population]
prefixes = 4
hosts_per_prefix = 2
[population.uplink]
rate_bps = 20_000_000
delay_ms = 10.0
[population.downlink]
rate_bps = 20_000_000
delay_ms = 10.0
[[population.prefix]]
index = 3
[population.prefix.uplink]
delay_ms = 60.0
[population.prefix.downlink]
loss = { model = "bernoulli", loss_rate = 0.02 }
"#;

    #[test]
    fn population_overrides_change_only_their_prefix_and_keys() {
        let c = parse(POPULATION).unwrap();
        let p = c.population.unwrap();
        assert_eq!((p.prefixes, p.hosts_per_prefix), (4, 2));
        assert_eq!(p.prefix_links.len(), 4);
        assert_eq!(p.prefix_links[0].0.delay_ms, Some(10.0));
        assert_eq!(p.prefix_links[3].0.delay_ms, Some(60.0));
        assert_eq!(p.prefix_links[3].0.rate_bps, Some(20_000_000));
        assert_eq!(p.prefix_links[3].1.delay_ms, Some(10.0));
        assert_eq!(
            p.prefix_links[3].1.loss,
            gearbox_link::LossConfig::Bernoulli { loss_rate: 0.02 }
        );
        assert_eq!(p.prefix_links[2].1.loss, gearbox_link::LossConfig::None);
    }

    #[test]
    fn population_errors_name_the_override() {
        let e = parse(&POPULATION.replace("index = 3", "index = 4")).unwrap_err();
        assert_eq!(e.field, "population.prefix[0].index");
        assert_eq!(e.line, Some(13));
        let e = parse(&POPULATION.replace("delay_ms = 60.0", "delay_ms = 0.0")).unwrap_err();
        assert_eq!(e.field, "population.prefix[0].uplink.delay_ms");
        assert_eq!(e.line, Some(14));
        let e = parse(&POPULATION.replace("delay_ms = 60.0", "delay = 60.0")).unwrap_err();
        assert_eq!(e.field, "population.prefix[0].uplink");
        assert!(e.message.contains("delay"), "{e}");
        let e = parse(&POPULATION.replace("prefixes = 4", "prefixes = 0")).unwrap_err();
        assert_eq!(e.field, "population.prefixes");
        let e = parse(
            &POPULATION
                .replace("prefixes = 4", "prefixes = 1000")
                .replace("= 2\n", "= 200\n"),
        )
        .unwrap_err();
        assert_eq!(e.field, "population.hosts_per_prefix", "{e}");
        let e = parse(&POPULATION.replace("prefixes = 4", "prefixes = -4")).unwrap_err();
        assert_eq!(e.line, Some(4), "{e}");
        let e = parse(&POPULATION.replace("\"population\"", "\"single\"")).unwrap_err();
        assert_eq!(e.field, "population");
    }
}
