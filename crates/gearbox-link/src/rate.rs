//! Stage 3b: the link rate — the server that drains the queue.
//!
//! Two modes:
//! - **Constant**: a packet of `n` bytes occupies the link for `8n / rate_bps`
//!   seconds (serialization). The sub-nanosecond remainder of each division is
//!   carried into the next packet so that a long run delivers exactly the
//!   configured rate, not a rate biased by rounding.
//! - **Trace**: mahimahi semantics exactly (`mm-link`'s `LinkQueue`). Each trace
//!   line is one opportunity to deliver 1500 bytes at that millisecond after the
//!   trace's start. Accounting is by byte: an opportunity may finish one packet
//!   and start the next; a packet leaves when its last byte is delivered, at
//!   the time of that opportunity. An opportunity that finds nothing to send is
//!   lost, as is the unused rest of one that empties the queue (capacity is
//!   never banked). The trace repeats with period = its last timestamp.
//!
//! Like mahimahi, opportunities at time `t` are used *before* a packet that
//! arrives at exactly `t` is queued: the link always catches up to `now` before
//! accepting a packet. A packet is taken out of the queue (the moment CoDel
//! measures its sojourn) when its first byte is sent.
//!
//! The server is lazy: nothing happens between calls, and a call to
//! [`Server::advance`] replays, in time order, every departure up to `now`.
//! Idle stretches of a trace are skipped by arithmetic, not by iterating
//! opportunities, so an idle emulator costs nothing.

use std::sync::Arc;
use std::time::Duration;

use crate::queue::{DropSink, PacketQueue, Queue, QueuedPacket};
use crate::trace::{Trace, OPPORTUNITY_BYTES};

const NS_PER_MS: u64 = 1_000_000;
const NS_PER_S: u128 = 1_000_000_000;

/// What limits the link's rate.
#[derive(Debug, Clone, PartialEq)]
pub enum Rate {
    /// A constant rate in bits per second (> 0).
    Constant {
        /// Bits per second.
        rate_bps: u64,
    },
    /// A mahimahi trace, started at the moment this rate takes effect.
    Trace(Arc<Trace>),
}

impl Rate {
    /// Mean rate, bits per second (a trace's mean over one period).
    pub fn mean_rate_bps(&self) -> f64 {
        match self {
            Rate::Constant { rate_bps } => *rate_bps as f64,
            Rate::Trace(t) => t.mean_rate_bps(),
        }
    }
}

#[derive(Debug)]
enum Mode {
    Constant {
        rate_bps: u64,
        /// Remainder of `bits * 1e9 / rate_bps`, carried to the next packet.
        carry: u128,
    },
    Trace {
        trace: Arc<Trace>,
        /// When trace time 0 happened.
        base: Duration,
        /// Repetition of the trace the cursor is in.
        cycle: u64,
        /// Index of the next unused opportunity within the trace.
        idx: usize,
    },
}

#[derive(Debug)]
struct InTransit<P> {
    packet: QueuedPacket<P>,
    /// Constant mode: when the last bit leaves.
    finish: Duration,
    /// Trace mode: bytes not yet delivered.
    remaining_bytes: usize,
}

/// The rate stage.
#[derive(Debug)]
pub struct Server<P> {
    mode: Mode,
    in_transit: Option<InTransit<P>>,
}

impl<P> Server<P> {
    /// A server running `rate` from time `start` (a trace's time 0 is `start`).
    pub fn new(rate: &Rate, start: Duration) -> Self {
        Server {
            mode: Self::mode_for(rate, start),
            in_transit: None,
        }
    }

    fn mode_for(rate: &Rate, start: Duration) -> Mode {
        match rate {
            Rate::Constant { rate_bps } => Mode::Constant {
                rate_bps: (*rate_bps).max(1),
                carry: 0,
            },
            Rate::Trace(trace) => Mode::Trace {
                trace: trace.clone(),
                base: start,
                cycle: 0,
                idx: 0,
            },
        }
    }

