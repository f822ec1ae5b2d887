//! The relay thread: one thread, one epoll set over the two TUN descriptors and
//! an eventfd to stop it, waited on with a timeout that ends at the links' next
//! wake-up.
//!
//! One thread because the links are one ordered state machine per direction
//! and the work per packet is small next to the two system calls it costs
//! (read from one TUN, write to the other): more threads would add locking and
//! reordering for no gain on a 1-2 core budget. Packets are read into slices of
//! one large `BytesMut` and frozen into `Bytes`, so the hot path allocates once
//! per ~700 packets and the buffer is reused once the packets in it are gone.
//!
//! Time: CLOCK_MONOTONIC minus the epoch taken when the relay starts, which is
//! every link's time zero. The thread runs under SCHED_FIFO (`relay.realtime`,
//! default on), so a busy machine does not delay its wake-ups and the kernel
//! gives its waits no slack; without it a wait ends late by up to the thread's
//! timer slack (`relay.timer_slack_ns`) or 0.1% of the wait, whichever is larger.
//!
//! Hop compensation: each packet enters its link at the kernel's time of its
//! transmission into the TUN device (`crate::arrival`), not when the relay read
//! it, and packets leaving towards a namespace are written early by the
//! measured cost of writing them and waking their reader (`crate::calibrate`);
//! calibration probes are answered here and never reach the links.
//!
//! The wake-up is the timeout of `epoll_pwait2` rather than a timerfd in the
//! epoll set (the first design): at 50 Mbit/s a timerfd cost two extra system
//! calls per wake-up (arm, then read it), about a tenth of the relay's CPU in
//! `perf`, and a timerfd ignores the timer slack, so the slack could not be
//! traded for fewer wake-ups. docs/emu.md has the figures of both.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use gearbox_link::{DropReason, EventKind, PacketEvent};

use crate::arrival::ArrivalTimes;
use crate::calibrate::{self, HopCompensation, LowEstimate, Shared};
use crate::config::{RelayConfig, REALTIME_PRIORITY};
use crate::core::{Core, LinkReport, Side};
use crate::sys::{self, Epoll, Waker};

/// What the relay did, returned when it stops.
#[derive(Debug, Clone)]
pub struct RelayReport {
    /// Counters of every link, in plan order.
    pub links: Vec<LinkReport>,
    /// Packets no path matched (not IPv4, or an address outside the plan).
    pub unroutable_packets: u64,
    /// Packets the kernel refused when written to a TUN device.
    pub tun_write_errors: u64,
    /// CPU time (user + system) of the relay thread.
    pub cpu_time: Duration,
    /// How long the relay ran.
    pub wall_time: Duration,
    /// Writing the event log failed (the log stops at the first error).
    pub events_error: Option<String>,
    /// The hop compensation in force when the relay stopped (zero where it
    /// never calibrated; measured even with `relay.compensate_hops = false`).
    pub hop_compensation: HopCompensation,
    /// Calibration probes answered.
    pub calibration_probes: u64,
    /// Packets stamped with their kernel transmission time.
    pub tapped_arrivals: u64,
    /// Packets whose tapped copy was not found (stamped when read).
    pub untapped_arrivals: u64,
    /// Mean time a tapped packet waited in its TUN queue before the relay read
    /// it: the delay the exact arrival times took off.
    pub mean_tun_wait: Duration,
}

/// Size of the receive arena; a new one is taken when less than [`MAX_PACKET`] is left.
const ARENA_BYTES: usize = 1 << 20;
/// The largest packet a TUN read can return (the IPv4 maximum).
const MAX_PACKET: usize = 65_536;
/// Packets read from one device before the links get a turn, so one busy
/// direction cannot starve the timers.
/// Upper bound of the wake-up compensation (see the relay loop).
const MAX_WAKE_COMPENSATION: Duration = Duration::from_micros(500);
const READ_BATCH: usize = 64;

const TOKEN_CLIENT: u64 = 0;
const TOKEN_SERVER: u64 = 1;
const TOKEN_STOP: u64 = 2;

