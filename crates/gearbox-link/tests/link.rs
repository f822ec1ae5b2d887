//! Behaviour of the composed link, driven the way the emulator and simulator will drive it.

use std::sync::Arc;
use std::time::Duration;

use gearbox_link::{
    DropReason, EventKind, Link, LinkConfig, LossConfig, PolicerConfig, Protocol, ScheduledChange, Trace, Verdict,
};

fn ipv4(proto: u8, len: usize) -> Vec<u8> {
    let mut p = vec![0u8; len.max(20)];
    p[0] = 0x45;
    p[9] = proto;
    p
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// Drains everything due at `now`, returning the packets.
fn drain(link: &mut Link<Vec<u8>>, now: Duration) -> Vec<Vec<u8>> {
    std::iter::from_fn(|| link.poll_transmit(now)).collect()
}

#[test]
fn constant_rate_link_delivers_the_configured_rate_within_one_percent() {
    let rate_bps = 48_000_000u64;
    let mut link: Link<Vec<u8>> = Link::new(LinkConfig::constant(rate_bps), 1).unwrap();
    let mut delivered = 0usize;
    // Offer 1.25x the rate of 1200-byte packets for 20 s, polling every 100 us.
    let mut next_arrival = Duration::ZERO;
    let gap = Duration::from_secs_f64(1200.0 * 8.0 / (rate_bps as f64 * 1.25));
    let end = Duration::from_secs(20);
    let mut now = Duration::ZERO;
    while now < end {
        while next_arrival <= now {
            link.enqueue(next_arrival, ipv4(6, 1200));
            next_arrival += gap;
        }
        delivered += drain(&mut link, now).iter().map(Vec::len).sum::<usize>();
        now += Duration::from_micros(100);
    }
    let measured = delivered as f64 * 8.0 / end.as_secs_f64();
    assert!(
        (measured / rate_bps as f64 - 1.0).abs() < 0.01,
        "measured {measured} bit/s"
    );
}

/// Opportunities (time ms) of a trace with gaps, repeated, up to `until_ms`.
fn opportunities_until(ts: &[u64], until_ms: u64) -> usize {
    let period = *ts.last().unwrap();
    (0..=until_ms / period + 1)
        .map(|c| ts.iter().filter(|&&t| c * period + t <= until_ms).count())
        .sum()
}

#[test]
fn trace_driven_link_delivers_exactly_what_the_opportunities_allow() {
    // Gaps (ms 2-3, 5-8 empty), several opportunities in one ms, repeat every 10 ms.
    let ts = vec![1, 1, 4, 9, 9, 9, 10];
    let trace = Trace::from_timestamps(ts.clone(), "gappy").unwrap();
    let mut link: Link<Vec<u8>> = Link::new(LinkConfig::with_trace(trace), 1).unwrap();
    // A standing backlog of 700-byte packets (not a divisor of 1500: parts of
    // packets are delivered by each opportunity).
    for _ in 0..1000 {
        assert_eq!(link.enqueue(Duration::ZERO, ipv4(6, 700)), Verdict::Queued);
    }
    let mut delivered = 0usize;
    for t in 0..=95u64 {
        delivered += drain(&mut link, ms(t)).iter().map(Vec::len).sum::<usize>();
        let capacity = opportunities_until(&ts, t) * 1500;
        assert_eq!(delivered, capacity / 700 * 700, "at {t} ms");
    }
}

#[test]
fn trace_opportunities_are_wasted_when_the_queue_is_empty() {
    let trace = Trace::from_timestamps(vec![1, 2, 3, 4, 5], "t").unwrap();
    let mut link: Link<Vec<u8>> = Link::new(LinkConfig::with_trace(trace), 1).unwrap();
    // Idle through 3 ms: opportunities 1, 2, 3 are gone. Two packets then need 4 and 5.
    assert!(drain(&mut link, ms(3)).is_empty());
    link.enqueue(ms(3), ipv4(6, 1500));
    link.enqueue(ms(3), ipv4(6, 1500));
    assert_eq!(link.next_wakeup(), Some(ms(4)));
    assert_eq!(drain(&mut link, ms(4)).len(), 1);
    assert_eq!(drain(&mut link, ms(5)).len(), 1);
    // A 100-byte packet uses opportunity 6 (= 1 of the second period); its
    // unused 1400 bytes are not banked for a packet arriving later in that ms.
    link.enqueue(Duration::from_micros(5_500), ipv4(6, 100));
    assert_eq!(drain(&mut link, ms(6)).len(), 1);
    link.enqueue(Duration::from_micros(6_000), ipv4(6, 100));
    assert!(drain(&mut link, Duration::from_micros(6_999)).is_empty());
    assert_eq!(drain(&mut link, ms(7)).len(), 1);
}

/// Feeds `arrivals` (packet i: its index repeated) into `link`, handling it only at
/// arrivals and at `next_wakeup`; with `step_over_departures`, a wake-up that delivers
/// nothing is replayed with `advance_to` instead (the simulator's loop). The delivered
/// packets and how many wake-ups were stepped over.
fn drive_at_events(
    link: &mut Link<Vec<u8>>,
    arrivals: &[Duration],
    step_over_departures: bool,
) -> (Vec<Vec<u8>>, usize) {
    let (mut out, mut i, mut steps) = (Vec::new(), 0, 0);
    loop {
        let wake = link.next_wakeup();
        let next_arrival = arrivals.get(i).copied();
        let t = match (wake, next_arrival) {
            (Some(w), Some(a)) if a <= w => a,
            (Some(w), _) => w,
            (None, Some(a)) => a,
            (None, None) => break,
        };
        if step_over_departures && next_arrival != Some(t) && link.next_delivery().is_none_or(|d| d > t) {
            link.advance_to(t);
            steps += 1;
            continue;
        }
        if next_arrival == Some(t) {
            link.enqueue(t, (i as u32).to_be_bytes().repeat(300));
            i += 1;
        }
        while let Some(p) = link.poll_transmit(t) {
            out.push(p);
        }
    }
    (out, steps)
}

#[test]
fn results_do_not_depend_on_how_often_the_link_is_polled() {
    let config = || LinkConfig {
        delay_ms: Some(15.0),
        jitter_ms: Some(3.0),
        loss: LossConfig::Bernoulli { loss_rate: 0.02 },
        ..LinkConfig::constant(10_000_000)
    };
    let arrivals: Vec<Duration> = (0..3000u64)
        .map(|i| Duration::from_micros(i * 700 + (i % 7) * 90))
        .collect();
    // Dense: poll every 10 us.
    let mut dense: Link<Vec<u8>> = Link::new(config(), 9).unwrap();
    let mut dense_out = Vec::new();
    let mut i = 0;
    let mut now = Duration::ZERO;
    while now < Duration::from_secs(4) {
        while i < arrivals.len() && arrivals[i] <= now {
            dense.enqueue(arrivals[i], (i as u32).to_be_bytes().repeat(300));
            i += 1;
        }
        while let Some(p) = dense.poll_transmit(now) {
            dense_out.push(p);
        }
        now += Duration::from_micros(10);
    }
    // Sparse: only at arrivals and at next_wakeup, like an emulator's timerfd.
    let mut sparse: Link<Vec<u8>> = Link::new(config(), 9).unwrap();
    sparse.set_event_log(true);
    let (sparse_out, _) = drive_at_events(&mut sparse, &arrivals, false);
    assert_eq!(dense_out, sparse_out);
    assert!(sparse_out.len() > 2800 && sparse_out.len() < 3000);
    let sparse_events = sparse.drain_events();
    // Stepped: handled only at arrivals and deliveries, departures from the bottleneck
    // replayed with `advance_to` (the simulator's loop): the same packets and events.
    let mut stepped: Link<Vec<u8>> = Link::new(config(), 9).unwrap();
    stepped.set_event_log(true);
    let (stepped_out, steps) = drive_at_events(&mut stepped, &arrivals, true);
    assert_eq!(stepped_out, sparse_out);
    assert_eq!(format!("{:?}", stepped.drain_events()), format!("{sparse_events:?}"));
    assert!(steps > 1000, "{steps} departures stepped over");
    // Delivery times in the log are model times, in order.
    let delivered: Vec<Duration> = sparse_events
        .into_iter()
        .filter(|e| matches!(e.kind, EventKind::Deliver { .. }))
        .map(|e| e.at)
        .collect();
    assert!(delivered.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn drop_tail_link_holds_the_configured_limit_plus_the_packet_being_sent() {
    let mut c = LinkConfig::constant(12_000_000);
    c.queue.limit_packets = Some(10);
    let mut link: Link<Vec<u8>> = Link::new(c, 1).unwrap();
    let verdicts: Vec<Verdict> = (0..20).map(|_| link.enqueue(Duration::ZERO, ipv4(6, 1500))).collect();
    assert!(verdicts[..11].iter().all(|v| *v == Verdict::Queued));
    assert!(verdicts[11..]
        .iter()
        .all(|v| *v == Verdict::Dropped(DropReason::QueueFull)));
    assert_eq!(link.queue_len_packets(), 10);
}

#[test]
fn bdp_queue_limit_follows_rate_and_rtt() {
    // 12 Mbit/s x 20 ms = 30 000 bytes; 0.5 BDP = 15 000 bytes = 10 packets.
    let mut c = LinkConfig {
        base_rtt_ms: Some(20.0),
        ..LinkConfig::constant(12_000_000)
    };
    c.queue.limit_bdp = Some(0.5);
    let mut link: Link<Vec<u8>> = Link::new(c, 1).unwrap();
    let accepted = (0..30)
        .filter(|_| link.enqueue(Duration::ZERO, ipv4(6, 1500)) == Verdict::Queued)
        .count();
    assert_eq!(accepted, 11);
    assert_eq!(link.queue_len_bytes(), 15_000);
}

#[test]
fn policer_in_the_link_drops_only_the_targeted_protocol() {
    let c = LinkConfig {
        policer: PolicerConfig::Drop {
            protocol: Protocol::Udp,
            drop_rate: 0.5,
        },
        ..LinkConfig::constant(1_000_000_000)
    };
    let mut link: Link<Vec<u8>> = Link::new(c, 5).unwrap();
    let mut udp_dropped = 0;
    for i in 0..10_000u64 {
        let t = Duration::from_micros(i * 20);
        assert_eq!(link.enqueue(t, ipv4(6, 500)), Verdict::Queued, "TCP must pass");
        if link.enqueue(t, ipv4(17, 500)) == Verdict::Dropped(DropReason::PolicerRandom) {
            udp_dropped += 1;
        }
    }
    // Binomial(10 000, 0.5): 99% interval is +-129.
    assert!((udp_dropped as i64 - 5000).abs() < 130, "{udp_dropped}");
    assert_eq!(link.stats().policer_drops, udp_dropped);
}

#[test]
fn schedule_changes_take_effect_at_their_time() {
    // TCP WISE Figs. 7-9: 20 Mbit/s, 20 ms RTT; bandwidth halves at 1 s, delay
    // halves at 2 s, loss becomes 100% at 3 s.
    let mut c = LinkConfig {
        delay_ms: Some(10.0),
        ..LinkConfig::constant(20_000_000)
    };
    c.schedule = vec![
        ScheduledChange {
            at_ms: 2000.0,
            delay_ms: Some(5.0),
            ..Default::default()
        },
        ScheduledChange {
            at_ms: 1000.0,
            rate_bps: Some(10_000_000),
            ..Default::default()
        },
        ScheduledChange {
            at_ms: 3000.0,
            loss: Some(LossConfig::Bernoulli { loss_rate: 1.0 }),
            ..Default::default()
        },
    ];
    // A 50-packet queue drains in 60 ms at 10 Mbit/s, long before 2.5 s.
    c.queue.limit_packets = Some(50);
    let mut link: Link<Vec<u8>> = Link::new(c, 1).unwrap();
    link.set_event_log(true);
    // Saturate: 1500-byte packet every 0.3 ms (40 Mbit/s) until 2 s.
    let mut delivered_per_100ms = vec![0usize; 40];
    let mut t = Duration::ZERO;
    while t < Duration::from_millis(4000) {
        if t < ms(2000) && (t.as_micros() % 300 == 0) {
            link.enqueue(t, ipv4(6, 1500));
        }
        if t >= ms(2500) && t < ms(3500) && (t.as_micros() % 10_000 == 0) {
            link.enqueue(t, ipv4(6, 1500));
        }
        for p in drain(&mut link, t) {
            delivered_per_100ms[(t.as_millis() / 100) as usize] += p.len();
        }
        t += Duration::from_micros(100);
    }
    // Rate: 20 Mbit/s = 250 000 B per 100 ms before 1 s (+ delay), 125 000 after.
    assert!(
        (delivered_per_100ms[5] as i64 - 250_000).abs() <= 1500,
        "{}",
        delivered_per_100ms[5]
    );
    assert!(
        (delivered_per_100ms[15] as i64 - 125_000).abs() <= 1500,
        "{}",
        delivered_per_100ms[15]
    );
    // Delay: a lone packet at 2.5 s (queue long drained) arrives after 5 ms + 1.2 ms serialization.
    let events = link.drain_events();
    let seq_at = |at: Duration| {
        events
            .iter()
            .find(|e| e.kind == EventKind::Enqueue && e.at == at)
            .unwrap()
            .seq
    };
    let delivered_at = |seq: u64| {
        events
            .iter()
            .find(|e| e.seq == seq && matches!(e.kind, EventKind::Deliver { .. }))
            .map(|e| e.at)
    };
    let s = seq_at(ms(2500));
    assert_eq!(delivered_at(s), Some(ms(2500) + Duration::from_micros(1200) + ms(5)));
    // Loss: everything offered from 3 s on is lost, nothing before 3 s is.
    let after = events
        .iter()
        .filter(|e| e.kind == EventKind::Enqueue && e.at >= ms(3000))
        .count();
    let lost = events
        .iter()
        .filter(|e| e.kind == EventKind::Drop(DropReason::RandomLoss))
        .count();
    assert_eq!(after, 50);
    assert_eq!(lost, after);
}

#[test]
fn switching_from_rate_to_trace_starts_the_trace_at_the_change() {
    let trace = Arc::new(Trace::from_timestamps(vec![5, 10], "t").unwrap());
    let mut c = LinkConfig::constant(1_000_000_000);
    c.schedule = vec![ScheduledChange {
        at_ms: 100.0,
        trace: Some(trace),
        ..Default::default()
    }];
    let mut link: Link<Vec<u8>> = Link::new(c, 1).unwrap();
    for _ in 0..3 {
        link.enqueue(ms(100), ipv4(6, 1500));
    }
    assert_eq!(link.next_wakeup(), Some(ms(105)));
    assert_eq!(drain(&mut link, ms(104)).len(), 0);
    assert_eq!(drain(&mut link, ms(105)).len(), 1);
    assert_eq!(drain(&mut link, ms(115)).len(), 2);
}

#[test]
fn the_same_seed_gives_the_same_run_and_another_seed_another() {
    let run = |seed: u64| {
        let c = LinkConfig {
            delay_ms: Some(20.0),
            jitter_ms: Some(4.0),
            allow_reorder: true,
            loss: LossConfig::GilbertElliottMean {
                mean_loss_rate: 0.05,
                mean_burst_packets: 3.0,
            },
            policer: PolicerConfig::Drop {
                protocol: Protocol::Udp,
                drop_rate: 0.1,
            },
            log_events: true,
            ..LinkConfig::constant(50_000_000)
        };
        let mut link: Link<Vec<u8>> = Link::new(c, seed).unwrap();
        for i in 0..5000u64 {
            let t = Duration::from_micros(i * 100);
            link.enqueue(t, ipv4(if i % 2 == 0 { 6 } else { 17 }, 1000));
            drain(&mut link, t);
        }
        drain(&mut link, Duration::from_secs(10));
        link.drain_events()
    };
    assert_eq!(run(42), run(42));
    assert_ne!(run(42), run(43));
}

#[test]
fn a_missing_trace_file_is_an_error_naming_it() {
    let c = LinkConfig {
        trace_file: Some("/no/such/file.trace".into()),
        ..Default::default()
    };
    let e = Link::<Vec<u8>>::new(c, 1).unwrap_err();
    assert!(e.to_string().contains("/no/such/file.trace"), "{e}");
}

#[test]
fn codel_link_drops_under_a_standing_queue_but_not_a_short_burst() {
    let codel = || {
        let mut c = LinkConfig::constant(12_000_000);
        c.queue.discipline = gearbox_link::Discipline::Codel;
        c.queue.limit_packets = Some(10_000);
        c.log_events = true;
        Link::<Vec<u8>>::new(c, 1).unwrap()
    };
    // Standing queue: 2x overload for 5 s.
    let mut link = codel();
    for i in 0..10_000u64 {
        let t = Duration::from_micros(i * 500);
        link.enqueue(t, ipv4(6, 1500));
        drain(&mut link, t);
    }
    let events = link.drain_events();
    let codel_drops = events
        .iter()
        .filter(|e| e.kind == EventKind::Drop(DropReason::Codel))
        .count();
    assert!(codel_drops > 100, "{codel_drops}");
    assert!(events.iter().all(|e| e.kind != EventKind::Drop(DropReason::QueueFull)));
    // Short burst: 30 packets at once drain in 30 ms < 100 ms interval.
    let mut link = codel();
    for _ in 0..30 {
        link.enqueue(Duration::ZERO, ipv4(6, 1500));
    }
    assert_eq!(drain(&mut link, Duration::from_secs(1)).len(), 30);
    assert_eq!(link.stats().queue_drops, 0);
}

#[test]
fn asking_ahead_hands_out_a_delayed_packet_early_but_never_one_still_queued() {
    let mut config = LinkConfig::constant(1_000_000);
    config.delay_ms = Some(20.0);
    let mut link: Link<Vec<u8>> = Link::new(config, 1).unwrap();
    link.set_event_log(true);
    // 1000 bytes at 1 Mbit/s: 8 ms in the bottleneck, then 20 ms of delay: due at 28 ms.
    link.enqueue(ms(0), ipv4(17, 1000));
    let lead = ms(5);
    assert_eq!(link.next_wakeup_ahead(lead), Some(ms(8)), "the departure is not led");
    assert!(link.poll_transmit_ahead(ms(8), lead).is_none());
    assert_eq!(link.next_wakeup_ahead(lead), Some(ms(23)));
    assert!(link.poll_transmit_ahead(ms(22), lead).is_none());
    assert!(link.poll_transmit_ahead(ms(23), lead).is_some());
    let deliver = link
        .drain_events()
        .into_iter()
        .find(|e| matches!(e.kind, EventKind::Deliver { .. }));
    assert_eq!(deliver.map(|e| e.at), Some(ms(28)), "the log keeps the scheduled time");
    // A delay shorter than the lead: the packet leaves when it departs, not before.
    let mut config = LinkConfig::constant(1_000_000);
    config.delay_ms = Some(1.0);
    let mut link: Link<Vec<u8>> = Link::new(config, 1).unwrap();
    link.enqueue(ms(0), ipv4(17, 1000));
    assert!(
        link.poll_transmit_ahead(ms(7), lead).is_none(),
        "still in the bottleneck"
    );
    assert!(link.poll_transmit_ahead(ms(8), lead).is_some());
    assert_eq!(link.now(), ms(8), "asking ahead does not move the link's clock");
}
