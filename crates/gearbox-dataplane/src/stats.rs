//! Summary statistics of measurements (request completion times, page loads, benchmark
//! repeats), defined once for every crate so that a median in `gearbox load`, in a
//! benchmark and in the Python lab is the same number.
//!
//! Percentiles interpolate linearly between the closest ranks: numpy's default
//! (`method="linear"`, Hyndman & Fan's type 7), which the lab's reports use
//! (docs/telemetry.md, "Percentiles"). Rejected alternative: the nearest rank that
//! `gearbox load` used before, which always returns a measured value but jumps from one
//! sample to the next, so a p90 of 10 requests and one of the lab's could disagree by a
//! whole sample for the same records.

/// The `p`-th percentile (`p` in 0..=100) of `sorted`, which must be in ascending order,
/// by linear interpolation between the closest ranks: with `h = (n - 1) * p / 100`, it is
/// `x[floor h] + (h - floor h) * (x[floor h + 1] - x[floor h])`. `None` when there are
/// no values or `p` is outside 0..=100 (or NaN).
///
/// One value is every percentile of itself; p50 of an even count is the mean of the two
/// middle values.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() || !(0.0..=100.0).contains(&p) {
        return None;
    }
    debug_assert!(
        sorted.windows(2).all(|w| w[0].total_cmp(&w[1]).is_le()),
        "percentile() needs ascending values"
    );
    let h = (sorted.len() - 1) as f64 * p / 100.0;
    let lo = h.floor() as usize;
    let below = sorted[lo];
    let frac = h - lo as f64;
    match sorted.get(lo + 1) {
        // On a rank, or between equal values, the value itself: the same number for
        // finite values, and an infinite one (the gears count a failed request as
        // infinitely many round trips) stays infinite instead of `inf - inf = NaN`.
        Some(&above) if frac > 0.0 && above != below => Some(below + frac * (above - below)),
        _ => Some(below),
    }
}

/// The median (the 50th [`percentile`]) of `values` in any order; `None` for no values.
pub fn median(values: &[f64]) -> Option<f64> {
    percentile(&sorted(values.iter().copied()), 50.0)
}

/// The values in ascending order (`f64::total_cmp`: NaN after every number), ready for
/// [`percentile`].
pub fn sorted(values: impl IntoIterator<Item = f64>) -> Vec<f64> {
    let mut v: Vec<f64> = values.into_iter().collect();
    v.sort_by(f64::total_cmp);
    v
}

/// The arithmetic mean; `None` for no values.
pub fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Equal up to the last bits, where numpy's own rounding may differ from ours.
    fn close(got: Option<f64>, want: f64) -> bool {
        got.is_some_and(|g| (g - want).abs() <= 1e-12 * want.abs().max(1.0))
    }

    #[test]
    fn percentiles_match_numpy_linear_interpolation() {
        // np.percentile([1, 2, 3, 4], [50, 90]) == [2.5, 3.7]
        assert!(close(percentile(&[1.0, 2.0, 3.0, 4.0], 50.0), 2.5));
        assert!(close(percentile(&[1.0, 2.0, 3.0, 4.0], 90.0), 3.7));
        // docs/telemetry.md's example: RCTs 10, 20, 30, 40 ms have p90 37 ms.
        assert!(close(percentile(&[10.0, 20.0, 30.0, 40.0], 90.0), 37.0));
        // np.percentile(np.arange(1, 101), [50, 90, 99]) == [50.5, 90.1, 99.01]
        let hundred: Vec<f64> = (1..=100).map(f64::from).collect();
        assert!(close(percentile(&hundred, 50.0), 50.5));
        assert!(close(percentile(&hundred, 90.0), 90.1));
        assert!(close(percentile(&hundred, 99.0), 99.01));
        // np.percentile([7.5, 0.25, 3, 12, 9], [0, 10, 25, 50, 75, 90, 99, 100])
        let x = sorted([7.5, 0.25, 3.0, 12.0, 9.0]);
        for (p, want) in [
            (0.0, 0.25),
            (10.0, 1.35),
            (25.0, 3.0),
            (50.0, 7.5),
            (75.0, 9.0),
            (90.0, 10.8),
            (99.0, 11.88),
            (100.0, 12.0),
        ] {
            assert!(close(percentile(&x, p), want), "p{p}: {:?}", percentile(&x, p));
        }
    }

    #[test]
    fn one_value_is_every_percentile_and_no_values_have_none() {
        for p in [0.0, 50.0, 90.0, 100.0] {
            assert_eq!(percentile(&[7.0], p), Some(7.0));
        }
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(median(&[]), None);
        assert_eq!(mean(&[]), None);
    }

    #[test]
    fn a_percentile_outside_0_to_100_is_none_not_a_guess() {
        for p in [-1.0, 100.5, f64::NAN] {
            assert_eq!(percentile(&[1.0, 2.0], p), None, "{p}");
        }
    }

    #[test]
    fn infinite_values_give_infinite_percentiles_not_nan() {
        let inf = f64::INFINITY;
        assert_eq!(median(&[40.0, inf, inf]), Some(inf));
        assert_eq!(median(&[inf, 40.0, 30.0]), Some(40.0));
        assert_eq!(median(&[40.0, inf]), Some(inf));
        assert_eq!(percentile(&[1.0, inf], 100.0), Some(inf));
    }

    #[test]
    fn median_sorts_its_input_and_averages_the_middle_pair() {
        assert_eq!(median(&[20.0, 10.0]), Some(15.0));
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(mean(&[1.0, 2.0, 6.0]), Some(3.0));
    }
}
