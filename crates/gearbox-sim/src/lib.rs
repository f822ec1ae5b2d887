//! # gearbox-sim — the lab's link model and real QUIC in virtual time
//!
//! The simulator runs quinn-proto's QUIC state machine (the same one the edge and the
//! client run through quinn), with the congestion-control suite's controllers, over
//! `gearbox-link` (the emulator's link model, unchanged), and drives them with a
//! virtual clock: a discrete-event loop that jumps from one event to the next (a
//! delivery or departure on a link, a connection timer, a workload request) and never
//! sleeps. docs/architecture.md "One link model, two clocks"; docs/sim.md.
//!
//! Why quinn-proto directly rather than the edge and client under a paused tokio clock:
//! quinn-proto is sans-IO (it takes `now` in every call and hands back datagrams and
//! timer deadlines), which is exactly what a simulator needs, and it is the layer that
//! decides everything on the wire (packets, ACKs, loss recovery, congestion control,
//! pacing). The async layers above it (quinn, h3, hyper) add tasks, wakers and locks
//! that a paused runtime would still have to schedule on real threads, for no change
//! in what is sent when. HTTP/3 framing is not simulated: a request is a QUIC stream
//! carrying the request's bytes, the response the response's bytes (sizes from the
//! workload, as the edge's `/bytes/N` serves them), so a response is a few bytes of
//! HTTP/3 framing shorter than on the real stack.
//!
//! The result of a run is one client record per request, in the telemetry schema of
//! the edge and client (docs/telemetry.md) with `source = "sim"`; the same config and
//! seed give byte-identical records.

mod engine;
pub mod null_crypto;
mod packet;
mod page;
mod paths;

pub use engine::{run, ConnectionMonitor, GearRun, Session, SimError, SimOutcome};
pub use page::{PageLoad, PageOutcome, StreamOutcome, StreamRequest};
pub use paths::SAILFISH;

use std::path::{Path, PathBuf};

use gearbox_cc::QuicCc;
use gearbox_link::LinkConfig;
use serde::Deserialize;

/// One simulation: a client and a server over one path (a downlink and an uplink) or,
/// for a multipath client, over several.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimConfig {
    /// Seed of every random choice (links, workload, QUIC's connection ids).
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// The workload's own seed, as `gearbox load --seed` takes it (default: `seed`): the
    /// lab gives every policy of a repetition the same requests this way, and
    /// `gearbox sim run` the same requests as `gearbox lab run`.
    #[serde(default)]
    pub workload_seed: Option<u64>,
    /// Requests sent in the first this many simulated seconds.
    pub duration_s: f64,
    /// Virtual-time limit of the run, seconds (default: 2 × duration + 30).
    #[serde(default)]
    pub time_limit_s: Option<f64>,
    /// QUIC congestion controller (the suite's names, or `quinn-*`).
    #[serde(default = "default_cc")]
    pub cc: String,
    /// Initial congestion window, packets of 1200 bytes (None: 10).
    #[serde(default)]
    pub initial_window: Option<u32>,
    /// Packet protection after the Initial packets: `null` (default: a real TLS
    /// handshake, then unencrypted packets of the real size; [`null_crypto`]) or `tls`
    /// (real AES-GCM and header protection on every packet, as on the wire).
    #[serde(default)]
    pub packet_protection: PacketProtection,
    /// Workload: a built-in name (`feed`, `app`, `search`, `bulk`) or a workload file.
    pub workload: String,
    /// Server to client (the emulator's `[path.downlink]`) of a single-path client;
    /// absent when `path` lists the paths.
    #[serde(default)]
    pub down: Option<LinkConfig>,
    /// Client to server (default: the same as `down`).
    #[serde(default)]
    pub up: Option<LinkConfig>,
    /// The paths of a multipath client (SAILfish §4.2: one QUIC connection per path),
    /// in path order; instead of `down` and `up`.
    #[serde(default)]
    pub path: Vec<SimPath>,
    /// A workload run on `path`s: the path scheduler that puts each request on a path
    /// (a name of `gearbox_gears::path::SCHEDULERS`, or `sailfish` with
    /// `sailfish_model`; SAILfish §4.2.1). Default: `gearbox load`'s rule, the request of
    /// workload client `c` on path `c mod paths` (docs/sim.md "Workloads on several paths").
    #[serde(default)]
    pub path_scheduler: Option<String>,
    /// `path_scheduler = "sailfish"`: the policy's folder (`gearbox learn sailfish`).
    #[serde(default)]
    pub sailfish_model: Option<PathBuf>,
    /// Clients spread over /24 prefixes, each prefix its own pair of links (the
    /// emulator's `population` topology; TCP WISE §IV-C1 clusters clients by /24);
    /// instead of `down` and `up`.
    #[serde(default)]
    pub population: Option<SimPopulation>,
    /// The workload's send times are multiplied by this (`gearbox load --time-scale`:
    /// 0.5 sends twice as fast); `duration_s` counts the workload's own time, as the lab's
    /// `duration_s` does. Default 1.
    #[serde(default)]
    pub time_scale: Option<f64>,
    /// What the links' clock reads when the run starts (its first request is sent at
    /// simulated time zero plus its own send time), seconds; default 0. A rate trace, a
    /// link's `schedule` and its Gilbert-Elliott or other time-driven state are this far
    /// along then. The emulator's links start when its relay starts, before its server
    /// is ready and its client starts (docs/emu.md "Sequence"), so the same trace meets an
    /// emulated client's first request about a second in; `gearbox sim run` sets this to
    /// that measured offset (docs/sim.md "Fidelity").
    #[serde(default)]
    pub link_offset_s: Option<f64>,
    /// Where each connection's qlog goes (`conn<N>-client.sqlog`, `conn<N>-server.sqlog`:
    /// quinn-proto's packet, loss and recovery events, JSON-SEQ, times from the run's
    /// virtual time zero); None: no qlog. Not read from the file: `gearbox sim exec --qlog`.
    #[serde(skip)]
    pub qlog_dir: Option<std::path::PathBuf>,
}

