//! Time per decision of a dense network ([`Mlp`]): by default Floo's actor shape
//! (Floo §3.3, Appendix D: 16 observation features -> 200 Leaky ReLU units ->
//! softmax over 4 controllers) with random weights, on single-row calls as the
//! Floo gear makes them once per connection and selection period. Prints
//! p50/p90/p99 ns per call of `predict_class` (the greedy controller) and of
//! `predict` (the 4 probabilities), best p50 of three runs after a warm-up.
//! The issue's target is ≤ 5 µs per decision.
//!
//! ```text
//! cargo run --release -p gearbox-policy --example mlp_bench [inputs] [hidden] [classes] [rows]
//! cargo run --release -p gearbox-policy --example mlp_bench -- --model policy.json [rows]
//! ```

use std::hint::black_box;
use std::time::Instant;

use gearbox_policy::synthetic::SplitMix64;
use gearbox_policy::Mlp;
use serde_json::json;

/// A `gearbox-mlp` document: inputs -> hidden (Leaky ReLU) -> classes (softmax),
/// weights uniform in ±1/sqrt(fan-in), biases in ±0.5.
fn random_network(inputs: usize, hidden: usize, classes: usize, seed: u64) -> Vec<u8> {
    let mut rng = SplitMix64::new(seed);
    let mut matrix = |rows: usize, cols: usize| -> Vec<Vec<f64>> {
        let scale = 1.0 / (rows as f64).sqrt();
        (0..rows)
            .map(|_| (0..cols).map(|_| (2.0 * rng.unit() - 1.0) * scale).collect())
            .collect()
    };
    let (w1, w2) = (matrix(inputs, hidden), matrix(hidden, classes));
    let mut rng = SplitMix64::new(seed ^ 1);
    let mut bias = |n: usize| -> Vec<f64> { (0..n).map(|_| rng.unit() - 0.5).collect() };
    let doc = json!({
        "format": "gearbox-mlp", "format_version": 1,
        "activation": "leaky_relu", "negative_slope": 0.01,
        "output": "softmax", "num_class": classes,
        "impute": vec![0.0; inputs],
        "layers": [{"weights": w1, "bias": bias(hidden)}, {"weights": w2, "bias": bias(classes)}],
    });
    serde_json::to_vec(&doc).expect("a JSON value serialises")
}

/// Per-call wall time in ns, each row timed on its own, sorted.
fn time_rows(rows: &[f32], features: usize, mut f: impl FnMut(&[f32]) -> usize) -> Vec<f64> {
    let mut ns = Vec::with_capacity(rows.len() / features);
    let mut sink = 0usize;
    for row in rows.chunks_exact(features) {
        let start = Instant::now();
        sink = sink.wrapping_add(f(black_box(row)));
        ns.push(start.elapsed().as_nanos() as f64);
    }
    black_box(sink);
    ns.sort_by(f64::total_cmp);
    ns
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    gearbox_dataplane::stats::percentile(sorted, p).unwrap_or(f64::NAN)
}

/// Best (lowest p50) of three runs, after one warm-up run.
fn best_of_three(rows: &[f32], features: usize, mut f: impl FnMut(&[f32]) -> usize) -> Vec<f64> {
    time_rows(rows, features, &mut f);
    (0..3)
        .map(|_| time_rows(rows, features, &mut f))
        .min_by(|a, b| pct(a, 50.0).total_cmp(&pct(b, 50.0)))
        .unwrap_or_default()
}

fn fail(message: &str) -> ! {
    eprintln!("mlp_bench: {message}");
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, default: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (json, n_rows, what) = if args.first().map(String::as_str) == Some("--model") {
        let Some(path) = args.get(1) else {
            fail("--model needs a path")
        };
        let json = std::fs::read(path).unwrap_or_else(|e| fail(&format!("{path}: {e}")));
        (json, num(2, 20_000), path.clone())
    } else {
        let (inputs, hidden, classes) = (num(0, 16), num(1, 200), num(2, 4));
        (
            random_network(inputs, hidden, classes, 7),
            num(3, 20_000),
            format!("random Leaky ReLU network {inputs} -> {hidden} -> {classes} (softmax)"),
        )
    };
    let mlp = Mlp::from_json_slice(&json).unwrap_or_else(|e| fail(&format!("{what}: {e}")));
    let (f, k) = (mlp.num_features(), mlp.num_outputs());
    println!(
        "{what}: layers {:?}, activation {}, objective {}",
        mlp.layer_sizes(),
        mlp.activation().name(),
        mlp.objective().name()
    );
    // Observations as the env makes them: in [0, 10], a few zeros.
    let mut rng = SplitMix64::new(11);
    let rows: Vec<f32> = (0..n_rows * f)
        .map(|_| {
            if rng.unit() < 0.1 {
                0.0
            } else {
                (rng.unit() * 3.0) as f32
            }
        })
        .collect();
    let mut spread = vec![0usize; k.max(2)];
    for row in rows.chunks_exact(f) {
        spread[mlp.predict_class(row).expect("row fits")] += 1;
    }
    println!("  greedy class counts over {n_rows} rows: {spread:?}");

    let class = best_of_three(&rows, f, |row| mlp.predict_class(row).unwrap_or(usize::MAX));
    let mut out = vec![0f32; k];
    let proba = best_of_three(&rows, f, |row| match mlp.predict(row, &mut out) {
        Ok(()) => out[0].to_bits() as usize,
        Err(_) => usize::MAX,
    });
    println!("  {n_rows} rows, ns per call (each timed alone; includes ~20-30 ns of clock reads):");
    for (name, t) in [("predict_class", &class), ("predict", &proba)] {
        println!(
            "    {name:<14} p50 {:>7.0}  p90 {:>7.0}  p99 {:>7.0}",
            pct(t, 50.0),
            pct(t, 90.0),
            pct(t, 99.0)
        );
    }
}