/// A running relay thread.
pub struct RelayHandle {
    waker: Arc<Waker>,
    /// Kernel thread id of the relay (0 until it has started).
    tid: Arc<std::sync::atomic::AtomicI32>,
    thread: Option<JoinHandle<io::Result<RelayReport>>>,
}

/// The descriptors the relay works on, all opened inside their namespaces.
pub struct RelayDevices {
    /// The client namespace's TUN device.
    pub client_tun: OwnedFd,
    /// The server namespace's TUN device.
    pub server_tun: OwnedFd,
    /// Transmit tap of the client's TUN device (`sys::open_transmit_tap`).
    pub client_tap: OwnedFd,
    /// Transmit tap of the server's TUN device.
    pub server_tap: OwnedFd,
}

impl RelayHandle {
    /// Starts the relay. `epoch` (monotonic) is the links' time zero; the
    /// relay publishes its hop compensation in `shared`.
    pub fn spawn(
        core: Core,
        devices: RelayDevices,
        epoch: Duration,
        relay_config: RelayConfig,
        events: Option<File>,
        shared: Arc<Shared>,
    ) -> io::Result<Self> {
        let RelayDevices {
            client_tun,
            server_tun,
            client_tap,
            server_tap,
        } = devices;
        let waker = Arc::new(Waker::new()?);
        let w = waker.clone();
        let tid = Arc::new(std::sync::atomic::AtomicI32::new(0));
        let t = tid.clone();
        let thread = std::thread::Builder::new()
            .name("gearbox-emu-relay".into())
            .spawn(move || {
                t.store(sys::gettid(), std::sync::atomic::Ordering::SeqCst);
                let mut relay = Relay {
                    core,
                    client_tun,
                    server_tun,
                    epoch,
                    arena: BytesMut::with_capacity(ARENA_BYTES),
                    events: events.map(|f| BufWriter::with_capacity(1 << 16, f)),
                    events_error: None,
                    labels: Vec::new(),
                    pending: Vec::new(),
                    tun_write_errors: 0,
                    shared,
                    out: [LowEstimate::default(); 2],
                    send_path: [LowEstimate::default(); 2],
                    taps: [client_tap, server_tap],
                    arrivals: Default::default(),
                    tun_wait_total: Duration::ZERO,
                    compensate: relay_config.compensate_hops,
                    calibration_probes: 0,
                    answers: VecDeque::new(),
                };
                relay.run(&w, &relay_config)
            })?;
        Ok(RelayHandle {
            waker,
            tid,
            thread: Some(thread),
        })
    }

    /// CPU time the relay thread has used so far (from `/proc/self/task/TID/stat`),
    /// for sampling it while it runs; `None` if it cannot be read.
    pub fn cpu_time(&self) -> Option<Duration> {
        match self.tid.load(std::sync::atomic::Ordering::SeqCst) {
            0 => None,
            tid => sys::task_cpu_time(tid),
        }
    }

    /// True once the thread has ended (by `stop` or by an error).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Stops the relay and returns its report.
    pub fn stop(mut self) -> io::Result<RelayReport> {
        self.waker.wake();
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("the relay thread panicked"))),
            None => Err(io::Error::other("the relay was already stopped")),
        }
    }
}

impl Drop for RelayHandle {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.waker.wake();
            let _ = t.join();
        }
    }
}

struct Relay {
    core: Core,
    client_tun: OwnedFd,
    server_tun: OwnedFd,
    epoch: Duration,
    arena: BytesMut,
    events: Option<BufWriter<File>>,
    events_error: Option<String>,
    /// JSON-escaped label of each link (user text: path names).
    labels: Vec<String>,
    /// Events drained from the links, waiting to be written (reused).
    pending: Vec<(usize, PacketEvent)>,
    tun_write_errors: u64,
    /// Where the estimates are published.
    shared: Arc<Shared>,
    /// Write plus reader wake-up towards the client / server side.
    out: [LowEstimate; 2],
    /// A sender's own path in the client / server namespace, from its `send`
    /// call to the TUN device's transmit.
    send_path: [LowEstimate; 2],
    /// Transmit taps of the client / server TUN device (`sys::open_transmit_tap`).
    taps: [OwnedFd; 2],
    /// Tapped packets of each side waiting for their read.
    arrivals: [ArrivalTimes; 2],
    /// Sum of read time minus tapped time over tapped packets.
    tun_wait_total: Duration,
    /// Apply the estimates (`relay.compensate_hops`).
    compensate: bool,
    calibration_probes: u64,
    /// Calibration answers waiting for their time: (due, side, answer).
    answers: VecDeque<(Duration, Side, Vec<u8>)>,
}

