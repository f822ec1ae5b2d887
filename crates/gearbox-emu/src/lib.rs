//! # gearbox-emu — real-time emulated network paths between namespaces
//!
//! Runs the sans-IO link model of `gearbox-link` in real time between a server
//! and a client network namespace (docs/architecture.md "One link model, two clocks"; the
//! simulator runs the same links in virtual time). The kernel here has no
//! netem, so delay, rate, loss and policing all happen in user space.
//!
//! ```text
//!   client netns                 root netns (relay thread)                server netns
//!  100.64.p.h ─ gbx0 ══ TUN fd ══ uplink: [prefix link] → [path link] ══ TUN fd ══ gbx0 ─ 10.0.0.1
//!                              ◄═ downlink: [path link] → [prefix link] ═
//! ```
//!
//! - [`EmuConfig`]: `EMU.toml` (topology and links; schema in docs/emu.md).
//! - [`Emulator`]: namespaces + TUN devices + the relay thread, removed on drop.
//! - [`run`]: the whole `gearbox emu` sequence (server, readiness, client,
//!   stop), which the CLI wraps.
//!
//! The relay stays in the root namespace and opens each TUN device from a
//! short-lived thread that `setns`es into the target namespace, so the devices
//! live in their namespaces, the descriptors in the relay, and a crash of the
//! relay closes the descriptors and thereby removes the devices. The rejected
//! alternative, a veth pair plus an `AF_PACKET` relay, needs a relay namespace
//! and leaves devices behind when it dies.

pub mod addr;
pub mod arrival;
pub mod calibrate;
pub mod config;
pub mod core;
pub mod netns;
pub mod probe;
pub mod relay;
pub mod run;
mod sys;

use std::fs::File;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

pub use crate::config::{ConfigError, EmuConfig, PathConfig, PopulationConfig, RelayConfig, Topology};
use crate::core::Core;
pub use crate::core::{BuildError, Dir, LinkReport, Plan, Side};
use crate::netns::{Namespaces, SetupError};
pub use crate::relay::RelayReport;
use crate::relay::{RelayDevices, RelayHandle};
pub use crate::run::{run, ReadyPort, RunOptions, RunOutcome};
use std::os::unix::process::CommandExt;

