//! Delivery compensation: packets leaving the relay towards a namespace are
//! written early by the measured cost of writing them and waking their reader,
//! so an application sees the delay it configured rather than the delay plus
//! the emulator's plumbing.
//!
//! A one-way trip through the relay costs two things a real link does not
//! (measured on a 2-core VM, docs/emu.md "Delay bias"):
//! - **in**: the packet waits in the TUN queue until the relay thread wakes and
//!   reads it (a cross-CPU wake-up, a few to a hundred microseconds). That one
//!   is removed exactly: `crate::arrival` stamps each packet with the kernel's
//!   time of its transmission.
//! - **out**: the relay's `write()` runs the receiving namespace's IP and
//!   transport input in its own context (~40 µs), then the receiver must be
//!   woken (another ~20-60 µs). Nothing timestamps that, so it is measured here.
//!
//! A calibrator thread per namespace sends a small probe (IP protocol
//! [`PROTOCOL`], the RFC 3692 experimental number, on a raw socket, so it takes
//! no UDP or TCP port and no server-ready check sees it) every [`PERIOD`]. The
//! relay takes probes off the wire before routing and answers each after
//! [`ANSWER_DELAY`], stamping the answer with the moment it starts writing it;
//! the calibrator's receive time minus that stamp is one sample of **out**,
//! carried back in its next probe.
//!
//! The compensation is a lower bound of those samples ([`LowEstimate`], the
//! minimum of the recent ones), never a typical value: the requirement is that
//! no packet is early, so what remains is the spread of the out cost.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::sys;

/// IP protocol number of calibration probes (RFC 3692: for experimentation).
pub const PROTOCOL: u8 = 253;
/// First bytes of a probe's and an answer's payload.
const MAGIC: [u8; 4] = *b"GBXC";
/// Payload: magic, sequence number, a timestamp (ns on the relay's clock), and
/// in a probe the calibrator's last out-sample (ns, 0 = none).
const PAYLOAD_LEN: usize = 4 + 4 + 8 + 8;
/// IPv4 header without options.
const IP_HEADER: usize = 20;
/// Time between probes from each namespace once calibrated.
pub const PERIOD: Duration = Duration::from_millis(20);
/// How long the relay holds its answer to a probe. A reader woken straight
/// after it went to sleep is woken faster (its CPU has not gone idle yet) than
/// one that has waited out a link's delay, which is the case to measure.
pub const ANSWER_DELAY: Duration = Duration::from_millis(10);
/// No compensation is ever larger than this: a sample beyond it is a
/// scheduling accident (the machine stalled), not a property of the hop.
const MAX_COMPENSATION: Duration = Duration::from_millis(1);
/// Taken off the measured out-minimum before it is used: over about 3 000
/// probes in 20 test runs an application's reader was woken up to 15 µs sooner
/// than the calibrator's fastest wake-up in the same window, which made a few
/// round trips 5 µs early.
pub const SAFETY_MARGIN: Duration = Duration::from_micros(15);
/// SCHED_FIFO priority of the calibrator threads: below the relay's, and as
/// prompt as any receiver, so its wake-ups are a lower bound of theirs.
const PRIORITY: i32 = 5;

/// A decoded calibration probe (from a calibrator to the relay).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// The calibrator's sequence number.
    pub seq: u32,
    /// When the calibrator called `send` (relay clock).
    pub sent: Duration,
    /// The calibrator's latest out-sample (relay write start to its receive).
    pub out_sample: Option<Duration>,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// True for an IPv4 packet of protocol [`PROTOCOL`]: the relay's to take.
pub fn is_calibration(packet: &[u8]) -> bool {
    packet.first().is_some_and(|b| b >> 4 == 4) && packet.get(9) == Some(&PROTOCOL)
}

/// The IPv4 header length of `packet` (IHL x 4), if it is sane.
fn header_len(packet: &[u8]) -> Option<usize> {
    let ihl = usize::from(packet.first()? & 0x0f) * 4;
    (ihl >= IP_HEADER && packet.len() >= ihl).then_some(ihl)
}