/// One path of a multipath client: its own pair of links, and client address
/// `10.0.<index>.2` (the emulator's multipath topology gives path *p* its own address
/// the same way).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimPath {
    /// A label for messages (default `path<i>`).
    #[serde(default)]
    pub name: Option<String>,
    /// Server to client.
    pub down: LinkConfig,
    /// Client to server (default: the same as `down`).
    #[serde(default)]
    pub up: Option<LinkConfig>,
}

/// The most paths a multipath client may have (one client address per path).
pub const MAX_PATHS: usize = 200;

/// A population of clients (the emulator's `population` topology, docs/emu.md): `prefixes`
/// client /24s of `hosts_per_prefix` hosts each; prefix *i*'s host *h* is
/// `100.(64 + i / 256).(i % 256).(h + 1)`, the emulator's address. Every prefix has its own
/// pair of links, built from `down` / `up` with the prefix's overrides applied: a key given
/// in `[population.prefix.down]` replaces that key of `[population.down]` whole (a shallow
/// merge, as the emulator's: a deep one would mix two loss models' fields into one table).
/// A request of the workload's client `c` goes from address `c mod (prefixes x hosts)`,
/// prefix-major, as `gearbox load` spreads requests over its local addresses.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimPopulation {
    /// Client /24s, 1 ..= [`MAX_PREFIXES`].
    pub prefixes: u32,
    /// Client addresses per /24, 1 ..= [`MAX_HOSTS`].
    pub hosts_per_prefix: u32,
    /// Every prefix's server-to-client link (a `gearbox_link::LinkConfig` table).
    pub down: toml::Table,
    /// Every prefix's client-to-server link (default: the same as its `down`).
    #[serde(default)]
    pub up: Option<toml::Table>,
    /// Overrides for single prefixes.
    #[serde(default)]
    pub prefix: Vec<SimPrefix>,
}

/// One prefix's overrides of the population's links.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimPrefix {
    /// The prefix, 0-based.
    pub index: u32,
    /// Keys replacing the population's `down` keys.
    #[serde(default)]
    pub down: Option<toml::Table>,
    /// Keys replacing the population's `up` keys (without a population `up`: the
    /// prefix's own merged `down`).
    #[serde(default)]
    pub up: Option<toml::Table>,
}

/// Most client /24s of a population (the emulator's bound).
pub const MAX_PREFIXES: u32 = 1 << 14;
/// Most client addresses per /24 (the emulator's bound).
pub const MAX_HOSTS: u32 = 254;
/// Most client addresses of a population (the emulator's bound).
pub const MAX_CLIENT_ADDRS: u64 = 65_536;

