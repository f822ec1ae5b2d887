//! The composed link: policer -> loss -> queue+rate -> delay.
//!
//! One [`Link`] models one direction of a path. It is sans-IO: it never reads a
//! clock, owns no socket and spawns nothing. The caller passes `now` (time since
//! an epoch of its choosing, as a [`Duration`]) to every call; the emulator
//! passes real elapsed time, the simulator virtual time (docs/architecture.md "One link
//! model, two clocks"). Time must not go backwards; if it does, the link treats
//! the call as happening at the latest time it has seen.
//!
//! Between calls nothing happens; each call first replays every scheduled change
//! and every departure up to `now`, in time order, so results do not depend on
//! how often the caller polls — only on the times it passes.
//!
//! Randomness comes from one ChaCha8 generator per stage, all derived from the
//! link seed on distinct streams, so that e.g. enabling jitter does not change
//! which packets the loss stage drops.

use std::time::Duration;

use bytes::Bytes;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::config::{Discipline, LinkConfig, ScheduledChange};
use crate::delay::{DelayLine, DelayParams};
use crate::loss::Loss;
use crate::policer::Policer;
use crate::queue::{Codel, CodelParams, DropHead, DropTail, PacketQueue, Queue, QueueLimits, QueuedPacket};
use crate::rate::{Rate, Server};
use crate::trace::{Trace, TraceError};
use crate::{ConfigError, DropReason};

/// Why a link could not be built.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// A configuration value is invalid.
    #[error("link config: {0}")]
    Config(#[from] ConfigError),
    /// A trace file is missing or malformed.
    #[error("link trace: {0}")]
    Trace(#[from] TraceError),
}

/// What happened to a packet handed to [`Link::enqueue`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Accepted; it will come out of [`Link::poll_transmit`] unless CoDel or
    /// drop-head drops it later (see the event log / stats).
    Queued,
    /// Dropped on arrival.
    Dropped(DropReason),
}

/// Kind of a logged packet event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// The packet arrived at the link.
    Enqueue,
    /// The packet was dropped (the reason names the stage).
    Drop(DropReason),
    /// The packet was delivered; it had left the rate stage at `departed_at`.
    Deliver {
        /// When its last byte left the bottleneck (queueing delay = this - arrival).
        departed_at: Duration,
    },
}

/// One entry of the packet-event log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketEvent {
    /// Model time of the event.
    pub at: Duration,
    /// Arrival sequence number of the packet (0, 1, ... per link).
    pub seq: u64,
    /// Packet size, bytes.
    pub len_bytes: usize,
    /// What happened.
    pub kind: EventKind,
}

/// Counters, always kept (cheap).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets offered to the link.
    pub arrived_packets: u64,
    /// Bytes offered to the link.
    pub arrived_bytes: u64,
    /// Packets dropped by the policer.
    pub policer_drops: u64,
    /// Packets dropped by random loss.
    pub loss_drops: u64,
    /// Packets dropped by the queue (overflow, drop-head, CoDel).
    pub queue_drops: u64,
    /// Packets delivered.
    pub delivered_packets: u64,
    /// Bytes delivered.
    pub delivered_bytes: u64,
}

#[derive(Debug)]
struct InFlight<P> {
    packet: QueuedPacket<P>,
    departed_at: Duration,
}

#[derive(Debug)]
struct Change {
    at: Duration,
    rate: Option<Rate>,
    spec: ScheduledChange,
}

/// One direction of a path. `P` is the packet type (anything that exposes its
/// bytes; [`Bytes`] by default, `Vec<u8>` works too).
#[derive(Debug)]
pub struct Link<P = Bytes> {
    policer: Policer,
    loss: Loss,
    queue: Queue<P>,
    server: Server<P>,
    delay: DelayLine<InFlight<P>>,
    rng_policer: ChaCha8Rng,
    rng_loss: ChaCha8Rng,
    rng_delay: ChaCha8Rng,
    schedule: Vec<Change>,
    next_change: usize,
    rate: Rate,
    base_rtt_ms: Option<f64>,
    limit_packets: Option<u64>,
    limit_bytes: Option<u64>,
    limit_bdp: Option<f64>,
    now: Duration,
    next_seq: u64,
    stats: LinkStats,
    log: Option<Vec<PacketEvent>>,
}