/// Decodes a probe sent by a calibrator; `None` if it is not one.
pub fn parse_probe(packet: &[u8]) -> Option<Probe> {
    if !is_calibration(packet) {
        return None;
    }
    let body = packet.get(header_len(packet)?..)?;
    if body.len() < PAYLOAD_LEN || body[..4] != MAGIC {
        return None;
    }
    let out = u64_at(body, 16)?;
    Some(Probe {
        seq: u32_at(body, 4)?,
        sent: Duration::from_nanos(u64_at(body, 8)?),
        out_sample: (out > 0).then(|| Duration::from_nanos(out)),
    })
}

/// Internet checksum (RFC 1071) of an IPv4 header.
fn ip_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The relay's answer to `probe` (an IPv4 packet back to its sender), to be
/// stamped with [`stamp_answer`] the moment the relay starts writing it.
pub fn answer(probe: &[u8], seq: u32) -> Option<Vec<u8>> {
    let src: [u8; 4] = probe.get(12..16)?.try_into().ok()?;
    let dst: [u8; 4] = probe.get(16..20)?.try_into().ok()?;
    let mut p = vec![0u8; IP_HEADER + PAYLOAD_LEN];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&((IP_HEADER + PAYLOAD_LEN) as u16).to_be_bytes());
    p[8] = 64;
    p[9] = PROTOCOL;
    p[12..16].copy_from_slice(&dst);
    p[16..20].copy_from_slice(&src);
    let sum = ip_checksum(&p[..IP_HEADER]);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p[20..24].copy_from_slice(&MAGIC);
    p[24..28].copy_from_slice(&seq.to_be_bytes());
    Some(p)
}

/// Puts the moment its write starts (`written_at`, relay clock) into an [`answer`].
pub fn stamp_answer(answer: &mut [u8], written_at: Duration) {
    if let Some(t) = answer.get_mut(28..36) {
        t.copy_from_slice(&(written_at.as_nanos() as u64).to_be_bytes());
    }
}

/// A lower bound of a stream of latency samples: the minimum of the last
/// [`WINDOW`] samples (about the 1st percentile of the stream, over the last
/// ~1.3 s at one probe per [`PERIOD`]).
///
/// A minimum rather than a typical value, because the compensation must never
/// make a packet early: what a packet really spends is at least this, and what
/// is left over is the spread of the hop's cost. A sliding window rather than
/// the minimum of all time, so it follows the machine from idle to busy and
/// back (a busy machine wakes its threads sooner: its CPUs do not go idle).
/// Samples above [`MAX_COMPENSATION`] are ignored.
#[derive(Debug, Clone, Copy)]
pub struct LowEstimate {
    window: [Duration; WINDOW],
    /// Samples dropped so far (the first [`WARMUP`]).
    dropped: u32,
    /// Samples taken so far (the next one goes to `window[samples % WINDOW]`).
    samples: u64,
}

/// Samples a [`LowEstimate`] takes its minimum over.
const WINDOW: usize = 64;
/// Samples before a [`LowEstimate`] has a value.
const FIRST_ESTIMATE: u64 = 12;
/// The first samples of each estimate are dropped: threads and sockets that
/// have just started pay page faults and cache misses once.
const WARMUP: u32 = 4;

impl Default for LowEstimate {
    fn default() -> Self {
        LowEstimate {
            window: [Duration::ZERO; WINDOW],
            dropped: 0,
            samples: 0,
        }
    }
}

impl LowEstimate {
    /// Adds one sample.
    pub fn add(&mut self, sample: Duration) {
        if sample > MAX_COMPENSATION {
            return;
        }
        if self.dropped < WARMUP {
            self.dropped += 1;
            return;
        }
        self.window[(self.samples % WINDOW as u64) as usize] = sample;
        self.samples += 1;
    }

    /// The estimate; `None` until [`FIRST_ESTIMATE`] samples have been taken.
    pub fn value(&self) -> Option<Duration> {
        if self.samples < FIRST_ESTIMATE {
            return None;
        }
        let n = (self.samples as usize).min(WINDOW);
        self.window[..n].iter().min().copied()
    }

    /// Samples taken so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }
}

