//! A packet-level bottleneck in virtual time for the algorithms' unit tests.
//!
//! One sender drives an [`Algorithm`] the way quinn does (window limit, pacing at
//! 1.25 × window / sRTT as quinn 0.11's pacer, RFC 9002 smoothed RTT, packet-threshold
//! loss detection), through one drop-tail FIFO of a fixed rate with optional random
//! loss, and one ACK per packet after a fixed propagation delay. It tests an
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

/// Runs `algo` over `link` for `duration`, measuring after `warmup`.
pub fn run(algo: &mut dyn Algorithm, link: Bottleneck, duration: Duration, warmup: Duration) -> Outcome {
    let t0 = Instant::now();
    let mut path = PathState::new(MTU as u16, Duration::from_millis(333));
    let mut est = PathEstimator::new();
    let mut srtt: Option<Duration> = None;
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut random = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng >> 11) as f64 / (1u64 << 53) as f64
    };
    let byte_time = 8.0 / link.rate_bps;

    let mut next_pn = 0u64;
    let mut in_flight: BTreeMap<u64, InFlight> = BTreeMap::new();
    let mut inflight_bytes = 0u64;
    // Bytes waiting in the queue; `link_free_at` is when the link finishes the last one.
    let mut queued_bytes = 0u64;
    // (leaves the link, pn, bytes) and (ACK reaches the sender, pn), both in time order.
    let mut departures: VecDeque<(Instant, u64, u64)> = VecDeque::new();
    let mut acks: VecDeque<(Instant, u64)> = VecDeque::new();
    let mut link_free_at = t0;
    let mut next_send = t0;
    let mut now = t0;
    let end = t0 + duration;
    let (mut sent_pkts, mut lost_pkts) = (0u64, 0u64);
    let (mut delivered, mut rtt_sum, mut rtt_n) = (0u64, 0.0f64, 0u64);
    let mut samples = Vec::new();
    let mut largest_acked: Option<u64> = None;

    while now < end {
        // Send what the window and the pacer allow.
        while inflight_bytes + MTU <= algo.window() && next_send <= now {
            let pn = next_pn;
            next_pn += 1;
            sent_pkts += 1;
            est.on_sent(&mut path, now, MTU, false);
            algo.on_sent(now, MTU, &path);
            in_flight.insert(pn, InFlight { sent: now, bytes: MTU });
            inflight_bytes += MTU;
            if random() < link.loss || queued_bytes + MTU > link.buffer_bytes {
                // Dropped; detected when later packets are acknowledged.
            } else {
                queued_bytes += MTU;
                let start = link_free_at.max(now);
                link_free_at = start + Duration::from_secs_f64(MTU as f64 * byte_time);
                departures.push_back((link_free_at, pn, MTU));
            }
            let rate = 1.25 * algo.window() as f64 / srtt.unwrap_or(Duration::from_millis(333)).as_secs_f64();
            next_send = if srtt.is_some() {
                now + Duration::from_secs_f64(MTU as f64 / rate.max(1.0))
            } else {
                now
            };
        }
        // Next event.
        let mut next = end;
        if let Some(&(t, _, _)) = departures.front() {
            next = next.min(t);
        }
        if let Some(&(t, _)) = acks.front() {
            next = next.min(t);
        }
        if inflight_bytes + MTU <= algo.window() {
            next = next.min(next_send.max(now));
        }
        if next <= now && departures.front().is_none_or(|d| d.0 > now) && acks.front().is_none_or(|a| a.0 > now) {
            next = now + Duration::from_micros(10);
        }
        now = next;
        while departures.front().is_some_and(|d| d.0 <= now) {
            let (t, pn, bytes) = departures.pop_front().unwrap();
            queued_bytes -= bytes;
            // To the receiver and its ACK back: the propagation RTT.
            acks.push_back((t + link.rtt, pn));
        }
        let mut acked_any = false;
        while acks.front().is_some_and(|a| a.0 <= now) {
            let (_, pn) = acks.pop_front().unwrap();
            let Some(p) = in_flight.remove(&pn) else { continue };
            inflight_bytes -= p.bytes;
            acked_any = true;
            let rtt = now - p.sent;
            srtt = Some(match srtt {
                None => rtt,
                Some(s) => (s * 7 + rtt) / 8,
            });
            est.on_ack(&mut path, now, p.sent, p.bytes, srtt.unwrap());
            algo.on_ack(
                now,
                &Ack {
                    sent: p.sent,
                    bytes: p.bytes,
                    app_limited: false,
                    rtt,
                },
                &path,
            );
            largest_acked = Some(largest_acked.map_or(pn, |l| l.max(pn)));
            if now - t0 >= warmup {
                delivered += p.bytes;
                rtt_sum += rtt.as_secs_f64();
                rtt_n += 1;
            }
            samples.push(Sample {
                t: now - t0,
                cwnd: algo.window(),
                rtt,
            });
        }
        if acked_any {
            // Packet threshold 3 (RFC 9002 §6.1.1).
            if let Some(largest) = largest_acked {
                let lost: Vec<u64> = in_flight
                    .range(..largest.saturating_sub(2))
                    .map(|(&pn, _)| pn)
                    .collect();
                if let Some(&last) = lost.last() {
                    let mut bytes = 0;
                    let sent = in_flight[&last].sent;
                    for pn in &lost {
                        bytes += in_flight.remove(pn).unwrap().bytes;
                    }
                    lost_pkts += lost.len() as u64;
                    inflight_bytes -= bytes;
                    est.on_congestion_event(&mut path, bytes);
                    algo.on_congestion_event(now, sent, false, bytes, &path);
                }
            }
            est.on_end_acks(&mut path, inflight_bytes, false);
            algo.on_end_acks(now, inflight_bytes, false, &path);
        }
    }
    let measured = duration.saturating_sub(warmup).as_secs_f64();
    let mean_rtt = if rtt_n > 0 { rtt_sum / rtt_n as f64 } else { 0.0 };
    Outcome {
        delivered,
        utilisation: delivered as f64 * 8.0 / measured / link.rate_bps,
        mean_queue_delay: Duration::from_secs_f64((mean_rtt - link.rtt.as_secs_f64()).max(0.0)),
        loss_rate: lost_pkts as f64 / sent_pkts.max(1) as f64,
        samples,
    }
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