    /// Switches to `rate` at time `at` (which the caller has advanced to). A
    /// packet being transmitted keeps the bytes already sent and sends the rest
    /// at the new rate; a new trace starts at its time 0 at `at`.
    pub fn set_rate(&mut self, at: Duration, rate: &Rate) {
        // Bytes of the packet in transit not yet sent, under the old mode.
        let remaining_bytes = self.in_transit.as_ref().map(|it| match &self.mode {
            Mode::Constant { rate_bps, .. } => {
                let left_ns = it.finish.saturating_sub(at).as_nanos();
                (left_ns * u128::from(*rate_bps)).div_ceil(8 * NS_PER_S) as usize
            }
            Mode::Trace { .. } => it.remaining_bytes,
        });
        self.mode = Self::mode_for(rate, at);
        if let (Some(it), Some(bytes)) = (self.in_transit.as_mut(), remaining_bytes) {
            it.remaining_bytes = bytes;
            if let Mode::Constant { rate_bps, carry } = &mut self.mode {
                it.finish = at.saturating_add(serialization(bytes, *rate_bps, carry));
            }
        }
    }

    /// True while a packet is partly transmitted.
    pub fn busy(&self) -> bool {
        self.in_transit.is_some()
    }

    /// Starts transmitting the head of the queue if the server is idle; the
    /// link calls this right after queueing a packet at `now`.
    pub fn kick(&mut self, now: Duration, queue: &mut Queue<P>, drops: &mut DropSink<'_, P>) {
        if self.in_transit.is_none() {
            if let Mode::Constant { .. } = self.mode {
                self.start_constant(now, queue, drops);
            }
        }
    }

    fn start_constant(&mut self, t: Duration, queue: &mut Queue<P>, drops: &mut DropSink<'_, P>) {
        if let Mode::Constant { rate_bps, carry } = &mut self.mode {
            if let Some(packet) = queue.dequeue(t, drops) {
                let finish = t.saturating_add(serialization(packet.len_bytes, *rate_bps, carry));
                self.in_transit = Some(InTransit {
                    packet,
                    finish,
                    remaining_bytes: 0,
                });
            }
        }
    }

    /// Replays every departure with time <= `now`, calling `out(departure_time, packet)`
    /// in departure order.
    pub fn advance(
        &mut self,
        now: Duration,
        queue: &mut Queue<P>,
        drops: &mut DropSink<'_, P>,
        out: &mut dyn FnMut(Duration, QueuedPacket<P>),
    ) {
        match self.mode {
            Mode::Constant { .. } => {
                while let Some(it) = &self.in_transit {
                    if it.finish > now {
                        break;
                    }
                    let finish = it.finish;
                    if let Some(done) = self.in_transit.take() {
                        out(finish, done.packet);
                    }
                    // Back-to-back: the next packet starts when this one ends.
                    self.start_constant(finish, queue, drops);
                }
            }
            Mode::Trace { .. } => self.advance_trace(now, queue, drops, out),
        }
    }

    fn advance_trace(
        &mut self,
        now: Duration,
        queue: &mut Queue<P>,
        drops: &mut DropSink<'_, P>,
        out: &mut dyn FnMut(Duration, QueuedPacket<P>),
    ) {
        let Mode::Trace {
            trace,
            base,
            cycle,
            idx,
        } = &mut self.mode
        else {
            return;
        };
        let ts = trace.timestamps_ms();
        let period = trace.period_ms();
        loop {
            let t = opportunity_time(*base, *cycle, period, ts[*idx]);
            if t > now {
                return;
            }
            if self.in_transit.is_none() && queue.is_empty() {
                // Nothing to send: every opportunity up to `now` is wasted.
                skip_past(now, *base, period, ts, cycle, idx);
                return;
            }
            let mut budget = OPPORTUNITY_BYTES;
            while budget > 0 {
                if self.in_transit.is_none() {
                    match queue.dequeue(t, drops) {
                        Some(packet) => {
                            let remaining_bytes = packet.len_bytes;
                            self.in_transit = Some(InTransit {
                                packet,
                                finish: t,
                                remaining_bytes,
                            });
                        }
                        None => break,
                    }
                }
                if let Some(it) = self.in_transit.as_mut() {
                    let sent = budget.min(it.remaining_bytes);
                    it.remaining_bytes -= sent;
                    budget -= sent;
                    if it.remaining_bytes == 0 {
                        if let Some(done) = self.in_transit.take() {
                            out(t, done.packet);
                        }
                    }
                }
            }
            *idx += 1;
            if *idx == ts.len() {
                *idx = 0;
                *cycle += 1;
            }
        }
    }