/// The compensation in force, shared between the relay (which writes it) and
/// whoever reports it (ns; 0 until calibrated).
#[derive(Debug, Default)]
pub struct Shared {
    /// Write and reader wake-up towards the client / server namespace.
    pub out_ns: [AtomicU64; 2],
    /// A sender's path to the TUN device in the client / server namespace.
    pub send_ns: [AtomicU64; 2],
}

/// A snapshot of [`Shared`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HopCompensation {
    /// How early packets towards the client namespace are written: the
    /// measured minimum of writing them and waking their reader, less
    /// [`SAFETY_MARGIN`].
    pub client_out: Duration,
    /// The same towards the server namespace.
    pub server_out: Duration,
    /// A sender's path in the client namespace, `send` to the TUN device
    /// (measured, reported, not compensated).
    pub client_send: Duration,
    /// A sender's path in the server namespace.
    pub server_send: Duration,
}

impl Shared {
    /// True once both directions have an estimate.
    pub fn calibrated(&self) -> bool {
        self.out_ns
            .iter()
            .chain(&self.send_ns)
            .all(|a| a.load(Ordering::Relaxed) > 0)
    }

    /// The values in force.
    pub fn snapshot(&self) -> HopCompensation {
        let d = |a: &AtomicU64| Duration::from_nanos(a.load(Ordering::Relaxed));
        HopCompensation {
            client_out: d(&self.out_ns[0]),
            server_out: d(&self.out_ns[1]),
            client_send: d(&self.send_ns[0]),
            server_send: d(&self.send_ns[1]),
        }
    }
}

/// The calibrator threads: one raw socket in each namespace, probing the relay.
pub struct Calibrator {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

/// One namespace's end: a raw socket of protocol [`PROTOCOL`] opened there,
/// and the address its probes are sent to (routed through the TUN device).
pub struct Endpoint {
    /// The socket (opened inside the namespace; usable from any thread).
    pub socket: socket2::Socket,
    /// Where probes go: an address on the other side of the relay.
    pub towards: Ipv4Addr,
}

/// Opens the raw socket of a calibrator end in the calling thread's namespace.
pub fn open_socket() -> std::io::Result<socket2::Socket> {
    socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::RAW,
        Some(socket2::Protocol::from(i32::from(PROTOCOL))),
    )
}

impl Calibrator {
    /// Starts probing from both ends; `epoch` is the relay's time zero.
    pub fn start(ends: Vec<Endpoint>, epoch: Duration) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for end in ends {
            end.socket.set_read_timeout(Some(PERIOD))?;
            let stop = stop.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("gearbox-emu-calibrator".into())
                    .spawn(move || probe_loop(&end, epoch, &stop))?,
            );
        }
        Ok(Calibrator { stop, threads })
    }
}

