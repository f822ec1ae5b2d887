//! The trace generators match the statistics docs/traces.md states.
//! Run with `--nocapture` to print the table that the doc quotes.

use gearbox_link::tracegen::{measure, square_wave, step, Preset};

#[test]
fn presets_match_their_target_mean_and_variability() {
    println!("| preset | duration s | mean Mbit/s (target) | CV 1 s (process CV) | fades | mean fade s | fade depth |");
    println!("|---|---|---|---|---|---|---|");
    for preset in Preset::ALL {
        let p = preset.params();
        // 5G traces are large in mahimahi form (one line per 1500 bytes): shorter.
        let duration_s = if p.mean_bps > 100e6 { 300.0 } else { 1200.0 };
        let trace = preset.generate(duration_s, 2024).unwrap();
        let s = measure(&trace);
        println!(
            "| {} | {duration_s} | {:.2} ({:.1}) | {:.2} ({:.2}) | {} | {:.2} | {:.3} |",
            preset.name(),
            s.mean_bps / 1e6,
            p.mean_bps / 1e6,
            s.cv_1s,
            p.cv,
            s.fades,
            s.mean_fade_s,
            s.fade_depth
        );
        let mean_err = s.mean_bps / p.mean_bps - 1.0;
        assert!(
            mean_err.abs() < 0.12,
            "{}: mean off by {:.1}%",
            preset.name(),
            mean_err * 100.0
        );
        // 1-s bins smooth the 100-ms process a little; fades add variability.
        assert!(
            s.cv_1s > 0.6 * p.cv && s.cv_1s < 1.6 * p.cv,
            "{}: cv {}",
            preset.name(),
            s.cv_1s
        );
        if let Some(f) = p.fades {
            let expected = duration_s / (f.mean_interval_s + f.mean_duration_s);
            assert!(s.fades as f64 > 0.6 * expected, "{}: {} fades", preset.name(), s.fades);
            assert!(s.fade_depth < 0.1, "{}: fade depth {}", preset.name(), s.fade_depth);
        }
    }
}

#[test]
fn high_speed_rail_has_deep_multi_second_fades() {
    let trace = Preset::HighSpeedRail.generate(1200.0, 7).unwrap();
    let s = measure(&trace);
    assert!(s.fades >= 60, "{} fades in 20 min", s.fades);
    assert!(
        s.mean_fade_s > 1.0 && s.mean_fade_s < 3.0,
        "mean fade {} s",
        s.mean_fade_s
    );
    assert!(s.fade_depth < 0.05, "depth {}", s.fade_depth);
}

#[test]
fn generators_are_deterministic_for_a_seed() {
    let a = Preset::Lte4gMobile.generate(60.0, 1).unwrap();
    assert_eq!(a, Preset::Lte4gMobile.generate(60.0, 1).unwrap());
    assert_ne!(a, Preset::Lte4gMobile.generate(60.0, 2).unwrap());
}

#[test]
fn square_and_step_traces_have_the_stated_rates() {
    let sq = square_wave(24e6, 12e6, 1.0, 10.0).unwrap();
    assert!((sq.mean_rate_bps() - 18e6).abs() < 18e6 * 0.001);
    let per_s = sq.binned_rate_bps(1000);
    assert!(
        (per_s[0] - 24e6).abs() < 0.1e6 && (per_s[1] - 12e6).abs() < 0.1e6,
        "{per_s:?}"
    );
    let st = step(12e6, 6e6, 5.0, 10.0).unwrap();
    let per_s = st.binned_rate_bps(1000);
    assert!(
        (per_s[4] - 12e6).abs() < 0.1e6 && (per_s[5] - 6e6).abs() < 0.1e6,
        "{per_s:?}"
    );
}