    /// When the server next has something to do, given whether the queue is empty.
    pub fn next_event(&self, queue_empty: bool) -> Option<Duration> {
        match &self.mode {
            Mode::Constant { .. } => self.in_transit.as_ref().map(|it| it.finish),
            Mode::Trace {
                trace,
                base,
                cycle,
                idx,
            } => {
                if self.in_transit.is_none() && queue_empty {
                    return None;
                }
                Some(opportunity_time(
                    *base,
                    *cycle,
                    trace.period_ms(),
                    trace.timestamps_ms()[*idx],
                ))
            }
        }
    }
}

/// Time to serialize `bytes` at `rate_bps`, carrying the division remainder.
#[inline]
fn serialization(bytes: usize, rate_bps: u64, carry: &mut u128) -> Duration {
    let num = bytes as u128 * 8 * NS_PER_S + *carry;
    let rate = u128::from(rate_bps.max(1));
    *carry = num % rate;
    Duration::from_nanos(u64::try_from(num / rate).unwrap_or(u64::MAX))
}

#[inline]
fn opportunity_time(base: Duration, cycle: u64, period_ms: u64, ts_ms: u64) -> Duration {
    let ms = cycle.saturating_mul(period_ms).saturating_add(ts_ms);
    base.saturating_add(Duration::from_nanos(ms.saturating_mul(NS_PER_MS)))
}