impl Drop for Calibrator {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn probe_loop(end: &Endpoint, epoch: Duration, stop: &AtomicBool) {
    if let Err(e) = sys::set_realtime(PRIORITY) {
        tracing::warn!("calibrator: cannot run under SCHED_FIFO ({e}); hop compensation will be smaller");
    }
    let clock = || sys::monotonic_now().saturating_sub(epoch);
    let to = socket2::SockAddr::from(std::net::SocketAddrV4::new(end.towards, 0));
    let mut out_sample = 0u64;
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 256];
    let mut seq = 0u32;
    while !stop.load(Ordering::Relaxed) {
        seq = seq.wrapping_add(1);
        let mut payload = [0u8; PAYLOAD_LEN];
        payload[..4].copy_from_slice(&MAGIC);
        payload[4..8].copy_from_slice(&seq.to_be_bytes());
        payload[16..24].copy_from_slice(&out_sample.to_be_bytes());
        let sent = clock();
        payload[8..16].copy_from_slice(&(sent.as_nanos() as u64).to_be_bytes());
        if let Err(e) = end.socket.send_to(&payload, &to) {
            tracing::warn!("calibrator: probe towards {} failed: {e}", end.towards);
            return;
        }
        // The answer, unless it was lost (a stopped relay) or is late.
        out_sample = 0;
        let deadline = sent + PERIOD;
        while clock() < deadline {
            let Ok(n) = end.socket.recv(&mut buf) else { break };
            let got = clock();
            // SAFETY: recv initialised the first n bytes.
            let bytes: Vec<u8> = buf[..n].iter().map(|b| unsafe { b.assume_init() }).collect();
            let body = header_len(&bytes).and_then(|h| bytes.get(h..));
            if let Some(b) = body.filter(|b| b.len() >= PAYLOAD_LEN && b[..4] == MAGIC) {
                if u32_at(b, 4) == Some(seq) {
                    let written = Duration::from_nanos(u64_at(b, 8).unwrap_or(0));
                    out_sample = got.saturating_sub(written).as_nanos() as u64;
                    break;
                }
            }
        }
        let next = sent + PERIOD;
        let now = clock();
        if next > now {
            std::thread::sleep(next - now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(seq: u32, sent_ns: u64, out_ns: u64) -> Vec<u8> {
        let mut p = vec![0u8; IP_HEADER + PAYLOAD_LEN];
        p[0] = 0x45;
        p[9] = PROTOCOL;
        p[12..16].copy_from_slice(&[100, 64, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 1]);
        p[20..24].copy_from_slice(&MAGIC);
        p[24..28].copy_from_slice(&seq.to_be_bytes());
        p[28..36].copy_from_slice(&sent_ns.to_be_bytes());
        p[36..44].copy_from_slice(&out_ns.to_be_bytes());
        p
    }

    #[test]
    fn a_probe_is_recognised_and_decoded() {
        let p = parse_probe(&probe(7, 1_500, 80_000)).unwrap();
        assert_eq!(p.seq, 7);
        assert_eq!(p.sent, Duration::from_nanos(1_500));
        assert_eq!(p.out_sample, Some(Duration::from_micros(80)));
        assert_eq!(parse_probe(&probe(1, 1, 0)).unwrap().out_sample, None);
    }

    #[test]
    fn other_packets_are_not_probes() {
        let mut udp = probe(1, 1, 1);
        udp[9] = 17;
        assert!(!is_calibration(&udp));
        assert_eq!(parse_probe(&udp), None);
        let mut wrong_magic = probe(1, 1, 1);
        wrong_magic[20] = b'X';
        assert!(is_calibration(&wrong_magic));
        assert_eq!(parse_probe(&wrong_magic), None);
        assert_eq!(parse_probe(&probe(1, 1, 1)[..30]), None, "truncated");
        assert!(!is_calibration(&[0x60; 40]), "IPv6");
    }

    #[test]
    fn an_answer_goes_back_to_the_sender_with_a_valid_header() {
        let mut a = answer(&probe(9, 0, 0), 9).unwrap();
        stamp_answer(&mut a, Duration::from_micros(42));
        assert_eq!(&a[12..16], &[10, 0, 0, 1]);
        assert_eq!(&a[16..20], &[100, 64, 0, 1]);
        assert_eq!(ip_checksum(&a[..IP_HEADER]), 0, "a correct header sums to zero");
        assert_eq!(u32_at(&a, 24), Some(9));
        assert_eq!(u64_at(&a, 28), Some(42_000));
    }

    #[test]
    fn the_low_estimate_is_the_minimum_of_the_recent_samples() {
        let mut e = LowEstimate::default();
        let us = Duration::from_micros;
        for _ in 0..WARMUP {
            e.add(us(1));
        }
        for s in [90, 80, 100, 70, 95, 85, 60, 91, 92, 93, 94] {
            e.add(us(s));
            assert_eq!(e.value(), None, "not before twelve samples");
        }
        e.add(us(99));
        assert_eq!(e.value(), Some(us(60)), "the warm-up samples do not count");
        for _ in 0..WINDOW - 1 {
            e.add(us(100));
        }
        assert_eq!(e.value(), Some(us(99)), "60 and 91-94 have left the window, 99 not yet");
        e.add(us(100));
        assert_eq!(e.value(), Some(us(100)));
        e.add(Duration::from_millis(50));
        assert_eq!(e.samples(), 12 + WINDOW as u64, "a stall is not a sample");
    }
}
