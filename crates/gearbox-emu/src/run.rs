//! The `gearbox emu` sequence: start the emulator, the server, wait until it
//! is ready, run the client, stop everything (docs/emu.md "Sequence").
//!
//! Readiness is read from the server namespace's socket tables rather than
//! probed with a connection: a probe would cross the emulated links, show up
//! in the event log and disturb a loss or policing experiment, and a fixed
//! sleep is either too short on a loaded machine or wasted time.

use std::os::unix::process::CommandExt;
use std::process::{Child, ExitStatus};
use std::str::FromStr;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use crate::config::ENDPOINT_PRIORITY;
use crate::{sys, EmuConfig, EmuError, Emulator, EmulatorOptions, RelayReport, Side};

/// A port the server must have bound before the client starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadyPort {
    /// Port number.
    pub port: u16,
    /// TCP (in LISTEN state) or UDP (bound).
    pub udp: bool,
}

impl FromStr for ReadyPort {
    type Err = String;

    /// `5201/tcp`, `4433/udp`; a bare number means TCP.
    fn from_str(s: &str) -> Result<Self, String> {
        let (port, proto) = s.trim().split_once('/').unwrap_or((s.trim(), "tcp"));
        let port: u16 = port
            .parse()
            .map_err(|_| format!("{s:?}: expected PORT/tcp or PORT/udp with PORT in 1..=65535"))?;
        let udp = match proto.to_ascii_lowercase().as_str() {
            "tcp" => false,
            "udp" => true,
            other => return Err(format!("{s:?}: protocol {other:?} is neither tcp nor udp")),
        };
        if port == 0 {
            return Err(format!("{s:?}: port 0 cannot be waited for"));
        }
        Ok(ReadyPort { port, udp })
    }
}

/// What to run across the emulator.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Emulator options (seed, event log, name).
    pub emulator: EmulatorOptions,
    /// `sh -c` command for the server namespace.
    pub server: Option<String>,
    /// `sh -c` command for the client namespace.
    pub client: Option<String>,
    /// Without a client: how long to run. With one: its time limit.
    pub duration: Option<Duration>,
    /// Ports that make the server ready (empty: any listening socket).
    pub ready_ports: Vec<ReadyPort>,
    /// How long the server may take to become ready.
    pub ready_timeout: Duration,
    /// Run the server and client commands (and everything they start) under
    /// SCHED_FIFO at [`crate::config::ENDPOINT_PRIORITY`]. On a loaded machine an
    /// endpoint waiting for a CPU delays its ACKs and sends by milliseconds, and a
    /// delay-based controller reads that as queueing: Copa's target queue at
    /// 50 Mbit/s is about half a millisecond (docs/cc.md "Validation"). With this on,
    /// the delay the endpoints see is the emulated path's. Needs root, like the relay's
    /// own real-time thread; without it the commands run as usual, with a warning.
    pub realtime_endpoints: bool,
    /// Start the client no earlier than this link time (the links' clock, which starts
    /// with the relay): a run's trace or schedule is then at the same point when its
    /// client starts, however long the emulator's calibration and the server took to
    /// get ready (0.35-1.05 s measured). The simulator's `link_offset_s` starts its
    /// links at the same point (docs/sim.md "Fidelity"). `None`: as soon as the server
    /// is ready.
    pub client_at: Option<Duration>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            emulator: EmulatorOptions::default(),
            server: None,
            client: None,
            duration: None,
            ready_ports: Vec::new(),
            ready_timeout: Duration::from_secs(10),
            realtime_endpoints: false,
            client_at: None,
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// Exit code for the caller: the client's, 124 if the time limit killed
    /// it, 0 when there was no client.
    pub exit_code: i32,
    /// Set when a signal (SIGINT, SIGTERM, SIGHUP) stopped the run.
    pub signal: Option<i32>,
    /// The relay's report.
    pub report: RelayReport,
    /// The run name.
    pub name: String,
}

/// The last stop signal received (0 = none).
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_stop_signal(sig: libc::c_int) {
    STOP_SIGNAL.store(sig, Ordering::SeqCst);
}

/// Makes SIGINT, SIGTERM and SIGHUP request a clean stop instead of killing
/// the process (which would leave the cleanup to the watchdog).
fn install_stop_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        let handler = on_stop_signal as extern "C" fn(libc::c_int);
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(sig, handler as libc::sighandler_t) };
    }
}

fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// A started command and its process group.
struct Proc {
    child: Child,
    side: &'static str,
}

impl Proc {
    fn spawn(emu: &Emulator, side: Side, shell: &str, realtime: bool) -> Result<Self, EmuError> {
        let name = match side {
            Side::Server => "server",
            Side::Client => "client",
        };
        let mut command = emu.command(side, shell);
        if realtime {
            if sys::euid() == 0 {
                // SAFETY: the closure makes one system call (sched_setscheduler), which
                // is async-signal-safe, and allocates nothing.
                unsafe {
                    command.pre_exec(|| sys::set_realtime(ENDPOINT_PRIORITY));
                }
            } else {
                tracing::warn!(
                    "{name}: cannot run under SCHED_FIFO (not root); its delays will include the host's scheduling"
                );
            }
        }
        let child = command
            .spawn()
            .map_err(|source| EmuError::Spawn { side: name, source })?;
        Ok(Proc { child, side: name })
    }

