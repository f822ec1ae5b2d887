//! Stage 3a: the bottleneck queue and its discipline.
//!
//! Like mahimahi's `abstract_packet_queue` every discipline sits behind one tiny
//! interface, [`PacketQueue`]: enqueue, dequeue, is_empty, and the two sizes.
//! Drops a discipline decides on its own (drop-head evicting the oldest, CoDel
//! dropping at dequeue) are handed to a caller-provided sink so that the link can
//! count and log them without the queue allocating.
//!
//! Limits are in packets, in bytes, or both; the link derives a byte limit from
//! "a multiple of BDP" (Floo Table 4: buffer 0.3-1.5 BDP). No limit
//! means unbounded, as in mahimahi's default `infinite` queue.
//!
//! The disciplines are an enum rather than `Box<dyn PacketQueue>` so the hot
//! path is a predictable match instead of an indirect call per packet.

use std::collections::VecDeque;
use std::time::Duration;

use crate::DropReason;

/// A packet waiting in the link, with what the link knows about it.
#[derive(Debug, Clone)]
pub struct QueuedPacket<P> {
    /// The packet itself.
    pub packet: P,
    /// Its size in bytes (IP packet length).
    pub len_bytes: usize,
    /// Sequence number assigned by the link at arrival (for the event log).
    pub seq: u64,
    /// When it entered the queue (CoDel measures sojourn time from here).
    pub enqueued_at: Duration,
}

/// Occupancy limits of a queue. `None` means unbounded in that dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueLimits {
    /// Maximum number of packets.
    pub packets: Option<usize>,
    /// Maximum number of bytes.
    pub bytes: Option<usize>,
}

impl QueueLimits {
    fn fits(&self, packets: usize, bytes: usize) -> bool {
        self.packets.is_none_or(|l| packets <= l) && self.bytes.is_none_or(|l| bytes <= l)
    }
}

/// Where a discipline reports the packets it drops on its own: `(time, packet, reason)`.
pub type DropSink<'a, P> = dyn FnMut(Duration, QueuedPacket<P>, DropReason) + 'a;

/// The tiny interface every discipline implements.
pub trait PacketQueue<P> {
    /// Offers a packet at `now`. Returns `Err(packet)` if the packet itself is
    /// refused; packets already queued that the discipline evicts go to `drops`.
    #[allow(clippy::result_large_err)]
    fn enqueue(
        &mut self,
        now: Duration,
        packet: QueuedPacket<P>,
        drops: &mut DropSink<'_, P>,
    ) -> Result<(), (QueuedPacket<P>, DropReason)>;
    /// Takes the next packet to transmit at `now`, if any (CoDel may drop some first).
    fn dequeue(&mut self, now: Duration, drops: &mut DropSink<'_, P>) -> Option<QueuedPacket<P>>;
    /// True when nothing waits.
    fn is_empty(&self) -> bool;
    /// Packets waiting.
    fn len_packets(&self) -> usize;
    /// Bytes waiting.
    fn len_bytes(&self) -> usize;
}

/// A FIFO with byte accounting, shared by all disciplines.
#[derive(Debug)]
struct Fifo<P> {
    items: VecDeque<QueuedPacket<P>>,
    bytes: usize,
}

impl<P> Fifo<P> {
    fn new() -> Self {
        Fifo {
            items: VecDeque::with_capacity(1024),
            bytes: 0,
        }
    }
    fn push(&mut self, p: QueuedPacket<P>) {
        self.bytes += p.len_bytes;
        self.items.push_back(p);
    }
    fn pop(&mut self) -> Option<QueuedPacket<P>> {
        let p = self.items.pop_front()?;
        self.bytes -= p.len_bytes;
        Some(p)
    }
}

/// Drop-tail: a packet that would exceed a limit is refused.
#[derive(Debug)]
pub struct DropTail<P> {
    fifo: Fifo<P>,
    /// Occupancy limits.
    pub limits: QueueLimits,
}

impl<P> DropTail<P> {
    /// An empty drop-tail queue.
    pub fn new(limits: QueueLimits) -> Self {
        DropTail {
            fifo: Fifo::new(),
            limits,
        }
    }
}

impl<P> PacketQueue<P> for DropTail<P> {
    fn enqueue(
        &mut self,
        _now: Duration,
        packet: QueuedPacket<P>,
        _drops: &mut DropSink<'_, P>,
    ) -> Result<(), (QueuedPacket<P>, DropReason)> {
        if self
            .limits
            .fits(self.fifo.items.len() + 1, self.fifo.bytes + packet.len_bytes)
        {
            self.fifo.push(packet);
            Ok(())
        } else {
            Err((packet, DropReason::QueueFull))
        }
    }
    fn dequeue(&mut self, _now: Duration, _d: &mut DropSink<'_, P>) -> Option<QueuedPacket<P>> {
        self.fifo.pop()
    }
    fn is_empty(&self) -> bool {
        self.fifo.items.is_empty()
    }
    fn len_packets(&self) -> usize {
        self.fifo.items.len()
    }
    fn len_bytes(&self) -> usize {
        self.fifo.bytes
    }
}

/// Drop-head: on overflow the *oldest* packets are evicted to make room, which
/// gives a loss-based sender fresher congestion signals (mahimahi `drop_head`).
#[derive(Debug)]
pub struct DropHead<P> {
    fifo: Fifo<P>,
    /// Occupancy limits.
    pub limits: QueueLimits,
}

impl<P> DropHead<P> {
    /// An empty drop-head queue.
    pub fn new(limits: QueueLimits) -> Self {
        DropHead {
            fifo: Fifo::new(),
            limits,
        }
    }
}

impl<P> PacketQueue<P> for DropHead<P> {
    fn enqueue(
        &mut self,
        now: Duration,
        packet: QueuedPacket<P>,
        drops: &mut DropSink<'_, P>,
    ) -> Result<(), (QueuedPacket<P>, DropReason)> {
        // A packet that could not fit even into an empty queue is refused
        // rather than flushing everything for nothing.
        if !self.limits.fits(1, packet.len_bytes) {
            return Err((packet, DropReason::QueueFull));
        }
        while !self
            .limits
            .fits(self.fifo.items.len() + 1, self.fifo.bytes + packet.len_bytes)
        {
            match self.fifo.pop() {
                Some(old) => drops(now, old, DropReason::QueueHeadDrop),
                None => break,
            }
        }
        self.fifo.push(packet);
        Ok(())
    }
    fn dequeue(&mut self, _now: Duration, _d: &mut DropSink<'_, P>) -> Option<QueuedPacket<P>> {
        self.fifo.pop()
    }
    fn is_empty(&self) -> bool {
        self.fifo.items.is_empty()
    }
    fn len_packets(&self) -> usize {
        self.fifo.items.len()
    }
    fn len_bytes(&self) -> usize {
        self.fifo.bytes
    }
}

/// CoDel parameters (RFC 8289 §4.3-4.4 defaults: target 5 ms, interval 100 ms).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CodelParams {
    /// Acceptable standing queue delay (RFC 8289 `TARGET`).
    pub target: Duration,
    /// Window over which the sojourn must stay above target before dropping
    /// (RFC 8289 `INTERVAL`, on the order of a worst-case RTT).
    pub interval: Duration,
    /// A queue holding at most this many bytes is never "above target"
    /// (RFC 8289 `MAXPACKET`, one MTU) — one packet is not a standing queue.
    pub max_packet_bytes: usize,
}

