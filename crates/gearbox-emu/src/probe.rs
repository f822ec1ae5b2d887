//! UDP echo probes across a running [`Emulator`]: what an application in the
//! client namespace measures as the round-trip time of each path.
//!
//! One place for the measurement that the accuracy tests assert on and the
//! bias benchmark (`examples/emu_bias.rs`) reports, so both read the same
//! figures. An echo thread in the server namespace answers every datagram; a
//! probe thread sends `count` probes from each client address in turn, one at a
//! time, and records four timestamps per probe on the relay's clock (monotonic
//! time since the relay started, the clock of the event log), so a round trip
//! can be split into its hops against the relay's own enqueue and delivery
//! events. Both threads run under SCHED_FIFO, as a kernel's ping reply would
//! not wait behind other work: the figures are the emulator's, not the
//! scheduler's.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::{sys, EmuError, Emulator, Side};

/// UDP port of the echo server in the server namespace.
pub const ECHO_PORT: u16 = 7007;
/// SCHED_FIFO priority of the probe and echo threads (below the relay's).
const PROBE_PRIORITY: i32 = 5;
/// How long a probe waits for its answer before the measurement fails.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);

/// The four moments of one probe, on the relay's clock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProbeTimes {
    /// Just before the probe's `send_to` in the client namespace.
    pub sent: Duration,
    /// Just after the echo thread's `recv_from` returned it.
    pub echo_received: Duration,
    /// Just before the echo thread's `send_to` of the answer.
    pub echo_sent: Duration,
    /// Just after the probe thread's `recv_from` returned the answer.
    pub received: Duration,
}

impl ProbeTimes {
    /// Round-trip time as the client application sees it.
    pub fn rtt(&self) -> Duration {
        self.received.saturating_sub(self.sent)
    }

    /// The round trip less the echo's turnaround (its receive to its send).
    pub fn network(&self) -> Duration {
        self.rtt()
            .saturating_sub(self.echo_sent.saturating_sub(self.echo_received))
    }
}

fn probe_error(step: &str, e: impl std::fmt::Display) -> EmuError {
    EmuError::Setup(crate::SetupError {
        step: format!("UDP probe: {step}"),
        detail: e.to_string(),
    })
}

/// Sends `count` probes from every client address (address by address, one probe
/// in flight at a time, `gap` between an answer and the next probe) to an echo
/// server on [`ECHO_PORT`] in the server namespace; returns each address's probes.
/// Needs SCHED_FIFO (root). A probe not answered within 2 s is an error.
pub fn udp_echo_probes(emu: &Emulator, count: usize, gap: Duration) -> Result<Vec<Vec<ProbeTimes>>, EmuError> {
    let server_addr = SocketAddr::from((emu.server_addr(), ECHO_PORT));
    let echo = emu
        .in_namespace(Side::Server, || UdpSocket::bind(server_addr))?
        .map_err(|e| probe_error("bind the echo socket", e))?;
    let mut socks = Vec::new();
    for &addr in emu.client_addrs() {
        let s = emu
            .in_namespace(Side::Client, || UdpSocket::bind((addr, 0)))?
            .map_err(|e| probe_error(&format!("bind a probe socket to {addr}"), e))?;
        socks.push(s);
    }
    echo_probes(echo, socks, server_addr, count, gap, Duration::ZERO, emu.epoch())
}

/// The same probes between two sockets on the loopback device of the calling
/// thread's namespace, no emulator between them: the floor of what these two
/// threads can measure on this machine (their system calls and wake-ups). The
/// echo holds each answer `hold` (so both threads sleep as long as they would
/// behind a link's delay, and wake as slowly); [`ProbeTimes::network`] leaves
/// the hold out. Times are on CLOCK_MONOTONIC.
pub fn loopback_echo_probes(count: usize, gap: Duration, hold: Duration) -> Result<Vec<ProbeTimes>, EmuError> {
    let echo = UdpSocket::bind(("127.0.0.1", 0)).map_err(|e| probe_error("bind the echo socket", e))?;
    let server_addr = echo.local_addr().map_err(|e| probe_error("echo address", e))?;
    let sock = UdpSocket::bind(("127.0.0.1", 0)).map_err(|e| probe_error("bind a probe socket", e))?;
    Ok(echo_probes(echo, vec![sock], server_addr, count, gap, hold, Duration::ZERO)?.remove(0))
}

