//! Exact arrival times: when each packet entered the relay's TUN queue, from the
//! kernel's own timestamp, instead of when the relay got round to reading it.
//!
//! A packet a namespace sends waits in the TUN queue until the relay thread
//! wakes up and reads it (a cross-CPU wake-up in a VM: anywhere from a few to a
//! hundred microseconds, docs/emu.md "Delay bias"). Stamping it with the read
//! time adds that wait to its delay. The relay therefore keeps a packet socket
//! on each TUN device (`sys::open_transmit_tap`) that receives the first bytes
//! of every packet the namespace transmits, timestamped by the kernel as the
//! device is handed the packet. [`ArrivalTimes`] pairs each packet read from
//! the TUN device with its tapped copy (same order, same bytes) and returns
//! the kernel's time.
//!
//! Matching by content rather than by count: the TUN device may drop a packet
//! after the tap saw it (queue full), and two CPUs may enqueue in a different
//! order than they were tapped; an unmatched tap entry is skipped, and a packet
//! whose copy cannot be found falls back to the caller's estimate.
//!
//! Rejected: an eBPF filter on the TUN device recording `bpf_ktime_get_ns` per
//! packet (exact too, but a BPF toolchain in the emulator's build for what a
//! classic socket filter and `SO_TIMESTAMPNS` already give).

use std::collections::VecDeque;
use std::time::Duration;

use crate::sys::TAP_SNAPLEN;

/// Tapped packets kept waiting for their TUN read; more means the tap and the
/// device have lost step, and the oldest are dropped.
const MAX_PENDING: usize = 4096;

/// A tapped packet: its first bytes and when the kernel saw it (relay clock).
#[derive(Clone)]
struct Tapped {
    head: [u8; TAP_SNAPLEN],
    len: usize,
    at: Duration,
}

/// The tapped packets of one TUN device, waiting to be paired with reads.
#[derive(Default)]
pub struct ArrivalTimes {
    pending: VecDeque<Tapped>,
    /// Reads paired with a tapped copy.
    pub matched: u64,
    /// Reads with no tapped copy (stamped by the caller's estimate).
    pub unmatched: u64,
}

impl ArrivalTimes {
    /// Records a tapped packet (`head` = its first bytes) seen at `at`.
    pub fn tapped(&mut self, head: &[u8], at: Duration) {
        if self.pending.len() == MAX_PENDING {
            self.pending.pop_front();
        }
        let mut t = Tapped {
            head: [0; TAP_SNAPLEN],
            len: head.len().min(TAP_SNAPLEN),
            at,
        };
        t.head[..t.len].copy_from_slice(&head[..t.len]);
        self.pending.push_back(t);
    }

    /// When `packet`, just read from the device, was handed to it; `None` if
    /// its tapped copy is not (yet) here. Tapped entries before the match are
    /// packets the device never delivered and are dropped.
    pub fn arrival(&mut self, packet: &[u8]) -> Option<Duration> {
        let n = packet.len().min(TAP_SNAPLEN);
        let i = self
            .pending
            .iter()
            .position(|t| t.len == n && t.head[..n] == packet[..n]);
        match i {
            Some(i) => {
                let at = self.pending[i].at;
                self.pending.drain(..=i);
                self.matched += 1;
                Some(at)
            }
            None => None,
        }
    }

    /// Counts a read that found no copy even after the tap was drained.
    pub fn miss(&mut self) {
        self.unmatched += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn each_read_gets_the_time_its_copy_was_tapped() {
        let mut a = ArrivalTimes::default();
        a.tapped(b"first packet", us(10));
        a.tapped(b"second packet", us(20));
        assert_eq!(a.arrival(b"first packet"), Some(us(10)));
        assert_eq!(a.arrival(b"second packet"), Some(us(20)));
        assert_eq!(a.arrival(b"second packet"), None, "each copy pairs once");
        assert_eq!(a.matched, 2);
    }

    #[test]
    fn a_copy_the_device_never_delivered_is_skipped() {
        let mut a = ArrivalTimes::default();
        a.tapped(b"dropped by the device", us(5));
        a.tapped(b"delivered", us(6));
        assert_eq!(a.arrival(b"delivered"), Some(us(6)));
        assert!(a.pending.is_empty(), "the dropped packet's copy is gone too");
    }

    #[test]
    fn only_the_first_bytes_are_compared() {
        let mut a = ArrivalTimes::default();
        let long = [7u8; 1500];
        a.tapped(&long[..TAP_SNAPLEN], us(3));
        assert_eq!(a.arrival(&long), Some(us(3)));
        let short = [1u8; 40];
        a.tapped(&short, us(4));
        assert_eq!(a.arrival(&[1u8; 41]), None, "a longer packet is another packet");
    }

    #[test]
    fn the_waiting_list_is_bounded() {
        let mut a = ArrivalTimes::default();
        for i in 0..MAX_PENDING as u64 + 10 {
            a.tapped(&i.to_be_bytes(), us(i));
        }
        assert_eq!(a.pending.len(), MAX_PENDING);
        assert_eq!(a.arrival(&5u64.to_be_bytes()), None, "the oldest were dropped");
        assert_eq!(a.arrival(&20u64.to_be_bytes()), Some(us(20)));
    }
}