impl SimPopulation {
    /// Each prefix's (down, up) links, prefix order; the error names the field.
    pub fn links(&self) -> Result<Vec<(LinkConfig, LinkConfig)>, String> {
        if !(1..=MAX_PREFIXES).contains(&self.prefixes) {
            return Err(format!(
                "population.prefixes: must be in 1 ..= {MAX_PREFIXES}, got {}",
                self.prefixes
            ));
        }
        if !(1..=MAX_HOSTS).contains(&self.hosts_per_prefix) {
            return Err(format!(
                "population.hosts_per_prefix: must be in 1 ..= {MAX_HOSTS}, got {}",
                self.hosts_per_prefix
            ));
        }
        let addrs = u64::from(self.prefixes) * u64::from(self.hosts_per_prefix);
        if addrs > MAX_CLIENT_ADDRS {
            return Err(format!(
                "population.hosts_per_prefix: {} prefixes x {} hosts is {addrs} client addresses; at most {MAX_CLIENT_ADDRS}",
                self.prefixes, self.hosts_per_prefix
            ));
        }
        let build = |table: toml::Table, field: &str| -> Result<LinkConfig, String> {
            let link: LinkConfig = toml::Value::Table(table)
                .try_into()
                .map_err(|e: toml::de::Error| format!("{field}: {}", e.to_string().trim_end().replace('\n', " ")))?;
            link.validate().map_err(|e| format!("{field}: {e}"))?;
            Ok(link)
        };
        let down = build(self.down.clone(), "population.down")?;
        let up = match &self.up {
            Some(t) => build(t.clone(), "population.up")?,
            None => down.clone(),
        };
        let mut links = vec![(down, up); self.prefixes as usize];
        let mut seen = vec![false; self.prefixes as usize];
        for (j, o) in self.prefix.iter().enumerate() {
            let field = format!("population.prefix[{j}]");
            let Some(slot) = seen.get_mut(o.index as usize) else {
                return Err(format!(
                    "{field}.index: prefix {} does not exist (prefixes = {}, indices start at 0)",
                    o.index, self.prefixes
                ));
            };
            if std::mem::replace(slot, true) {
                return Err(format!("{field}.index: prefix {} is overridden twice", o.index));
            }
            let merge = |base: &toml::Table, over: &Option<toml::Table>| {
                let mut t = base.clone();
                t.extend(over.clone().unwrap_or_default());
                t
            };
            let down_table = merge(&self.down, &o.down);
            let down = build(down_table.clone(), &format!("{field}.down"))?;
            let up = build(
                merge(self.up.as_ref().unwrap_or(&down_table), &o.up),
                &format!("{field}.up"),
            )?;
            links[o.index as usize] = (down, up);
        }
        Ok(links)
    }

    /// Client addresses in all.
    pub fn addresses(&self) -> u32 {
        self.prefixes * self.hosts_per_prefix
    }
}

/// The address of a population's client `addr` (prefix-major: prefix `addr / hosts`,
/// host `addr % hosts`), as the emulator numbers them.
pub fn population_addr(addr: u32, hosts_per_prefix: u32) -> std::net::Ipv4Addr {
    let (prefix, host) = (addr / hosts_per_prefix, addr % hosts_per_prefix);
    std::net::Ipv4Addr::new(100, (64 + prefix / 256) as u8, (prefix % 256) as u8, (host + 1) as u8)
}

/// The prefix index of a population address (`None` outside 100.64.0.0/10).
pub fn population_prefix(ip: std::net::Ipv4Addr) -> Option<u32> {
    let o = ip.octets();
    (o[0] == 100 && (64..128).contains(&o[1])).then(|| u32::from(o[1] - 64) * 256 + u32::from(o[2]))
}

/// How packets are protected once the handshake has keys (docs/sim.md "Packet protection").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PacketProtection {
    /// Real TLS handshake, then payloads copied (no AEAD, no header protection); every
    /// packet keeps its real size. The default: it changes no size or timing and costs
    /// a fraction of the time.
    #[default]
    Null,
    /// Real TLS 1.3 packet protection on every packet.
    Tls,
}

fn default_seed() -> u64 {
    1
}

fn default_cc() -> String {
    "cubic".into()
}

impl SimConfig {
    /// Reads a config file; errors name the file and the field.
    pub fn load(path: &Path) -> Result<SimConfig, SimError> {
        let text = std::fs::read_to_string(path).map_err(|e| SimError::Config {
            file: path.to_path_buf(),
            message: format!("cannot read: {e}"),
        })?;
        SimConfig::parse(&text, path)
    }