fn resolve_rate(
    rate_bps: Option<u64>,
    file: &Option<std::path::PathBuf>,
    mem: &Option<std::sync::Arc<Trace>>,
) -> Result<Option<Rate>, TraceError> {
    Ok(match (rate_bps, file, mem) {
        (Some(r), _, _) => Some(Rate::Constant { rate_bps: r }),
        (_, _, Some(t)) => Some(Rate::Trace(t.clone())),
        (_, Some(path), _) => Some(Rate::Trace(std::sync::Arc::new(Trace::read_file(path)?))),
        _ => None,
    })
}

fn delay_params(delay_ms: Option<f64>, jitter_ms: Option<f64>, allow_reorder: bool) -> DelayParams {
    let ms = |v: Option<f64>| crate::secs(v.unwrap_or(0.0).max(0.0) / 1000.0);
    DelayParams {
        delay: ms(delay_ms),
        jitter: ms(jitter_ms),
        allow_reorder,
    }
}

fn record_drop<P>(
    stats: &mut LinkStats,
    log: &mut Option<Vec<PacketEvent>>,
    at: Duration,
    p: &QueuedPacket<P>,
    reason: DropReason,
) {
    match reason.stage() {
        crate::Stage::Policer => stats.policer_drops += 1,
        crate::Stage::Loss => stats.loss_drops += 1,
        crate::Stage::Queue => stats.queue_drops += 1,
    }
    if let Some(log) = log {
        log.push(PacketEvent {
            at,
            seq: p.seq,
            len_bytes: p.len_bytes,
            kind: EventKind::Drop(reason),
        });
    }
}

impl<P: AsRef<[u8]>> Link<P> {
    /// Builds a link from a config (validated here; trace files are read here)
    /// and a seed that fixes every random choice it will make.
    pub fn new(config: LinkConfig, seed: u64) -> Result<Self, LinkError> {
        config.validate()?;
        let rate = resolve_rate(config.rate_bps, &config.trace_file, &config.trace)?.ok_or_else(|| ConfigError {
            field: "rate_bps".into(),
            message: "missing".into(),
        })?;
        let mut schedule = Vec::with_capacity(config.schedule.len());
        for spec in config.schedule {
            let rate = resolve_rate(spec.rate_bps, &spec.trace_file, &spec.trace)?;
            schedule.push(Change {
                at: crate::secs(spec.at_ms / 1000.0),
                rate,
                spec,
            });
        }
        schedule.sort_by_key(|c| c.at);
        let q = &config.queue;
        let codel = CodelParams {
            target: crate::secs(q.codel_target_ms / 1000.0),
            interval: crate::secs(q.codel_interval_ms / 1000.0),
            ..CodelParams::default()
        };
        let limits = QueueLimits::default();
        let queue = match q.discipline {
            Discipline::DropTail => Queue::DropTail(DropTail::new(limits)),
            Discipline::DropHead => Queue::DropHead(DropHead::new(limits)),
            Discipline::Codel => Queue::Codel(Codel::new(limits, codel)),
        };
        let base = ChaCha8Rng::seed_from_u64(seed);
        let stream = |n: u64| {
            let mut r = base.clone();
            r.set_stream(n);
            r
        };
        let mut link = Link {
            policer: Policer::new(config.policer.clone()),
            loss: Loss::new(&config.loss),
            queue,
            server: Server::new(&rate, Duration::ZERO),
            delay: DelayLine::new(delay_params(config.delay_ms, config.jitter_ms, config.allow_reorder)),
            rng_policer: stream(1),
            rng_loss: stream(2),
            rng_delay: stream(3),
            schedule,
            next_change: 0,
            rate,
            base_rtt_ms: config.base_rtt_ms,
            limit_packets: q.limit_packets,
            limit_bytes: q.limit_bytes,
            limit_bdp: q.limit_bdp,
            now: Duration::ZERO,
            next_seq: 0,
            stats: LinkStats::default(),
            log: config.log_events.then(Vec::new),
        };
        link.update_limits();
        Ok(link)
    }

