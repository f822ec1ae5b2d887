//! A packet-level bottleneck in virtual time for the algorithms' unit tests.
//!
//! One sender drives an [`Algorithm`] the way quinn does (window limit, pacing at
//! 1.25 × window / sRTT as quinn 0.11's pacer, RFC 9002 smoothed RTT, packet-threshold
//! loss detection), through one drop-tail FIFO of a fixed rate with optional random
//! loss, and one ACK per packet after a fixed propagation delay; [`run_flows`] puts
//! several senders through the same FIFO, for fairness. It tests an
//! algorithm's own logic in isolation in milliseconds; the suite's end-to-end checks
//! run real QUIC in the simulator and the emulator (docs/cc.md).

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use crate::algorithm::{Ack, Algorithm};
use crate::path::{PathEstimator, PathState};

/// The path of one test.
#[derive(Debug, Clone, Copy)]
pub struct Bottleneck {
    /// Bottleneck rate, bits per second.
    pub rate_bps: f64,
    /// Round-trip propagation delay.
    pub rtt: Duration,
    /// Drop-tail buffer, bytes.
    pub buffer_bytes: u64,
    /// Chance each packet is dropped before the queue (random loss).
    pub loss: f64,
}

impl Bottleneck {
    /// `mbps` Mbit/s, `rtt_ms` ms, a buffer of `bdps` bandwidth-delay products, no
    /// random loss.
    pub fn new(mbps: f64, rtt_ms: u64, bdps: f64) -> Self {
        let rtt = Duration::from_millis(rtt_ms);
        let bdp = mbps * 1e6 / 8.0 * rtt.as_secs_f64();
        Bottleneck {
            rate_bps: mbps * 1e6,
            rtt,
            buffer_bytes: (bdp * bdps) as u64,
            loss: 0.0,
        }
    }
}

/// One sample per ACK of what the sender saw.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// Time since the start.
    pub t: Duration,
    /// Window after the ACK, bytes.
    pub cwnd: u64,
    /// RTT sample of the ACK.
    pub rtt: Duration,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Bytes acknowledged after the warm-up.
    pub delivered: u64,
    /// Goodput after the warm-up over the bottleneck rate, 0..=1.
    pub utilisation: f64,
    /// Mean RTT sample after the warm-up minus the propagation RTT.
    pub mean_queue_delay: Duration,
    /// Packets lost (queue drops and random loss) over packets sent.
    pub loss_rate: f64,
    /// Every ACK's sample.
    pub samples: Vec<Sample>,
}

const MTU: u64 = 1200;

#[derive(Debug, Clone, Copy)]
struct InFlight {
    sent: Instant,
    bytes: u64,
}

/// One flow of a shared run: its algorithm and when it starts sending.
pub struct Flow<'a> {
    /// The flow's controller.
    pub algo: &'a mut dyn Algorithm,
    /// When the flow starts, after the run's start.
    pub start: Duration,
}

/// A sender's own state: what quinn keeps per connection.
struct Sender<'a> {
    algo: &'a mut dyn Algorithm,
    start: Instant,
    path: PathState,
    est: PathEstimator,
    srtt: Option<Duration>,
    next_pn: u64,
    in_flight: BTreeMap<u64, InFlight>,
    inflight_bytes: u64,
    next_send: Instant,
    largest_acked: Option<u64>,
    sent_pkts: u64,
    lost_pkts: u64,
    delivered: u64,
    rtt_sum: f64,
    rtt_n: u64,
    samples: Vec<Sample>,
}

/// Runs `algo` over `link` for `duration`, measuring after `warmup`.
pub fn run(algo: &mut dyn Algorithm, link: Bottleneck, duration: Duration, warmup: Duration) -> Outcome {
    let flows = vec![Flow {
        algo,
        start: Duration::ZERO,
    }];
    run_flows(flows, link, duration, warmup).remove(0)
}