/// Why the emulator could not run.
#[derive(Debug, thiserror::Error)]
pub enum EmuError {
    /// The machine lacks something the emulator needs (root, /dev/net/tun, ip).
    #[error("{0}")]
    Environment(String),
    /// The config file is wrong.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// A link could not be built (e.g. a malformed trace file).
    #[error("{0}")]
    Link(#[from] BuildError),
    /// Creating the namespaces or devices failed.
    #[error("emulator setup: {0}")]
    Setup(#[from] SetupError),
    /// The event log could not be created.
    #[error("event log {path}: {source}")]
    Events {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The server command failed before it was ready.
    #[error("server command: {0}")]
    Server(String),
    /// A command could not be started.
    #[error("cannot start the {side} command: {source}")]
    Spawn {
        /// `server` or `client`.
        side: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The relay thread failed.
    #[error("relay: {0}")]
    Relay(std::io::Error),
}

const NO_ROOT_HINT: &str = "`gearbox sim` runs the same link model in virtual time without root";

/// Checks root, `/dev/net/tun` and `ip`; the error says what is missing.
pub fn check_environment() -> Result<(), EmuError> {
    if sys::euid() != 0 {
        return Err(EmuError::Environment(format!(
            "gearbox emu needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) to create network namespaces and TUN devices; \
             run it as root, or use {NO_ROOT_HINT}"
        )));
    }
    if !Path::new("/dev/net/tun").exists() {
        return Err(EmuError::Environment(format!(
            "gearbox emu needs /dev/net/tun (the tun kernel module: `modprobe tun`, or in a container \
             `--device /dev/net/tun`); {NO_ROOT_HINT}"
        )));
    }
    let ip_ok = Command::new("ip")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ip_ok {
        return Err(EmuError::Environment(
            "gearbox emu needs the `ip` command (Debian package iproute2)".to_string(),
        ));
    }
    Ok(())
}

/// How long [`Emulator::start`] waits for the first hop-latency estimates (a
/// few hundred probes' worth; normally ~60 ms).
const CALIBRATION_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Options of an [`Emulator`] beyond its config.
#[derive(Debug, Clone, Default)]
pub struct EmulatorOptions {
    /// Seed of every random choice of the links.
    pub seed: u64,
    /// Write the packet-event log here (JSON lines, docs/emu.md).
    pub events: Option<PathBuf>,
    /// Run name (namespaces `NAMEs`, `NAMEc`); default [`netns::unique_name`].
    pub name: Option<String>,
}

/// A running emulated topology: two namespaces, a TUN device in each, and the
/// relay between them. Dropping it stops the relay, kills whatever runs in the
/// namespaces and deletes them.
pub struct Emulator {
    relay: Option<RelayHandle>,
    netns: Namespaces,
    client_addrs: Vec<Ipv4Addr>,
    /// CLOCK_MONOTONIC when the relay started: every link's time zero.
    epoch: std::time::Duration,
    /// The hop compensation the relay measures and applies.
    hops: Arc<calibrate::Shared>,
    /// Probes the relay for its hop latencies; stopped before the relay.
    calibrator: Option<calibrate::Calibrator>,
}

impl Emulator {
    /// Checks the machine, builds the links (nothing is created if the config
    /// or a trace is bad), then creates the namespaces and starts the relay.
    /// The links' time zero is the moment the relay starts.
    pub fn start(config: &EmuConfig, options: &EmulatorOptions) -> Result<Self, EmuError> {
        check_environment()?;
        let plan = Plan::new(config);
        let client_addrs = plan.client_addrs.clone();
        let core = Core::new(plan, options.seed, options.events.is_some())?;
        let events = match &options.events {
            Some(path) => Some(File::create(path).map_err(|source| EmuError::Events {
                path: path.clone(),
                source,
            })?),
            None => None,
        };
        netns::sweep_stale();
        let name = options.name.clone().unwrap_or_else(netns::unique_name);
        let netns = Namespaces::create(&name)?;
        let server_tun = netns::open_tun_in(&netns.server)?;
        let client_tun = netns::open_tun_in(&netns.client)?;
        let dev = sys::TUN_NAME;
        let common = format!("link set dev lo up\nlink set dev {dev} mtu 1500 up\n");
        let server_batch = format!(
            "{common}addr add {}/32 dev {dev}\nroute add {} dev {dev}\n",
            addr::SERVER_ADDR,
            addr::CLIENT_RANGE
        );
        netns::ip(&["-n", &netns.server, "-batch", "-"], Some(&server_batch))?;
        let mut client_batch = common;
        for a in &client_addrs {
            client_batch.push_str(&format!("addr add {a}/32 dev {dev}\n"));
        }
        if let Some(first) = client_addrs.first() {
            client_batch.push_str(&format!("route add {}/32 dev {dev} src {first}\n", addr::SERVER_ADDR));
        }
        netns::ip(&["-n", &netns.client, "-batch", "-"], Some(&client_batch))?;
        let tap = |ns: &str| {
            netns::in_netns(ns, || sys::open_transmit_tap(sys::TUN_NAME))
                .and_then(|r| r)
                .map_err(|e| {
                    EmuError::Setup(SetupError {
                        step: format!("open a transmit tap on {} in namespace {ns}", sys::TUN_NAME),
                        detail: e.to_string(),
                    })
                })
        };
        let taps = [tap(&netns.client)?, tap(&netns.server)?];
        let epoch = sys::monotonic_now();
        let hops = Arc::new(calibrate::Shared::default());
        let [client_tap, server_tap] = taps;
        let devices = RelayDevices {
            client_tun,
            server_tun,
            client_tap,
            server_tap,
        };
        let relay = RelayHandle::spawn(core, devices, epoch, config.relay.clone(), events, hops.clone())
            .map_err(EmuError::Relay)?;
        let mut emu = Emulator {
            relay: Some(relay),
            netns,
            client_addrs,
            epoch,
            hops,
            calibrator: None,
        };
        emu.calibrate()?;
        tracing::info!(name = %emu.netns.name, server_ns = %emu.netns.server, client_ns = %emu.netns.client,
            hops = ?emu.hop_compensation(), "emulator up");
        Ok(emu)
    }

    /// Starts the calibrator (a raw socket in each namespace, probing towards
    /// the other) and waits up to [`CALIBRATION_WAIT`] for a first estimate of
    /// every hop, so that the first packets of a run are compensated too.
    fn calibrate(&mut self) -> Result<(), EmuError> {
        let mut ends = Vec::new();
        let first_client = self.client_addrs.first().copied().unwrap_or(addr::SERVER_ADDR);
        for (side, towards) in [(Side::Client, addr::SERVER_ADDR), (Side::Server, first_client)] {
            let socket = self.in_namespace(side, calibrate::open_socket)?.map_err(|e| {
                EmuError::Setup(SetupError {
                    step: "open the calibrator's raw socket".into(),
                    detail: e.to_string(),
                })
            })?;
            ends.push(calibrate::Endpoint { socket, towards });
        }
        self.calibrator = Some(calibrate::Calibrator::start(ends, self.epoch).map_err(EmuError::Relay)?);
        let deadline = std::time::Instant::now() + CALIBRATION_WAIT;
        while !self.hops.calibrated() {
            if std::time::Instant::now() > deadline {
                tracing::warn!(
                    "emulator: hop latencies not calibrated after {CALIBRATION_WAIT:?} ({:?}); \
                     delays stay uncompensated until they are",
                    self.hops.snapshot()
                );
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        Ok(())
    }

    /// The hop compensation in force (zero where not yet calibrated).
    pub fn hop_compensation(&self) -> calibrate::HopCompensation {
        self.hops.snapshot()
    }

    /// CLOCK_MONOTONIC at the relay's start: time zero of every link, of the
    /// event log's `t_us` and of [`probe::ProbeTimes`].
    pub fn epoch(&self) -> std::time::Duration {
        self.epoch
    }

    /// The run name (`GEARBOX_EMU_NAME`).
    pub fn name(&self) -> &str {
        &self.netns.name
    }

    /// The server namespace (`NAMEs`).
    pub fn server_ns(&self) -> &str {
        &self.netns.server
    }

    /// The client namespace (`NAMEc`).
    pub fn client_ns(&self) -> &str {
        &self.netns.client
    }

    /// The server's address.
    pub fn server_addr(&self) -> Ipv4Addr {
        addr::SERVER_ADDR
    }

    /// The client addresses: one per path, or per population host (prefix-major).
    pub fn client_addrs(&self) -> &[Ipv4Addr] {
        &self.client_addrs
    }

    /// The variables every command gets.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let addrs: Vec<String> = self.client_addrs.iter().map(|a| a.to_string()).collect();
        vec![
            ("GEARBOX_SERVER_ADDR", addr::SERVER_ADDR.to_string()),
            ("GEARBOX_CLIENT_ADDRS", addrs.join(",")),
            ("GEARBOX_EMU_NAME", self.netns.name.clone()),
        ]
    }

    /// `sh -c shell` inside the namespace of `side`, with [`Emulator::env`],
    /// stdin from /dev/null and its own process group (so it can be stopped
    /// with everything it started, and a terminal's Ctrl-C reaches only the
    /// emulator, which then stops it).
    pub fn command(&self, side: Side, shell: &str) -> Command {
        let ns = match side {
            Side::Server => &self.netns.server,
            Side::Client => &self.netns.client,
        };
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, "sh", "-c", shell])
            .envs(self.env())
            .stdin(Stdio::null())
            .process_group(0);
        c
    }

    /// Runs `f` on a thread inside the namespace of `side` (e.g. to open
    /// sockets there; they stay in that namespace wherever they are used).
    pub fn in_namespace<T: Send>(&self, side: Side, f: impl FnOnce() -> T + Send) -> Result<T, EmuError> {
        let ns = match side {
            Side::Server => &self.netns.server,
            Side::Client => &self.netns.client,
        };
        netns::in_netns(ns, f).map_err(|e| {
            EmuError::Setup(SetupError {
                step: format!("enter namespace {ns}"),
                detail: e.to_string(),
            })
        })
    }

    /// CPU time the relay thread has used so far (user + system; system time
    /// includes the kernel's receive processing of the packets it writes).
    pub fn relay_cpu_time(&self) -> Option<std::time::Duration> {
        self.relay.as_ref().and_then(|r| r.cpu_time())
    }

    /// The TCP ports in LISTEN state and the bound UDP ports in the namespace of `side`.
    pub fn bound_ports(&self, side: Side) -> Result<(Vec<u16>, Vec<u16>), EmuError> {
        let ns = match side {
            Side::Server => &self.netns.server,
            Side::Client => &self.netns.client,
        };
        netns::bound_ports(ns).map_err(|e| {
            EmuError::Setup(SetupError {
                step: format!("read the sockets of namespace {ns}"),
                detail: e.to_string(),
            })
        })
    }

    /// False once the relay thread has stopped on an error.
    pub fn relay_running(&self) -> bool {
        self.relay.as_ref().is_some_and(|r| !r.is_finished())
    }

    /// Kills whatever runs in the namespaces, stops the relay (returning its
    /// report) and deletes the namespaces.
    pub fn stop(mut self) -> Result<RelayReport, EmuError> {
        self.calibrator = None;
        self.netns.kill_all();
        let report = match self.relay.take() {
            Some(r) => r.stop().map_err(EmuError::Relay),
            None => Err(EmuError::Relay(std::io::Error::other("the relay was already stopped"))),
        };
        self.netns.remove();
        report
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.calibrator = None;
        self.netns.kill_all();
        drop(self.relay.take());
        self.netns.remove();
    }
}