impl Default for CodelParams {
    fn default() -> Self {
        CodelParams {
            target: Duration::from_millis(5),
            interval: Duration::from_millis(100),
            max_packet_bytes: 1500,
        }
    }
}

/// CoDel (RFC 8289): tail-drop at the limits, plus sojourn-time-based dropping
/// at dequeue following the control law `next = t + interval / sqrt(count)`.
#[derive(Debug)]
pub struct Codel<P> {
    fifo: Fifo<P>,
    /// Occupancy limits (tail drop when exceeded, RFC 8289 §5.1).
    pub limits: QueueLimits,
    /// Algorithm parameters.
    pub params: CodelParams,
    /// When the sojourn time first went (and stayed) above target, plus one interval.
    first_above_time: Option<Duration>,
    /// Time of the next scheduled drop while in the dropping state.
    drop_next: Duration,
    /// Drops since entering the dropping state.
    count: u32,
    /// `count` when the dropping state was last left, to resume the law (RFC 8289 §5.5).
    last_count: u32,
    /// True while in the dropping state.
    dropping: bool,
}

impl<P> Codel<P> {
    /// An empty CoDel queue.
    pub fn new(limits: QueueLimits, params: CodelParams) -> Self {
        Codel {
            fifo: Fifo::new(),
            limits,
            params,
            first_above_time: None,
            drop_next: Duration::ZERO,
            count: 0,
            last_count: 0,
            dropping: false,
        }
    }

    fn control_law(&self, t: Duration, count: u32) -> Duration {
        t.saturating_add(self.params.interval.div_f64(f64::from(count.max(1)).sqrt()))
    }

    /// Pops the head and says whether the sojourn time allows dropping it (RFC 8289 §5.3 `dodequeue`).
    fn pop_judged(&mut self, now: Duration) -> Option<(QueuedPacket<P>, bool)> {
        let Some(p) = self.fifo.pop() else {
            self.first_above_time = None;
            return None;
        };
        let sojourn = now.saturating_sub(p.enqueued_at);
        let mut ok_to_drop = false;
        if sojourn < self.params.target || self.fifo.bytes <= self.params.max_packet_bytes {
            self.first_above_time = None;
        } else {
            match self.first_above_time {
                None => self.first_above_time = Some(now.saturating_add(self.params.interval)),
                Some(t) if now >= t => ok_to_drop = true,
                Some(_) => {}
            }
        }
        Some((p, ok_to_drop))
    }
}

