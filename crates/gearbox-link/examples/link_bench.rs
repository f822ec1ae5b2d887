//! Pushes packets through a link as fast as the CPU allows and prints the
//! model's throughput (packets and Gbit/s of packet bytes per wall-clock
//! second). The emulator needs >= 1.5 Gbit/s on one core.
//!
//! `cargo run --release -p gearbox-link --example link_bench [packets]`

use std::time::{Duration, Instant};

use bytes::Bytes;
use gearbox_link::{Link, LinkConfig, LossConfig, Trace};

fn bench(name: &str, config: LinkConfig, packets: u64, rate_bps: f64) {
    let mut link: Link<Bytes> = Link::new(config, 1).expect("valid bench config");
    // One shared buffer: cloning `Bytes` is a reference-count bump, so the loop
    // measures the link, not the allocator.
    let mut raw = vec![0u8; 1500];
    raw[0] = 0x45;
    raw[9] = 17;
    let payload = Bytes::from(raw);
    // Offer exactly the link rate: one 1500-byte packet per serialization time.
    let gap = Duration::from_secs_f64(1500.0 * 8.0 / rate_bps);
    let mut now = Duration::ZERO;
    let (mut delivered, mut bytes) = (0u64, 0u64);
    let start = Instant::now();
    for _ in 0..packets {
        link.enqueue(now, payload.clone());
        while let Some(p) = link.poll_transmit(now) {
            delivered += 1;
            bytes += p.len() as u64;
        }
        now += gap;
    }
    let wall = start.elapsed().as_secs_f64();
    println!(
        "{name:<40} {:>6.2} Mpkt/s  {:>6.2} Gbit/s  ({delivered} of {packets} delivered, {:.3} s wall)",
        packets as f64 / wall / 1e6,
        bytes as f64 * 8.0 / wall / 1e9,
        wall
    );
}

fn main() {
    let packets: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5_000_000);
    let rate = 10_000_000_000u64;
    let mut c = LinkConfig {
        delay_ms: Some(10.0),
        ..LinkConfig::constant(rate)
    };
    c.queue.limit_packets = Some(1000);
    bench("constant 10G, delay 10 ms, drop-tail", c, packets, rate as f64);

    let mut c = LinkConfig {
        delay_ms: Some(10.0),
        jitter_ms: Some(2.0),
        loss: LossConfig::Bernoulli { loss_rate: 0.01 },
        ..LinkConfig::constant(rate)
    };
    c.queue.discipline = gearbox_link::Discipline::Codel;
    c.queue.limit_packets = Some(1000);
    bench("constant 10G, jitter, 1% loss, CoDel", c, packets, rate as f64);

    // A trace of 10 opportunities per ms = 120 Mbit/s mean.
    let ts: Vec<u64> = (1..=1000u64).flat_map(|ms| std::iter::repeat_n(ms, 10)).collect();
    let trace = Trace::from_timestamps(ts, "bench").expect("valid trace");
    let mut c = LinkConfig {
        delay_ms: Some(10.0),
        ..LinkConfig::with_trace(trace)
    };
    c.queue.limit_packets = Some(1000);
    bench("trace 120M, delay 10 ms, drop-tail", c, packets, 120e6);
}
