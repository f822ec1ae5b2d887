//! The congestion-control suite on the emulator (docs/cc.md "Validation"): our edge
//! serves HTTP/3 downloads with each of the suite's controllers over an emulated
//! bottleneck, and the relay's own event log says how busy the bottleneck was and how
//! long packets queued there (`common/transfer.rs`). Needs root and /dev/net/tun, like
//! every emulator test. The full tables come from `examples/cc_validate.rs`.

mod common;

use common::transfer::{run, Download, Measured};
use common::{scratch, setup};

fn measure(d: &Download) -> Measured {
    let dir = scratch(&format!("cc-{}-{}-{}", d.cc, d.mbit, d.bdps));
    let m = run(d, &dir).unwrap_or_else(|e| panic!("{}: {e}", d.cc));
    eprintln!(
        "{} {}: {} Mbit/s, {} ms, {} BDP, loss {}: utilisation {:.3}, mean queueing delay {:.1} ms",
        d.proto, d.cc, d.mbit, d.rtt_ms, d.bdps, d.loss, m.utilisation, m.mean_queue_ms
    );
    let _ = std::fs::remove_dir_all(&dir);
    m
}

/// Every download runs with the edge's default `[limits]`, so the Cubic at 50 Mbit/s
/// also shows that the default QUIC send window (`quic_send_window_bytes`) is no
/// throughput bound on a 50 Mbit/s, 40 ms path.
#[test]
fn every_suite_controller_fills_a_10_and_a_50_mbit_bottleneck() {
    let _g = setup();
    let mut short = Vec::new();
    for cc in ["newreno", "cubic", "bbr", "copa", "westwood", "vivace"] {
        for mbit in [10.0, 50.0] {
            // At 10 Mbit/s a loss-based sawtooth lasts ~1.7 s (42 packets of growth at
            // one per 40 ms RTT): 12 s of download average several whole cycles.
            let seconds = if mbit < 20.0 { 12.0 } else { 8.0 };
            let m = measure(&Download {
                seconds,
                ..Download::quic(cc, mbit, 40.0, 1.0)
            });
            if m.utilisation < 0.9 {
                short.push(format!("{cc} at {mbit} Mbit/s: {:.3}", m.utilisation));
            }
        }
    }
    assert!(short.is_empty(), "utilisation below 90%: {short:?}");
}

#[test]
fn copa_and_bbr_keep_a_deep_buffer_emptier_than_cubic() {
    let _g = setup();
    let deep = |cc: &str| {
        measure(&Download {
            seconds: 10.0,
            ..Download::quic(cc, 10.0, 40.0, 4.0)
        })
    };
    let (cubic, copa, bbr) = (deep("cubic"), deep("copa"), deep("bbr"));
    // Cubic fills the 4-BDP (160 ms) buffer until it overflows.
    assert!(cubic.mean_queue_ms > 40.0, "cubic queue {:.1} ms", cubic.mean_queue_ms);
    assert!(
        copa.mean_queue_ms < cubic.mean_queue_ms / 3.0,
        "copa {:.1} ms vs cubic {:.1} ms",
        copa.mean_queue_ms,
        cubic.mean_queue_ms
    );
    // BBR's ProbeBW keeps about one BDP in flight: near the min RTT, far below Cubic.
    assert!(
        bbr.mean_queue_ms < cubic.mean_queue_ms / 2.0,
        "bbr {:.1} ms vs cubic {:.1} ms",
        bbr.mean_queue_ms,
        cubic.mean_queue_ms
    );
    assert!(copa.utilisation > 0.8 && bbr.utilisation > 0.9);
}

/// Floo Fig. 15's shape on kernel TCP: gearbox's BPF Westwood+ (`--tcp-cc westwood`,
/// `crates/gearbox-bpf`) keeps far more of a randomly lossy link than the kernel's
/// Cubic, because a random loss sets its window to the measured pipe instead of
/// halving it. (docs/cc.md "Random loss": 56% against 28.5% at 1% loss.)
#[test]
fn kernel_westwood_keeps_more_of_a_lossy_link_than_kernel_cubic() {
    let _g = setup();
    let lossy = |cc: &str| {
        measure(&Download {
            proto: "tcp",
            loss: 0.01,
            seconds: 5.0,
            ..Download::quic(cc, 10.0, 40.0, 1.0)
        })
    };
    let (cubic, westwood) = (lossy("cubic"), lossy("westwood"));
    assert!(
        westwood.utilisation > 1.3 * cubic.utilisation,
        "westwood {:.3} vs cubic {:.3}",
        westwood.utilisation,
        cubic.utilisation
    );
}

/// The edge's default per-connection buffers (`[limits]`, docs/edge.md "Memory") are
/// memory bounds, and must not be throughput bounds on the lab's paths: one HTTP/2
/// download at 50 Mbit/s, 40 ms (kernel CUBIC, the edge's `h2_send_buffer_bytes`) fills
/// the bottleneck. HTTP/3's `quic_send_window_bytes` is checked by
/// `every_suite_controller_fills_a_10_and_a_50_mbit_bottleneck`, whose Cubic at 50 Mbit/s
/// is the same download over QUIC with the same default limits (it was run twice, once
/// here, until CI's time ran short).
#[test]
fn the_default_h2_send_buffer_fills_a_50_mbit_40_ms_path() {
    let _g = setup();
    let m = measure(&Download {
        proto: "tcp",
        ..Download::quic("cubic", 50.0, 40.0, 1.0)
    });
    assert!(
        m.utilisation >= 0.9,
        "HTTP/2 utilisation below 90%: {:.3}",
        m.utilisation
    );
}