fn side_index(side: Side) -> usize {
    match side {
        Side::Client => 0,
        Side::Server => 1,
    }
}

fn reason_name(r: DropReason) -> &'static str {
    match r {
        DropReason::PolicerBlocked => "policer_blocked",
        DropReason::PolicerRandom => "policer_random",
        DropReason::PolicerRateLimited => "policer_rate_limited",
        DropReason::RandomLoss => "random_loss",
        DropReason::QueueFull => "queue_full",
        DropReason::QueueHeadDrop => "queue_head_drop",
        DropReason::Codel => "codel",
    }
}

impl Relay {
    fn now(&self) -> Duration {
        sys::monotonic_now().saturating_sub(self.epoch)
    }

    fn run(&mut self, waker: &Waker, config: &RelayConfig) -> io::Result<RelayReport> {
        let cpu_start = sys::thread_cpu_time();
        if let Err(e) = sys::set_timer_slack(config.timer_slack_ns) {
            tracing::warn!("relay: cannot set timer slack to {} ns: {e}", config.timer_slack_ns);
        }
        if config.realtime {
            if let Err(e) = sys::set_realtime(REALTIME_PRIORITY) {
                tracing::warn!("relay: cannot run under SCHED_FIFO ({e}); delays will be less exact on a busy machine");
            }
        }
        self.labels = self
            .core
            .plan()
            .links
            .iter()
            .map(|l| serde_json::to_string(&l.label).unwrap_or_else(|_| "\"?\"".into()))
            .collect();
        let epoll = Epoll::new()?;
        epoll.add(self.client_tun.as_raw_fd(), TOKEN_CLIENT)?;
        epoll.add(self.server_tun.as_raw_fd(), TOKEN_SERVER)?;
        epoll.add(waker.fd(), TOKEN_STOP)?;
        let mut ready = [libc::epoll_event { events: 0, u64: 0 }; 8];
        // How late a timed wake-up comes back, smoothed: in a VM a timer expiry takes
        // tens to a hundred microseconds to reach us, which every emulated hop would
        // otherwise add to its delay. Asking that much earlier and then spinning the last
        // few microseconds keeps deliveries on time; nothing leaves before it is due,
        // because `service` only releases packets whose time has come.
        let mut lateness = Duration::ZERO;
        'run: loop {
            let now = self.now();
            let answer_due = self.answers.front().map(|a| a.0);
            let timeout = match (self.core.next_wakeup(), answer_due) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
            .map(|t| t.saturating_sub(now).saturating_sub(lateness));
            let n = epoll.wait(&mut ready, timeout)?;
            if let (0, Some(asked)) = (n, timeout.filter(|t| !t.is_zero())) {
                let late = self.now().saturating_sub(now + asked).min(MAX_WAKE_COMPENSATION);
                lateness = (lateness * 7 + late) / 8;
            }
            for ev in &ready[..n] {
                match ev.u64 {
                    TOKEN_CLIENT => self.read_all(Side::Client)?,
                    TOKEN_SERVER => self.read_all(Side::Server)?,
                    _ => break 'run,
                }
            }
            self.service();
            self.write_events();
        }
        self.service();
        self.write_events();
        if let Some(w) = &mut self.events {
            if let Err(e) = w.flush() {
                self.events_error.get_or_insert_with(|| e.to_string());
            }
        }
        Ok(RelayReport {
            links: self.core.reports(),
            unroutable_packets: self.core.unroutable_packets,
            tun_write_errors: self.tun_write_errors,
            cpu_time: sys::thread_cpu_time().saturating_sub(cpu_start),
            wall_time: self.now(),
            events_error: self.events_error.take(),
            hop_compensation: self.shared.snapshot(),
            calibration_probes: self.calibration_probes,
            tapped_arrivals: self.arrivals.iter().map(|a| a.matched).sum(),
            untapped_arrivals: self.arrivals.iter().map(|a| a.unmatched).sum(),
            mean_tun_wait: {
                let n: u64 = self.arrivals.iter().map(|a| a.matched).sum();
                self.tun_wait_total / n.max(1) as u32
            },
        })
    }

    /// Reads up to [`READ_BATCH`] packets from one side into the links.
    fn read_all(&mut self, from: Side) -> io::Result<()> {
        let fd = match from {
            Side::Client => self.client_tun.as_raw_fd(),
            Side::Server => self.server_tun.as_raw_fd(),
        };
        for _ in 0..READ_BATCH {
            if self.arena.capacity() - self.arena.len() < MAX_PACKET {
                // Reuses the old allocation when every packet cut from it is gone.
                self.arena.reserve(ARENA_BYTES);
            }
            let Some(len) = sys::read_nonblocking(fd, self.arena.spare_capacity_mut())? else {
                break;
            };
            // SAFETY: the kernel initialised `len` bytes of the spare capacity.
            unsafe { self.arena.set_len(len) };
            let packet: Bytes = self.arena.split().freeze();
            if len == 0 {
                continue;
            }
            let read_at = self.now();
            let tapped = self.tapped_arrival(from, &packet)?;
            if let Some(t) = tapped {
                self.tun_wait_total += read_at.saturating_sub(t);
            }
            if calibrate::is_calibration(&packet) {
                self.answer_probe(from, &packet, tapped);
                continue;
            }
            let at = match tapped {
                Some(t) if self.compensate => t.min(read_at),
                _ => read_at,
            };
            match from {
                Side::Client => self.core.from_client(at, packet),
                Side::Server => self.core.from_server(at, packet),
            }
        }
        Ok(())
    }

    /// When `packet`, just read from side `from`, was handed to its TUN device
    /// (relay clock), from the transmit tap; `None` if its copy is missing.
    fn tapped_arrival(&mut self, from: Side, packet: &[u8]) -> io::Result<Option<Duration>> {
        let i = side_index(from);
        if let Some(t) = self.arrivals[i].arrival(packet) {
            return Ok(Some(t));
        }
        // Its copy is not read yet: take everything the tap holds.
        let mut head = [0u8; sys::TAP_SNAPLEN];
        // Tap stamps are CLOCK_REALTIME; the relay's clock is monotonic.
        let realtime_ahead = sys::realtime_now().saturating_sub(sys::monotonic_now());
        while let Some((n, stamp)) = sys::recv_tapped(self.taps[i].as_raw_fd(), &mut head)? {
            let at = stamp.saturating_sub(realtime_ahead).saturating_sub(self.epoch);
            self.arrivals[i].tapped(&head[..n], at);
        }
        let found = self.arrivals[i].arrival(packet);
        if found.is_none() {
            self.arrivals[i].miss();
        }
        Ok(found)
    }

    /// Takes a calibration probe's samples (its send path, from its send time
    /// to its tapped time; its calibrator's last out-sample) and schedules its
    /// answer.
    fn answer_probe(&mut self, from: Side, packet: &[u8], tapped: Option<Duration>) {
        let Some(probe) = calibrate::parse_probe(packet) else {
            self.core.unroutable_packets += 1;
            return;
        };
        self.calibration_probes += 1;
        let i = side_index(from);
        if let Some(t) = tapped {
            self.send_path[i].add(t.saturating_sub(probe.sent));
        }
        if let Some(out) = probe.out_sample {
            self.out[i].add(out);
        }
        self.update_compensation();
        let due = self.now() + calibrate::ANSWER_DELAY;
        if let Some(a) = calibrate::answer(packet, probe.seq) {
            self.answers.push_back((due, from, a));
        }
    }

    /// Publishes the compensation of each side: packets towards it are written
    /// early by the minimum recent cost of writing them and waking their reader
    /// there, less [`calibrate::SAFETY_MARGIN`]. The sender's own path (its
    /// `send` call to the TUN device) is measured and reported but not taken
    /// off: an application's UDP send was seen to beat the calibrator's
    /// raw-socket minimum, which made probes early (docs/emu.md "Delay bias").
    fn update_compensation(&mut self) {
        for side in [Side::Client, Side::Server] {
            let i = side_index(side);
            if let Some(send) = self.send_path[i].value() {
                self.shared.send_ns[i].store(send.as_nanos() as u64, Ordering::Relaxed);
            }
            let Some(out) = self.out[i].value() else { continue };
            let lead = out.saturating_sub(calibrate::SAFETY_MARGIN);
            self.shared.out_ns[i].store(lead.as_nanos() as u64, Ordering::Relaxed);
            if self.compensate {
                self.core.set_delivery_lead(side, lead);
            }
        }
    }

    /// Writes the calibration answers that are due, each stamped with the
    /// moment its write starts.
    fn write_answers(&mut self) {
        while self.answers.front().is_some_and(|(due, _, _)| *due <= self.now()) {
            let Some((_, side, mut answer)) = self.answers.pop_front() else {
                break;
            };
            let fd = match side {
                Side::Client => self.client_tun.as_raw_fd(),
                Side::Server => self.server_tun.as_raw_fd(),
            };
            calibrate::stamp_answer(&mut answer, self.now());
            if sys::write_packet(fd, &answer).is_err() {
                self.tun_write_errors += 1;
            }
        }
    }

    /// Runs the links that are due and writes what leaves them.
    fn service(&mut self) {
        let now = self.now();
        let (client, server): (RawFd, RawFd) = (self.client_tun.as_raw_fd(), self.server_tun.as_raw_fd());
        let errors = &mut self.tun_write_errors;
        self.core.poll(now, &mut |side, p| {
            let fd = match side {
                Side::Client => client,
                Side::Server => server,
            };
            if sys::write_packet(fd, &p).is_err() {
                *errors += 1;
            }
        });
        self.write_answers();
    }

    fn write_events(&mut self) {
        if self.events.is_none() {
            return;
        }
        let mut pending = std::mem::take(&mut self.pending);
        self.core.drain_events(&mut |k, e| pending.push((k, *e)));
        if let Some(w) = &mut self.events {
            let links = &self.core.plan().links;
            let mut result = Ok(());
            for (k, e) in &pending {
                let dir = links.get(*k).map_or("?", |l| l.dir.as_str());
                let label = self.labels.get(*k).map_or("\"?\"", String::as_str);
                result = write_event(w, label, dir, e);
                if result.is_err() {
                    break;
                }
            }
            if let Err(e) = result {
                self.events_error = Some(e.to_string());
                self.events = None;
            }
        }
        pending.clear();
        self.pending = pending;
    }
}

/// One JSON line of the event log (format in docs/emu.md); `label` is already JSON.
fn write_event(w: &mut impl Write, label: &str, dir: &str, e: &PacketEvent) -> io::Result<()> {
    write!(
        w,
        "{{\"t_us\":{},\"link\":{label},\"dir\":\"{dir}\",\"seq\":{},\"len\":{}",
        e.at.as_micros(),
        e.seq,
        e.len_bytes
    )?;
    match e.kind {
        EventKind::Enqueue => writeln!(w, ",\"event\":\"enqueue\"}}"),
        EventKind::Drop(r) => writeln!(w, ",\"event\":\"drop\",\"reason\":\"{}\"}}", reason_name(r)),
        EventKind::Deliver { departed_at } => {
            writeln!(
                w,
                ",\"event\":\"deliver\",\"departed_us\":{}}}",
                departed_at.as_micros()
            )
        }
    }
}
