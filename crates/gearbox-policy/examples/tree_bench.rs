//! Time per row of the compact evaluator ([`TreeEnsemble`]) against the
//! reference walk over the parsed JSON arrays ([`ParsedModel::predict_naive`]),
//! in the same run, on single-row calls as a gear makes them. Prints p50/p90/p99
//! ns per row for rows without missing values and for rows with 5% of values
//! missing (NaN), and the ratio of the medians.
//!
//! ```text
//! cargo run --release -p gearbox-policy --example tree_bench [trees] [depth] [features] [rows]
//! cargo run --release -p gearbox-policy --example tree_bench -- --model m.json [rows]
//! ```
//! Defaults: a synthetic `binary:logistic` model of 300 complete trees of depth
//! 7 (every leaf at full depth: the slowest shape) over 16 features, 20000 rows.
//! With `--model`, any XGBoost JSON model is timed on random rows spread over
//! each feature's split thresholds.

use std::hint::black_box;
use std::time::Instant;

use gearbox_policy::synthetic::{synthetic_model_json, synthetic_rows, SplitMix64, SyntheticSpec};
use gearbox_policy::{ParsedModel, TreeEnsemble};

/// Per-row wall time in ns, each row timed on its own, sorted.
fn time_rows(rows: &[f32], features: usize, mut f: impl FnMut(&[f32]) -> f32) -> Vec<f64> {
    let mut ns = Vec::with_capacity(rows.len() / features);
    let mut sink = 0.0f32;
    for row in rows.chunks_exact(features) {
        let start = Instant::now();
        sink += f(black_box(row));
        ns.push(start.elapsed().as_nanos() as f64);
    }
    black_box(sink);
    ns.sort_by(f64::total_cmp);
    ns
}

/// Rows spread over each feature's split thresholds (plus 10% either side), so
/// a real model's rows take all branches, not one path; `missing` of the values
/// are NaN.
fn rows_for_model(model: &ParsedModel, n: usize, missing: f64, seed: u64) -> Vec<f32> {
    let f = model.num_features;
    let mut range = vec![(f32::INFINITY, f32::NEG_INFINITY); f];
    for tree in &model.trees {
        for (i, &left) in tree.left.iter().enumerate() {
            if left >= 0 {
                let r = &mut range[tree.feature[i] as usize];
                *r = (r.0.min(tree.threshold[i]), r.1.max(tree.threshold[i]));
            }
        }
    }
    let mut rng = SplitMix64::new(seed);
    (0..n * f)
        .map(|i| {
            let (lo, hi) = range[i % f];
            let (lo, hi) = if lo <= hi { (lo as f64, hi as f64) } else { (0.0, 1.0) };
            let width = (hi - lo).max(1e-6);
            let u = rng.unit();
            if rng.unit() < missing {
                f32::NAN
            } else {
                (lo - 0.1 * width + 1.2 * width * u) as f32
            }
        })
        .collect()
}

/// The `p`-th percentile (0..=100) of ascending times.
fn pct(sorted: &[f64], p: f64) -> f64 {
    gearbox_dataplane::stats::percentile(sorted, p).unwrap_or(f64::NAN)
}

/// Best (lowest p50) of three runs, after one warm-up run.
fn best_of_three(rows: &[f32], features: usize, mut f: impl FnMut(&[f32]) -> f32) -> Vec<f64> {
    time_rows(rows, features, &mut f);
    let runs: Vec<Vec<f64>> = (0..3).map(|_| time_rows(rows, features, &mut f)).collect();
    runs.into_iter()
        .min_by(|a, b| pct(a, 50.0).total_cmp(&pct(b, 50.0)))
        .unwrap_or_default()
}

fn line(name: &str, t: &[f64]) {
    println!(
        "    {name:<10} p50 {:>8.0}  p90 {:>8.0}  p99 {:>8.0}",
        pct(t, 50.0),
        pct(t, 90.0),
        pct(t, 99.0)
    );
}

fn fail(message: &str) -> ! {
    eprintln!("tree_bench: {message}");
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, default: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let synthetic = args.first().map(String::as_str) != Some("--model");
    let (json, n_rows, what) = if args.first().map(String::as_str) == Some("--model") {
        let Some(path) = args.get(1) else {
            fail("--model needs a path")
        };
        let json = std::fs::read(path).unwrap_or_else(|e| fail(&format!("{path}: {e}")));
        (json, num(2, 20_000), path.clone())
    } else {
        let spec = SyntheticSpec {
            trees: num(0, 300),
            depth: num(1, 7) as u32,
            num_features: num(2, 16),
            seed: 7,
        };
        (
            synthetic_model_json(&spec).into_bytes(),
            num(3, 20_000),
            "synthetic complete trees".to_string(),
        )
    };

    let t0 = Instant::now();
    let parsed = ParsedModel::from_slice(&json).unwrap_or_else(|e| fail(&format!("{what}: {e}")));
    let parse_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t1 = Instant::now();
    let ensemble = TreeEnsemble::from_parsed(&parsed);
    let layout_ms = t1.elapsed().as_secs_f64() * 1e3;
    let (f, k) = (ensemble.num_features(), ensemble.num_outputs());
    println!(
        "{what}: {} trees, max depth {}, {} nodes, {f} features, {k} outputs ({}); JSON {:.1} MB parsed in \
         {parse_ms:.1} ms, laid out in {layout_ms:.2} ms",
        ensemble.num_trees(),
        ensemble.max_depth(),
        ensemble.num_nodes(),
        ensemble.objective().name(),
        json.len() as f64 / 1e6,
    );

    for (label, missing) in [
        ("rows without missing values", 0.0),
        ("rows with 5% of values missing", 0.05),
    ] {
        let rows = if synthetic {
            synthetic_rows(n_rows, f, missing, 11)
        } else {
            rows_for_model(&parsed, n_rows, missing, 11)
        };
        // Same answers first: the timing means nothing otherwise.
        let mut out = vec![0f32; k];
        for row in rows.chunks_exact(f).take(2000) {
            ensemble.predict(row, &mut out).expect("row fits");
            assert_eq!(out, parsed.predict_naive(row), "compact and reference disagree");
        }
        let compact = best_of_three(&rows, f, |row| {
            let mut out = [0f32; 16];
            let out = &mut out[..k.min(16)];
            match ensemble.predict(row, out) {
                Ok(()) => out[0],
                Err(_) => f32::NAN, // more than 16 outputs: not timed meaningfully
            }
        });
        let reference = best_of_three(&rows, f, |row| parsed.predict_naive(row)[0]);
        let mut batch = vec![0f32; n_rows * k];
        let t2 = Instant::now();
        ensemble.predict_batch(&rows, &mut batch).expect("batch fits");
        let batch_ns = t2.elapsed().as_nanos() as f64 / n_rows as f64;
        println!("  {label}, {n_rows} rows, ns per row:");
        line("compact", &compact);
        line("reference", &reference);
        println!("    compact batch mean {batch_ns:.0} ns/row");
        println!(
            "    reference / compact at p50: {:.1}x",
            pct(&reference, 50.0) / pct(&compact, 50.0)
        );
    }
}