/// Runs `flows` through one shared bottleneck (one drop-tail FIFO, one random-loss
/// draw per packet in send order) for `duration`, each measured from `warmup` after
/// the run's start; one [`Outcome`] per flow, in order, its utilisation the share of
/// the link the flow had.
pub fn run_flows(flows: Vec<Flow<'_>>, link: Bottleneck, duration: Duration, warmup: Duration) -> Vec<Outcome> {
    let t0 = Instant::now();
    let mut senders: Vec<Sender<'_>> = flows
        .into_iter()
        .map(|f| Sender {
            algo: f.algo,
            start: t0 + f.start,
            path: PathState::new(MTU as u16, Duration::from_millis(333)),
            est: PathEstimator::new(),
            srtt: None,
            next_pn: 0,
            in_flight: BTreeMap::new(),
            inflight_bytes: 0,
            next_send: t0 + f.start,
            largest_acked: None,
            sent_pkts: 0,
            lost_pkts: 0,
            delivered: 0,
            rtt_sum: 0.0,
            rtt_n: 0,
            samples: Vec::new(),
        })
        .collect();
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut random = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng >> 11) as f64 / (1u64 << 53) as f64
    };
    let byte_time = 8.0 / link.rate_bps;

    // Bytes waiting in the queue; `link_free_at` is when the link finishes the last one.
    let mut queued_bytes = 0u64;
    // (leaves the link, flow, pn, bytes) and (ACK reaches the sender, flow, pn), both in
    // time order (one FIFO, one propagation delay).
    let mut departures: VecDeque<(Instant, usize, u64, u64)> = VecDeque::new();
    let mut acks: VecDeque<(Instant, usize, u64)> = VecDeque::new();
    let mut link_free_at = t0;
    let mut now = t0;
    let end = t0 + duration;

    while now < end {
        // Send what each started flow's window and pacer allow.
        for (i, s) in senders.iter_mut().enumerate() {
            if now < s.start {
                continue;
            }
            while s.inflight_bytes + MTU <= s.algo.window() && s.next_send <= now {
                let pn = s.next_pn;
                s.next_pn += 1;
                s.sent_pkts += 1;
                s.est.on_sent(&mut s.path, now, MTU, false);
                s.algo.on_sent(now, MTU, &s.path);
                s.in_flight.insert(pn, InFlight { sent: now, bytes: MTU });
                s.inflight_bytes += MTU;
                if random() < link.loss || queued_bytes + MTU > link.buffer_bytes {
                    // Dropped; detected when later packets are acknowledged.
                } else {
                    queued_bytes += MTU;
                    let start = link_free_at.max(now);
                    link_free_at = start + Duration::from_secs_f64(MTU as f64 * byte_time);
                    departures.push_back((link_free_at, i, pn, MTU));
                }
                let rate = 1.25 * s.algo.window() as f64 / s.srtt.unwrap_or(Duration::from_millis(333)).as_secs_f64();
                s.next_send = if s.srtt.is_some() {
                    now + Duration::from_secs_f64(MTU as f64 / rate.max(1.0))
                } else {
                    now
                };
            }
        }
        // Next event.
        let mut next = end;
        if let Some(&(t, _, _, _)) = departures.front() {
            next = next.min(t);
        }
        if let Some(&(t, _, _)) = acks.front() {
            next = next.min(t);
        }
        for s in &senders {
            if now < s.start {
                next = next.min(s.start);
            } else if s.inflight_bytes + MTU <= s.algo.window() {
                next = next.min(s.next_send.max(now));
            }
        }
        if next <= now && departures.front().is_none_or(|d| d.0 > now) && acks.front().is_none_or(|a| a.0 > now) {
            next = now + Duration::from_micros(10);
        }
        now = next;
        while departures.front().is_some_and(|d| d.0 <= now) {
            let (t, i, pn, bytes) = departures.pop_front().unwrap();
            queued_bytes -= bytes;
            // To the receiver and its ACK back: the propagation RTT.
            acks.push_back((t + link.rtt, i, pn));
        }
        let mut acked_any = vec![false; senders.len()];
        while acks.front().is_some_and(|a| a.0 <= now) {
            let (_, i, pn) = acks.pop_front().unwrap();
            let s = &mut senders[i];
            let Some(p) = s.in_flight.remove(&pn) else { continue };
            s.inflight_bytes -= p.bytes;
            acked_any[i] = true;
            let rtt = now - p.sent;
            s.srtt = Some(match s.srtt {
                None => rtt,
                Some(v) => (v * 7 + rtt) / 8,
            });
            s.est.on_ack(&mut s.path, now, p.sent, p.bytes, s.srtt.unwrap());
            s.algo.on_ack(
                now,
                &Ack {
                    sent: p.sent,
                    bytes: p.bytes,
                    app_limited: false,
                    rtt,
                },
                &s.path,
            );
            s.largest_acked = Some(s.largest_acked.map_or(pn, |l| l.max(pn)));
            if now - t0 >= warmup {
                s.delivered += p.bytes;
                s.rtt_sum += rtt.as_secs_f64();
                s.rtt_n += 1;
            }
            s.samples.push(Sample {
                t: now - t0,
                cwnd: s.algo.window(),
                rtt,
            });
        }
        for (s, _) in senders.iter_mut().zip(&acked_any).filter(|(_, a)| **a) {
            // Packet threshold 3 (RFC 9002 §6.1.1).
            if let Some(largest) = s.largest_acked {
                let lost: Vec<u64> = s
                    .in_flight
                    .range(..largest.saturating_sub(2))
                    .map(|(&pn, _)| pn)
                    .collect();
                if let Some(&last) = lost.last() {
                    let mut bytes = 0;
                    let sent = s.in_flight[&last].sent;
                    for pn in &lost {
                        bytes += s.in_flight.remove(pn).unwrap().bytes;
                    }
                    s.lost_pkts += lost.len() as u64;
                    s.inflight_bytes -= bytes;
                    s.est.on_congestion_event(&mut s.path, bytes);
                    s.algo.on_congestion_event(now, sent, false, bytes, &s.path);
                }
            }
            s.est.on_end_acks(&mut s.path, s.inflight_bytes, false);
            s.algo.on_end_acks(now, s.inflight_bytes, false, &s.path);
        }
    }
    let measured = duration.saturating_sub(warmup).as_secs_f64();
    senders
        .into_iter()
        .map(|s| {
            let mean_rtt = if s.rtt_n > 0 { s.rtt_sum / s.rtt_n as f64 } else { 0.0 };
            Outcome {
                delivered: s.delivered,
                utilisation: s.delivered as f64 * 8.0 / measured / link.rate_bps,
                mean_queue_delay: Duration::from_secs_f64((mean_rtt - link.rtt.as_secs_f64()).max(0.0)),
                loss_rate: s.lost_pkts as f64 / s.sent_pkts.max(1) as f64,
                samples: s.samples,
            }
        })
        .collect()
}