    /// SIGTERM to the group, SIGKILL after `grace`; returns its status if it could be reaped.
    fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        if let Ok(Some(s)) = self.child.try_wait() {
            // The leader is gone; its group may not be.
            sys::kill_group(self.child.id(), libc::SIGKILL);
            return Some(s);
        }
        sys::kill_group(self.child.id(), libc::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                sys::kill_group(self.child.id(), libc::SIGKILL);
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        tracing::debug!("{} command ignored SIGTERM; killing it", self.side);
        sys::kill_group(self.child.id(), libc::SIGKILL);
        self.child.wait().ok()
    }
}

const POLL: Duration = Duration::from_millis(10);
const GRACE: Duration = Duration::from_secs(1);

fn stop_requested() -> Option<i32> {
    match STOP_SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// Waits until the server has bound what it should; errors if it exits,
/// times out, or a stop signal arrives.
fn wait_ready(emu: &Emulator, server: &mut Proc, ports: &[ReadyPort], timeout: Duration) -> Result<(), EmuError> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(s)) = server.child.try_wait() {
            return Err(EmuError::Server(format!("exited ({s}) before it was ready")));
        }
        let (tcp, udp) = emu.bound_ports(Side::Server)?;
        let ready = if ports.is_empty() {
            !tcp.is_empty() || !udp.is_empty()
        } else {
            ports.iter().all(|p| {
                if p.udp {
                    udp.contains(&p.port)
                } else {
                    tcp.contains(&p.port)
                }
            })
        };
        if ready {
            return Ok(());
        }
        if let Some(sig) = stop_requested() {
            return Err(EmuError::Server(format!("stopped by signal {sig} before it was ready")));
        }
        if Instant::now() >= deadline {
            let what = if ports.is_empty() {
                "no listening TCP or bound UDP socket".to_string()
            } else {
                let list: Vec<String> = ports
                    .iter()
                    .map(|p| format!("{}/{}", p.port, if p.udp { "udp" } else { "tcp" }))
                    .collect();
                format!("not all of {} bound", list.join(","))
            };
            return Err(EmuError::Server(format!(
                "not ready after {:.1} s ({what} in the server namespace)",
                timeout.as_secs_f64()
            )));
        }
        std::thread::sleep(POLL);
    }
}

/// Runs the whole sequence. Installs handlers for SIGINT, SIGTERM and SIGHUP
/// that turn them into a clean stop.
pub fn run(config: &EmuConfig, options: &RunOptions) -> Result<RunOutcome, EmuError> {
    install_stop_handlers();
    STOP_SIGNAL.store(0, Ordering::SeqCst);
    let emu = Emulator::start(config, &options.emulator)?;
    let name = emu.name().to_string();
    let mut server = match &options.server {
        Some(cmd) => Some(Proc::spawn(&emu, Side::Server, cmd, options.realtime_endpoints)?),
        None => None,
    };
    let result = (|| -> Result<(i32, Option<i32>), EmuError> {
        if let Some(s) = &mut server {
            wait_ready(&emu, s, &options.ready_ports, options.ready_timeout)?;
        }
        let mut client = match &options.client {
            Some(cmd) => {
                if let Some(at) = options.client_at {
                    loop {
                        let left = at.saturating_sub(sys::monotonic_now().saturating_sub(emu.epoch()));
                        if left.is_zero() {
                            break;
                        }
                        if let Some(sig) = stop_requested() {
                            return Ok((128 + sig, Some(sig)));
                        }
                        std::thread::sleep(left.min(POLL));
                    }
                }
                // The links' clock when the client starts: a trace or schedule is this far
                // along at its first request (the simulator's `link_offset_s` matches it;
                // docs/sim.md "Fidelity").
                let link_time = sys::monotonic_now().saturating_sub(emu.epoch());
                let unix_ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis());
                tracing::info!(
                    link_time_s = format_args!("{:.3}", link_time.as_secs_f64()),
                    unix_ms,
                    "client started"
                );
                Some(Proc::spawn(&emu, Side::Client, cmd, options.realtime_endpoints)?)
            }
            None => None,
        };
        let deadline = options.duration.map(|d| Instant::now() + d);
        loop {
            if let Some(c) = &mut client {
                if let Ok(Some(status)) = c.child.try_wait() {
                    c.stop(Duration::ZERO);
                    return Ok((exit_code(status), None));
                }
            }
            if let Some(sig) = stop_requested() {
                let code = match &mut client {
                    Some(c) => c.stop(GRACE).map_or(128 + sig, exit_code),
                    None => 0,
                };
                return Ok((code, Some(sig)));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                let code = match &mut client {
                    Some(c) => {
                        c.stop(GRACE);
                        124
                    }
                    None => 0,
                };
                return Ok((code, None));
            }
            if !emu.relay_running() {
                if let Some(c) = &mut client {
                    c.stop(GRACE);
                }
                return Err(EmuError::Relay(std::io::Error::other(
                    "the relay thread stopped unexpectedly",
                )));
            }
            std::thread::sleep(POLL);
        }
    })();
    if let Some(s) = &mut server {
        s.stop(GRACE);
    }
    let report = emu.stop();
    let (exit_code, signal) = result?;
    Ok(RunOutcome {
        exit_code,
        signal,
        report: report?,
        name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_ports_parse_with_protocol() {
        assert_eq!("5201/tcp".parse(), Ok(ReadyPort { port: 5201, udp: false }));
        assert_eq!("4433/UDP".parse(), Ok(ReadyPort { port: 4433, udp: true }));
        assert_eq!("80".parse(), Ok(ReadyPort { port: 80, udp: false }));
        assert!("0/tcp".parse::<ReadyPort>().is_err());
        assert!("70000/tcp".parse::<ReadyPort>().is_err());
        assert!("53/sctp".parse::<ReadyPort>().unwrap_err().contains("sctp"));
    }
}