    fn update_limits(&mut self) {
        let bdp_bytes = match (self.limit_bdp, self.base_rtt_ms) {
            (Some(mult), Some(rtt_ms)) => {
                let bdp = self.rate.mean_rate_bps() / 8.0 * rtt_ms / 1000.0 * mult;
                // Below one MTU a BDP limit would refuse every full-size packet.
                Some((bdp.round() as usize).max(crate::trace::OPPORTUNITY_BYTES))
            }
            _ => None,
        };
        let to_usize = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        self.queue.set_limits(QueueLimits {
            packets: self.limit_packets.map(to_usize),
            bytes: self.limit_bytes.map(to_usize).or(bdp_bytes),
        });
    }

    /// Turns the packet-event log on or off (off discards what was logged).
    pub fn set_event_log(&mut self, enabled: bool) {
        match (enabled, self.log.is_some()) {
            (true, false) => self.log = Some(Vec::new()),
            (false, true) => self.log = None,
            _ => {}
        }
    }

    /// Takes the events logged so far (empty when the log is off).
    pub fn drain_events(&mut self) -> Vec<PacketEvent> {
        self.log.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Counters since creation.
    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// Packets waiting in the bottleneck queue (not counting one being sent).
    pub fn queue_len_packets(&self) -> usize {
        self.queue.len_packets()
    }

    /// Bytes waiting in the bottleneck queue.
    pub fn queue_len_bytes(&self) -> usize {
        self.queue.len_bytes()
    }

    /// Packets past the bottleneck, still in the delay line.
    pub fn in_flight(&self) -> usize {
        self.delay.len()
    }

    /// The rate in force.
    pub fn rate(&self) -> &Rate {
        &self.rate
    }

    /// The latest time the link has been advanced to.
    pub fn now(&self) -> Duration {
        self.now
    }

    /// Offers a packet at `now`.
    pub fn enqueue(&mut self, now: Duration, packet: P) -> Verdict {
        self.advance(now);
        let now = self.now;
        let len_bytes = packet.as_ref().len();
        let seq = self.next_seq;
        self.next_seq += 1;
        self.stats.arrived_packets += 1;
        self.stats.arrived_bytes += len_bytes as u64;
        if let Some(log) = &mut self.log {
            log.push(PacketEvent {
                at: now,
                seq,
                len_bytes,
                kind: EventKind::Enqueue,
            });
        }
        let reason = match self.policer.check(now, packet.as_ref(), &mut self.rng_policer) {
            Some(r) => Some(r),
            None => self.loss.lose(&mut self.rng_loss).then_some(DropReason::RandomLoss),
        };
        let queued = QueuedPacket {
            packet,
            len_bytes,
            seq,
            enqueued_at: now,
        };
        if let Some(reason) = reason {
            record_drop(&mut self.stats, &mut self.log, now, &queued, reason);
            return Verdict::Dropped(reason);
        }
        let (stats, log) = (&mut self.stats, &mut self.log);
        let mut drops = |t: Duration, p: QueuedPacket<P>, r: DropReason| record_drop(stats, log, t, &p, r);
        if let Err((refused, reason)) = self.queue.enqueue(now, queued, &mut drops) {
            drops(now, refused, reason);
            return Verdict::Dropped(reason);
        }
        self.server.kick(now, &mut self.queue, &mut drops);
        Verdict::Queued
    }

    /// The next packet whose delivery time is <= `now`, in delivery order.
    /// Call repeatedly until `None`.
    pub fn poll_transmit(&mut self, now: Duration) -> Option<P> {
        self.poll_transmit_ahead(now, Duration::ZERO)
    }

    /// Like [`Link::poll_transmit`], but also hands out a packet whose delivery
    /// time is up to `lead` after `now`, without advancing the link past `now`
    /// (so arrivals, departures and scheduled changes still happen at their own
    /// times). The emulator asks for packets this much early because writing a
    /// packet into the receiving namespace and waking its reader take time of
    /// their own; the packet's logged delivery time stays the scheduled one. A
    /// packet still in the bottleneck queue is never handed out early: with a
    /// delay shorter than `lead` it leaves when it departs.
    pub fn poll_transmit_ahead(&mut self, now: Duration, lead: Duration) -> Option<P> {
        self.advance(now);
        let (at, inflight) = self.delay.pop(self.now + lead)?;
        let p = inflight.packet;
        self.stats.delivered_packets += 1;
        self.stats.delivered_bytes += p.len_bytes as u64;
        if let Some(log) = &mut self.log {
            log.push(PacketEvent {
                at,
                seq: p.seq,
                len_bytes: p.len_bytes,
                kind: EventKind::Deliver {
                    departed_at: inflight.departed_at,
                },
            });
        }
        Some(p.packet)
    }

    /// When the link next has something to do (a delivery or a departure from
    /// the bottleneck): the emulator arms its timer for this. `None` = idle
    /// until the next `enqueue`. May be <= the last `now` when packets are due.
    pub fn next_wakeup(&self) -> Option<Duration> {
        self.next_wakeup_ahead(Duration::ZERO)
    }

    /// [`Link::next_wakeup`] for a caller that polls with
    /// [`Link::poll_transmit_ahead`] and the same `lead`: deliveries are asked for
    /// `lead` early, bottleneck departures at their own time.
    pub fn next_wakeup_ahead(&self, lead: Duration) -> Option<Duration> {
        let delivery = self.delay.next_at().map(|t| t.saturating_sub(lead));
        match (delivery, self.server.next_event(self.queue.is_empty())) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When the next packet that has left the bottleneck is delivered (`None`: none
    /// has). [`Link::next_wakeup`] before it is a departure from the bottleneck.
    pub fn next_delivery(&self) -> Option<Duration> {
        self.delay.next_at()
    }

    /// Replays scheduled changes and departures from the bottleneck up to `now`,
    /// delivering nothing. Every other call advances the link to its `now` first, so
    /// this changes no outcome; a discrete-event caller uses it to step over a
    /// departure without handling an instant at which nothing else happens.
    pub fn advance_to(&mut self, now: Duration) {
        self.advance(now);
    }

    /// Replays changes and departures up to `now`.
    fn advance(&mut self, now: Duration) {
        let now = now.max(self.now);
        while let Some(at) = self
            .schedule
            .get(self.next_change)
            .map(|c| c.at)
            .filter(|&at| at <= now)
        {
            self.run_server(at);
            self.apply_change(self.next_change, at);
            self.next_change += 1;
        }
        self.run_server(now);
        self.now = now;
    }

    fn run_server(&mut self, until: Duration) {
        let (stats, log) = (&mut self.stats, &mut self.log);
        let mut drops = |t: Duration, p: QueuedPacket<P>, r: DropReason| record_drop(stats, log, t, &p, r);
        let (delay, rng) = (&mut self.delay, &mut self.rng_delay);
        let mut out = |t: Duration, packet: QueuedPacket<P>| {
            delay.push(t, InFlight { packet, departed_at: t }, rng);
        };
        self.server.advance(until, &mut self.queue, &mut drops, &mut out);
    }

    fn apply_change(&mut self, index: usize, at: Duration) {
        let Some(change) = self.schedule.get_mut(index) else {
            return;
        };
        let spec = &change.spec;
        if let Some(rate) = change.rate.take() {
            self.server.set_rate(at, &rate);
            self.rate = rate;
        }
        if spec.base_rtt_ms.is_some() {
            self.base_rtt_ms = spec.base_rtt_ms;
        }
        if spec.delay_ms.is_some() || spec.jitter_ms.is_some() {
            let old = self.delay.params();
            let mut p = delay_params(spec.delay_ms, spec.jitter_ms, old.allow_reorder);
            if spec.delay_ms.is_none() {
                p.delay = old.delay;
            }
            if spec.jitter_ms.is_none() {
                p.jitter = old.jitter;
            }
            self.delay.set_params(p);
        }
        if let Some(loss) = &spec.loss {
            self.loss = Loss::new(loss);
        }
        if let Some(policer) = &spec.policer {
            self.policer = Policer::new(policer.clone());
        }
        self.update_limits();
        // A new constant rate may find the server idle with packets waiting.
        if !self.server.busy() {
            let (stats, log) = (&mut self.stats, &mut self.log);
            let mut drops = |t: Duration, p: QueuedPacket<P>, r: DropReason| record_drop(stats, log, t, &p, r);
            self.server.kick(at, &mut self.queue, &mut drops);
        }
    }
}