impl<P> PacketQueue<P> for Codel<P> {
    fn enqueue(
        &mut self,
        _now: Duration,
        packet: QueuedPacket<P>,
        _drops: &mut DropSink<'_, P>,
    ) -> Result<(), (QueuedPacket<P>, DropReason)> {
        if self
            .limits
            .fits(self.fifo.items.len() + 1, self.fifo.bytes + packet.len_bytes)
        {
            self.fifo.push(packet);
            Ok(())
        } else {
            Err((packet, DropReason::QueueFull))
        }
    }

    fn dequeue(&mut self, now: Duration, drops: &mut DropSink<'_, P>) -> Option<QueuedPacket<P>> {
        let Some((mut head, mut ok_to_drop)) = self.pop_judged(now) else {
            self.dropping = false;
            return None;
        };
        if self.dropping {
            if !ok_to_drop {
                self.dropping = false;
            }
            while self.dropping && now >= self.drop_next {
                drops(now, head, DropReason::Codel);
                self.count += 1;
                match self.pop_judged(now) {
                    None => {
                        self.dropping = false;
                        return None;
                    }
                    Some((next, ok)) => {
                        head = next;
                        ok_to_drop = ok;
                    }
                }
                if ok_to_drop {
                    self.drop_next = self.control_law(self.drop_next, self.count);
                } else {
                    self.dropping = false;
                }
            }
        } else if ok_to_drop {
            drops(now, head, DropReason::Codel);
            let next = self.pop_judged(now);
            self.dropping = true;
            // Re-enter with the previous drop rate if we left the dropping state
            // only recently (RFC 8289 §5.5), so a persistent queue is not
            // re-learned from count = 1 each time.
            let delta = self.count.saturating_sub(self.last_count);
            self.count = 1;
            if delta > 1 && now.saturating_sub(self.drop_next) < self.params.interval * 16 {
                self.count = delta;
            }
            self.drop_next = self.control_law(now, self.count);
            self.last_count = self.count;
            match next {
                Some((p, _)) => head = p,
                None => return None,
            }
        }
        Some(head)
    }
    fn is_empty(&self) -> bool {
        self.fifo.items.is_empty()
    }
    fn len_packets(&self) -> usize {
        self.fifo.items.len()
    }
    fn len_bytes(&self) -> usize {
        self.fifo.bytes
    }
}

/// The discipline chosen by config, dispatched by `match`.
#[derive(Debug)]
pub enum Queue<P> {
    /// See [`DropTail`].
    DropTail(DropTail<P>),
    /// See [`DropHead`].
    DropHead(DropHead<P>),
    /// See [`Codel`].
    Codel(Codel<P>),
}

impl<P> Queue<P> {
    /// Replaces the occupancy limits (e.g. a BDP-based limit after a rate
    /// change). Packets already queued above the new limit stay.
    pub fn set_limits(&mut self, limits: QueueLimits) {
        match self {
            Queue::DropTail(q) => q.limits = limits,
            Queue::DropHead(q) => q.limits = limits,
            Queue::Codel(q) => q.limits = limits,
        }
    }
}