    /// Parses a config's text (`file` names it in errors).
    pub fn parse(text: &str, file: &Path) -> Result<SimConfig, SimError> {
        let c: SimConfig = toml::from_str(text).map_err(|e| SimError::Config {
            file: file.to_path_buf(),
            message: e.to_string().trim_end().replace('\n', " "),
        })?;
        c.validate(file)?;
        Ok(c)
    }

    fn validate(&self, file: &Path) -> Result<(), SimError> {
        let bad = |field: &str, message: String| SimError::Config {
            file: file.to_path_buf(),
            message: format!("{field}: {message}"),
        };
        if !(self.duration_s.is_finite() && self.duration_s > 0.0) {
            return Err(bad("duration_s", format!("must be > 0, got {}", self.duration_s)));
        }
        if let Some(t) = self.time_limit_s.filter(|t| !(t.is_finite() && *t > 0.0)) {
            return Err(bad("time_limit_s", format!("must be > 0, got {t}")));
        }
        self.quic_cc()
            .map_err(|e| bad("cc", e.to_string()))?
            .factory(self.initial_window)
            .map_err(|e| bad("initial_window", e.to_string()))?;
        if let Some(t) = self.time_scale.filter(|t| !(t.is_finite() && *t > 0.0)) {
            return Err(bad("time_scale", format!("must be > 0, got {t}")));
        }
        if let Some(t) = self
            .link_offset_s
            .filter(|t| !(t.is_finite() && *t >= 0.0 && *t <= 86_400.0))
        {
            return Err(bad("link_offset_s", format!("must be between 0 and 86400, got {t}")));
        }
        let given = [self.down.is_some(), !self.path.is_empty(), self.population.is_some()];
        match given.iter().filter(|g| **g).count() {
            0 => {
                return Err(bad(
                    "down",
                    "missing: give [down] (one path), [[path]] entries or [population]".into(),
                ))
            }
            1 => {}
            _ => {
                let field = if self.population.is_some() {
                    "population"
                } else {
                    "path"
                };
                return Err(bad(
                    field,
                    "give one of [down]/[up] (one path), [[path]] entries or [population], not several".into(),
                ));
            }
        }
        if let Some(p) = &self.population {
            p.links().map_err(|e| SimError::Config {
                file: file.to_path_buf(),
                message: e,
            })?;
        }
        if self.up.is_some() && self.down.is_none() {
            return Err(bad(
                "up",
                "[up] needs [down]; with [[path]] each path has its own up, with [population] population.up".into(),
            ));
        }
        if self.path.len() > MAX_PATHS {
            return Err(bad(
                "path",
                format!("at most {MAX_PATHS} paths, got {}", self.path.len()),
            ));
        }
        for (name, link) in [("down", self.down.as_ref()), ("up", self.up.as_ref())] {
            if let Some(l) = link {
                l.validate().map_err(|e| bad(name, e.to_string()))?;
            }
        }
        for (i, p) in self.path.iter().enumerate() {
            for (name, link) in [("down", Some(&p.down)), ("up", p.up.as_ref())] {
                if let Some(l) = link {
                    l.validate()
                        .map_err(|e| bad(&format!("path[{i}].{name}"), e.to_string()))?;
                }
            }
        }
        paths::WorkloadPaths::from_config(self, file)?;
        Ok(())
    }

    /// Each path's (down, up) links, in path order: one for a single-path config; for a
    /// population, each prefix's (an error naming the field for a bad override).
    pub fn links(&self) -> Result<Vec<(LinkConfig, LinkConfig)>, String> {
        if let Some(p) = &self.population {
            return p.links();
        }
        Ok(match &self.down {
            Some(down) => vec![(down.clone(), self.up.clone().unwrap_or_else(|| down.clone()))],
            None => self
                .path
                .iter()
                .map(|p| (p.down.clone(), p.up.clone().unwrap_or_else(|| p.down.clone())))
                .collect(),
        })
    }

    /// The controller named by `cc`.
    pub fn quic_cc(&self) -> Result<QuicCc, gearbox_cc::UnknownCc> {
        self.cc.parse()
    }

    /// The run's virtual-time limit.
    pub fn time_limit_s(&self) -> f64 {
        self.time_limit_s.unwrap_or(2.0 * self.duration_s + 30.0)
    }
}

/// Where a config came from, for messages.
pub type ConfigPath = PathBuf;