/// The echo and probe threads around ready sockets; `epoch` is subtracted from
/// CLOCK_MONOTONIC for every timestamp.
fn echo_probes(
    echo: UdpSocket,
    socks: Vec<UdpSocket>,
    server_addr: SocketAddr,
    count: usize,
    gap: Duration,
    hold: Duration,
    epoch: Duration,
) -> Result<Vec<Vec<ProbeTimes>>, EmuError> {
    echo.set_read_timeout(Some(Duration::from_millis(50)))
        .map_err(|e| probe_error("echo socket timeout", e))?;
    for s in &socks {
        s.set_read_timeout(Some(ANSWER_TIMEOUT))
            .map_err(|e| probe_error("probe socket timeout", e))?;
    }
    let clock = move || sys::monotonic_now().saturating_sub(epoch);
    // (received, sent) of the echo, indexed by (address, probe).
    let echo_times: Arc<Mutex<Vec<(u32, Duration, Duration)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let echo_thread = {
        let (stop, times) = (stop.clone(), echo_times.clone());
        std::thread::spawn(move || -> std::io::Result<()> {
            sys::set_realtime(PROBE_PRIORITY)?;
            let mut buf = [0u8; 2048];
            while !stop.load(Ordering::Relaxed) {
                if let Ok((n, from)) = echo.recv_from(&mut buf) {
                    let got = clock();
                    let id = buf
                        .get(..4)
                        .map_or(u32::MAX, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                    if !hold.is_zero() {
                        std::thread::sleep(hold);
                    }
                    let sent = clock();
                    echo.send_to(&buf[..n], from)?;
                    if let Ok(mut t) = times.lock() {
                        t.push((id, got, sent));
                    }
                }
            }
            Ok(())
        })
    };
    let probes = std::thread::spawn(move || -> std::io::Result<Vec<Vec<ProbeTimes>>> {
        sys::set_realtime(PROBE_PRIORITY)?;
        let mut all = Vec::new();
        for (a, sock) in socks.iter().enumerate() {
            let mut times = Vec::with_capacity(count);
            for i in 0..count {
                let id = (a * count + i) as u32;
                let sent = clock();
                sock.send_to(&id.to_be_bytes(), server_addr)?;
                let mut buf = [0u8; 64];
                loop {
                    let (n, _) = sock.recv_from(&mut buf)?;
                    if n == 4 && buf[..4] == id.to_be_bytes() {
                        break;
                    }
                }
                times.push(ProbeTimes {
                    sent,
                    received: clock(),
                    ..ProbeTimes::default()
                });
                std::thread::sleep(gap);
            }
            all.push(times);
        }
        Ok(all)
    })
    .join();
    stop.store(true, Ordering::Relaxed);
    let echo_result = echo_thread.join();
    let mut all = probes
        .map_err(|_| probe_error("probe thread", "panicked"))?
        .map_err(|e| probe_error("probe (no answer within 2 s, or SCHED_FIFO refused)", e))?;
    echo_result
        .map_err(|_| probe_error("echo thread", "panicked"))?
        .map_err(|e| probe_error("echo", e))?;
    let echoes = echo_times.lock().map_err(|_| probe_error("echo times", "poisoned"))?;
    for &(id, got, sent) in echoes.iter() {
        let (a, i) = (id as usize / count.max(1), id as usize % count.max(1));
        if let Some(p) = all.get_mut(a).and_then(|v| v.get_mut(i)) {
            (p.echo_received, p.echo_sent) = (got, sent);
        }
    }
    Ok(all)
}

/// Two spinning `sh` processes at normal priority, so both cores of a 2-core
/// machine are busy while it lives: the "loaded" condition of the accuracy
/// tests and of `examples/emu_bias.rs`. Killed and reaped on drop.
pub struct CpuLoad(Vec<std::process::Child>);

impl CpuLoad {
    /// Starts the two processes.
    pub fn start() -> std::io::Result<Self> {
        let mut load = CpuLoad(Vec::new());
        for _ in 0..2 {
            load.0.push(
                std::process::Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .stdin(std::process::Stdio::null())
                    .spawn()?,
            );
        }
        Ok(load)
    }
}

impl Drop for CpuLoad {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Milliseconds of a duration, for reports.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