/// Moves the cursor to the first opportunity strictly after `now`.
fn skip_past(now: Duration, base: Duration, period: u64, ts: &[u64], cycle: &mut u64, idx: &mut usize) {
    let since_ns = now.saturating_sub(base).as_nanos();
    // First whole millisecond (from base) whose opportunities lie after `now`.
    let target = u64::try_from(since_ns / u128::from(NS_PER_MS)).unwrap_or(u64::MAX / 2) + 1;
    let (c, r) = (target / period, target % period);
    if r == 0 {
        // Time `target` is both the end of cycle c-1 (lines equal to the
        // period) and the start of cycle c (lines equal to 0); the former come first.
        *cycle = c - 1;
        *idx = ts.partition_point(|&x| x < period);
    } else {
        *cycle = c;
        *idx = ts.partition_point(|&x| x < r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::{DropTail, QueueLimits};

    fn q() -> Queue<u64> {
        Queue::DropTail(DropTail::new(QueueLimits::default()))
    }

    fn put(queue: &mut Queue<u64>, seq: u64, len: usize, at: Duration) {
        queue
            .enqueue(
                at,
                QueuedPacket {
                    packet: seq,
                    len_bytes: len,
                    seq,
                    enqueued_at: at,
                },
                &mut |_, _, _| {},
            )
            .unwrap();
    }

    fn run(server: &mut Server<u64>, queue: &mut Queue<u64>, now: Duration) -> Vec<(u64, Duration)> {
        let mut out = Vec::new();
        server.advance(now, queue, &mut |_, _, _| {}, &mut |t, p| out.push((p.seq, t)));
        out
    }

    #[test]
    fn constant_rate_serializes_back_to_back() {
        let mut queue = q();
        let mut s = Server::new(&Rate::Constant { rate_bps: 12_000_000 }, Duration::ZERO);
        for i in 0..3 {
            put(&mut queue, i, 1500, Duration::ZERO);
        }
        s.kick(Duration::ZERO, &mut queue, &mut |_, _, _| {});
        let out = run(&mut s, &mut queue, Duration::from_secs(1));
        let ms = Duration::from_millis;
        assert_eq!(out, vec![(0, ms(1)), (1, ms(2)), (2, ms(3))]);
    }

    #[test]
    fn trace_opportunities_deliver_parts_of_packets() {
        // Opportunities at 1, 1, 2 ms: 3000 bytes in ms 1, 1500 in ms 2.
        let trace = Arc::new(Trace::parse("1\n1\n2\n", "t").unwrap());
        let mut queue = q();
        let mut s = Server::new(&Rate::Trace(trace), Duration::ZERO);
        put(&mut queue, 0, 1000, Duration::ZERO);
        put(&mut queue, 1, 1000, Duration::ZERO);
        put(&mut queue, 2, 2000, Duration::ZERO);
        let out = run(&mut s, &mut queue, Duration::from_millis(2));
        let ms = Duration::from_millis;
        // ms 1: 1000 + 1000 + 1000 of the third; ms 2: its last 1000.
        assert_eq!(out, vec![(0, ms(1)), (1, ms(1)), (2, ms(2))]);
    }

    #[test]
    fn idle_trace_wastes_opportunities_and_repeats() {
        // One opportunity at 2, 2 and 5 ms; period 5 ms. Times: 2,2,5 | 7,7,10 | ...
        let trace = Arc::new(Trace::parse("2\n2\n5\n", "t").unwrap());
        let mut queue = q();
        let mut s = Server::new(&Rate::Trace(trace), Duration::ZERO);
        // Idle until 7 ms exactly: opportunities at 7 are consumed before the packet arrives.
        assert!(run(&mut s, &mut queue, Duration::from_millis(7)).is_empty());
        put(&mut queue, 0, 1500, Duration::from_millis(7));
        assert_eq!(s.next_event(false), Some(Duration::from_millis(10)));
        assert_eq!(
            run(&mut s, &mut queue, Duration::from_secs(1)),
            vec![(0, Duration::from_millis(10))]
        );
        // Arriving just before a period boundary, it uses the end-of-cycle line first.
        let mut queue = q();
        let trace = Arc::new(Trace::parse("0\n5\n", "t").unwrap());
        let mut s = Server::new(&Rate::Trace(trace), Duration::ZERO);
        assert!(run(&mut s, &mut queue, Duration::from_micros(9_500)).is_empty());
        put(&mut queue, 0, 1500, Duration::from_micros(9_500));
        put(&mut queue, 1, 1500, Duration::from_micros(9_500));
        put(&mut queue, 2, 1500, Duration::from_micros(9_500));
        let ms = Duration::from_millis;
        assert_eq!(
            run(&mut s, &mut queue, ms(100)),
            vec![(0, ms(10)), (1, ms(10)), (2, ms(15))]
        );
    }

    #[test]
    fn rate_change_mid_packet_sends_the_rest_at_the_new_rate() {
        let mut queue = q();
        let mut s = Server::new(&Rate::Constant { rate_bps: 12_000_000 }, Duration::ZERO);
        put(&mut queue, 0, 1500, Duration::ZERO);
        s.kick(Duration::ZERO, &mut queue, &mut |_, _, _| {});
        let half = Duration::from_micros(500);
        assert!(run(&mut s, &mut queue, half).is_empty());
        s.set_rate(half, &Rate::Constant { rate_bps: 6_000_000 });
        // 750 bytes left at 6 Mbit/s = 1 ms.
        assert_eq!(
            run(&mut s, &mut queue, Duration::from_secs(1)),
            vec![(0, Duration::from_micros(1500))]
        );
    }
}