/// Jain's fairness index of the flows' deliveries: 1 when equal, 1/n when one flow has
/// everything.
pub fn jain(outcomes: &[Outcome]) -> f64 {
    let x: Vec<f64> = outcomes.iter().map(|o| o.delivered as f64).collect();
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    if squares == 0.0 {
        return 0.0;
    }
    sum * sum / (x.len() as f64 * squares)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::newreno::{NewReno, NewRenoConfig};

    #[test]
    fn newreno_fills_a_bottleneck_with_a_one_bdp_buffer() {
        let link = Bottleneck::new(10.0, 40, 1.0);
        let path = PathState::new(1200, Duration::from_millis(333));
        let mut c = NewReno::new(&NewRenoConfig::default(), 12_000, Instant::now(), &path);
        let out = run(&mut c, link, Duration::from_secs(30), Duration::from_secs(5));
        assert!(
            out.utilisation > 0.9 && out.utilisation <= 1.0,
            "utilisation {}",
            out.utilisation
        );
        assert!(out.loss_rate > 0.0 && out.loss_rate < 0.02, "loss {}", out.loss_rate);
        // A full buffer of one BDP adds up to 40 ms; Reno's sawtooth averages about half.
        let q = out.mean_queue_delay.as_secs_f64() * 1e3;
        assert!((5.0..40.0).contains(&q), "queue delay {q} ms");
        // The window's sawtooth peaks near BDP + buffer (2 × 50 kB) and never starves.
        let peak = out
            .samples
            .iter()
            .filter(|s| s.t > Duration::from_secs(5))
            .map(|s| s.cwnd)
            .max()
            .unwrap();
        assert!((80_000..=130_000).contains(&peak), "peak cwnd {peak}");
        assert!(out.samples.iter().all(|s| s.rtt >= link.rtt));
        assert!(out.delivered > 0);
    }
}