impl<P> PacketQueue<P> for Queue<P> {
    #[inline]
    fn enqueue(
        &mut self,
        now: Duration,
        packet: QueuedPacket<P>,
        drops: &mut DropSink<'_, P>,
    ) -> Result<(), (QueuedPacket<P>, DropReason)> {
        match self {
            Queue::DropTail(q) => q.enqueue(now, packet, drops),
            Queue::DropHead(q) => q.enqueue(now, packet, drops),
            Queue::Codel(q) => q.enqueue(now, packet, drops),
        }
    }
    #[inline]
    fn dequeue(&mut self, now: Duration, drops: &mut DropSink<'_, P>) -> Option<QueuedPacket<P>> {
        match self {
            Queue::DropTail(q) => q.dequeue(now, drops),
            Queue::DropHead(q) => q.dequeue(now, drops),
            Queue::Codel(q) => q.dequeue(now, drops),
        }
    }
    #[inline]
    fn is_empty(&self) -> bool {
        match self {
            Queue::DropTail(q) => q.is_empty(),
            Queue::DropHead(q) => q.is_empty(),
            Queue::Codel(q) => q.is_empty(),
        }
    }
    fn len_packets(&self) -> usize {
        match self {
            Queue::DropTail(q) => q.len_packets(),
            Queue::DropHead(q) => q.len_packets(),
            Queue::Codel(q) => q.len_packets(),
        }
    }
    fn len_bytes(&self) -> usize {
        match self {
            Queue::DropTail(q) => q.len_bytes(),
            Queue::DropHead(q) => q.len_bytes(),
            Queue::Codel(q) => q.len_bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(seq: u64, len: usize, at_ms: u64) -> QueuedPacket<u64> {
        QueuedPacket {
            packet: seq,
            len_bytes: len,
            seq,
            enqueued_at: Duration::from_millis(at_ms),
        }
    }

    fn no_drops() -> impl FnMut(Duration, QueuedPacket<u64>, DropReason) {
        |_, p, r| panic!("unexpected drop of {} ({r:?})", p.seq)
    }

    #[test]
    fn drop_tail_refuses_packets_beyond_the_packet_limit() {
        let mut q = DropTail::new(QueueLimits {
            packets: Some(3),
            bytes: None,
        });
        let mut d = no_drops();
        for i in 0..3 {
            assert!(q.enqueue(Duration::ZERO, pkt(i, 100, 0), &mut d).is_ok());
        }
        let refused = q.enqueue(Duration::ZERO, pkt(3, 100, 0), &mut d).unwrap_err();
        assert_eq!((refused.0.seq, refused.1), (3, DropReason::QueueFull));
        assert_eq!(q.len_packets(), 3);
        assert_eq!(q.dequeue(Duration::ZERO, &mut d).unwrap().seq, 0);
    }

    #[test]
    fn drop_tail_refuses_packets_beyond_the_byte_limit() {
        let mut q = DropTail::new(QueueLimits {
            packets: None,
            bytes: Some(3000),
        });
        let mut d = no_drops();
        assert!(q.enqueue(Duration::ZERO, pkt(0, 1500, 0), &mut d).is_ok());
        assert!(q.enqueue(Duration::ZERO, pkt(1, 1500, 0), &mut d).is_ok());
        assert!(q.enqueue(Duration::ZERO, pkt(2, 1, 0), &mut d).is_err());
        assert_eq!(q.len_bytes(), 3000);
    }

    #[test]
    fn drop_head_drops_the_oldest() {
        let mut q = DropHead::new(QueueLimits {
            packets: Some(3),
            bytes: None,
        });
        let mut dropped = Vec::new();
        let mut d = |_, p: QueuedPacket<u64>, r| dropped.push((p.seq, r));
        for i in 0..5 {
            assert!(q.enqueue(Duration::ZERO, pkt(i, 100, 0), &mut d).is_ok());
        }
        assert_eq!(
            dropped,
            vec![(0, DropReason::QueueHeadDrop), (1, DropReason::QueueHeadDrop)]
        );
        let mut nd = no_drops();
        let left: Vec<u64> = std::iter::from_fn(|| q.dequeue(Duration::ZERO, &mut nd).map(|p| p.seq)).collect();
        assert_eq!(left, vec![2, 3, 4]);
    }

    /// Serves one 1500-byte packet per `service_ms`, offering one packet every
    /// `arrival_ms` for `packets` arrivals; returns the number of CoDel drops.
    fn codel_run(arrival_ms: u64, service_ms: u64, packets: u64) -> usize {
        let mut q = Codel::new(QueueLimits::default(), CodelParams::default());
        let mut drops = 0usize;
        let mut seq = 0;
        let end = packets * arrival_ms + 10_000;
        let mut next_service = 0;
        for t in 0..end {
            let now = Duration::from_millis(t);
            if t % arrival_ms == 0 && seq < packets {
                q.enqueue(now, pkt(seq, 1500, t), &mut |_, _, _| drops += 1).unwrap();
                seq += 1;
            }
            if t >= next_service && !q.is_empty() {
                q.dequeue(now, &mut |_, _, _| drops += 1);
                next_service = t + service_ms;
            }
        }
        drops
    }

    #[test]
    fn codel_drops_under_a_standing_queue() {
        // Arrivals at 1/ms, service at 1/2ms: the queue grows without bound.
        assert!(codel_run(1, 2, 5_000) > 50);
    }

    #[test]
    fn codel_leaves_a_short_burst_alone() {
        // A 20-packet burst served at 1/2ms drains in 40 ms < interval: no drop.
        let mut q = Codel::new(QueueLimits::default(), CodelParams::default());
        let mut drops = 0usize;
        for i in 0..20 {
            q.enqueue(Duration::ZERO, pkt(i, 1500, 0), &mut |_, _, _| drops += 1)
                .unwrap();
        }
        let mut t = 0;
        while !q.is_empty() {
            q.dequeue(Duration::from_millis(t), &mut |_, _, _| drops += 1);
            t += 2;
        }
        assert_eq!(drops, 0);
        // And arrivals slower than service never build a queue.
        assert_eq!(codel_run(3, 2, 2_000), 0);
    }
}
