//! Empirical distributions as piecewise-linear CDF tables.
//!
//! The papers publish their workloads as CDF plots (Floo Fig. 5, TCP WISE Fig. 10) or as a
//! few summary numbers, so a distribution here is what a reader can copy off such a plot:
//! a short list of `(value, cumulative probability)` points. Between two points the CDF is
//! a straight line (values uniform within the segment); a first point with probability
//! above zero, or two points with the same value, is an atom (e.g. Floo's 38.4% of
//! requests sent concurrently, gap exactly 0 ms). Sampling inverts the table.
//!
//! Rejected alternative: fitting parametric families (log-normal, Pareto). Their parameters
//! are not what the papers report, and a fitted tail would silently move the statistics the
//! tests check; a table keeps the published points exact and is easy to replace by a user.

use rand::{Rng, RngExt};
use serde::{Deserialize, Serialize};

/// A piecewise-linear cumulative distribution function.
///
/// Invariants (checked by [`Cdf::new`] and when a table is read from TOML): at least one
/// point; every value and probability finite; values non-decreasing; probabilities
/// non-decreasing, within `[0, 1]`, the last exactly 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Vec<[f64; 2]>", into = "Vec<[f64; 2]>")]
pub struct Cdf {
    /// `(value, P(X <= value))` points, in increasing order.
    points: Vec<(f64, f64)>,
}

/// Why a table is not a valid CDF.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CdfError {
    /// The table has no points.
    #[error("a CDF needs at least one [value, cumulative_probability] point")]
    Empty,
    /// A value or probability is NaN or infinite.
    #[error("point {index} ([{value}, {probability}]) is not finite")]
    NotFinite {
        /// Position of the point in the table (0-based).
        index: usize,
        /// The point's value.
        value: f64,
        /// The point's cumulative probability.
        probability: f64,
    },
    /// A cumulative probability lies outside `[0, 1]`.
    #[error("point {index}: cumulative probability {probability} is outside [0, 1]")]
    ProbabilityOutOfRange {
        /// Position of the point in the table (0-based).
        index: usize,
        /// The offending probability.
        probability: f64,
    },
    /// A value or a probability decreases from one point to the next.
    #[error("point {index} ([{value}, {probability}]) goes back from the previous point; values and cumulative probabilities must be non-decreasing")]
    NotMonotone {
        /// Position of the point in the table (0-based).
        index: usize,
        /// The point's value.
        value: f64,
        /// The point's cumulative probability.
        probability: f64,
    },
    /// The last cumulative probability is not 1.
    #[error("the last cumulative probability is {last}, it must be 1")]
    DoesNotEndAtOne {
        /// The last probability in the table.
        last: f64,
    },
}

impl Cdf {
    /// Builds a CDF from `(value, cumulative probability)` points, validating the invariants.
    pub fn new(points: Vec<(f64, f64)>) -> Result<Self, CdfError> {
        if points.is_empty() {
            return Err(CdfError::Empty);
        }
        let mut previous: Option<(f64, f64)> = None;
        for (index, &(value, probability)) in points.iter().enumerate() {
            if !value.is_finite() || !probability.is_finite() {
                return Err(CdfError::NotFinite {
                    index,
                    value,
                    probability,
                });
            }
            if !(0.0..=1.0).contains(&probability) {
                return Err(CdfError::ProbabilityOutOfRange { index, probability });
            }
            if let Some((previous_value, previous_probability)) = previous {
                if value < previous_value || probability < previous_probability {
                    return Err(CdfError::NotMonotone {
                        index,
                        value,
                        probability,
                    });
                }
            }
            previous = Some((value, probability));
        }
        let last = points[points.len() - 1].1;
        if last != 1.0 {
            return Err(CdfError::DoesNotEndAtOne { last });
        }
        Ok(Self { points })
    }

    /// A distribution that always yields `value`.
    pub fn constant(value: f64) -> Result<Self, CdfError> {
        Self::new(vec![(value, 1.0)])
    }

    /// The distribution that is always 0 (e.g. all requests of a click sent at once).
    pub fn zero() -> Self {
        Self {
            points: vec![(0.0, 1.0)],
        }
    }

    /// The `(value, cumulative probability)` points of the table.
    pub fn points(&self) -> &[(f64, f64)] {
        &self.points
    }

    /// The smallest value the distribution can yield.
    pub fn min(&self) -> f64 {
        self.points[0].0
    }

    /// The largest value the distribution can yield.
    pub fn max(&self) -> f64 {
        self.points[self.points.len() - 1].0
    }

    /// The value below or at which a fraction `p` of samples fall (inverse CDF).
    ///
    /// `p` is clamped to `[0, 1]`; NaN is treated as 0.
    pub fn quantile(&self, p: f64) -> f64 {
        let p = if p.is_nan() { 0.0 } else { p.clamp(0.0, 1.0) };
        let (first_value, first_probability) = self.points[0];
        if p <= first_probability {
            return first_value;
        }
        for pair in self.points.windows(2) {
            let (v0, p0) = pair[0];
            let (v1, p1) = pair[1];
            if p <= p1 {
                // p0 < p <= p1 here, so the division is safe.
                return v0 + (v1 - v0) * (p - p0) / (p1 - p0);
            }
        }
        self.max()
    }

    /// `P(X <= value)`.
    pub fn probability_at_most(&self, value: f64) -> f64 {
        let (first_value, first_probability) = self.points[0];
        if value < first_value {
            return 0.0;
        }
        let mut probability = first_probability;
        for pair in self.points.windows(2) {
            let (v0, p0) = pair[0];
            let (v1, p1) = pair[1];
            if value >= v1 {
                probability = p1;
            } else {
                if v1 > v0 && value >= v0 {
                    probability = p0 + (p1 - p0) * (value - v0) / (v1 - v0);
                }
                break;
            }
        }
        probability
    }

    /// The exact mean of the piecewise-linear distribution.
    pub fn mean(&self) -> f64 {
        let (first_value, first_probability) = self.points[0];
        let mut mean = first_value * first_probability;
        for pair in self.points.windows(2) {
            let (v0, p0) = pair[0];
            let (v1, p1) = pair[1];
            mean += (p1 - p0) * (v0 + v1) / 2.0;
        }
        mean
    }

    /// Draws one value by inverse-transform sampling.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        let u: f64 = rng.random();
        self.quantile(u)
    }
}

impl TryFrom<Vec<[f64; 2]>> for Cdf {
    type Error = CdfError;

    fn try_from(table: Vec<[f64; 2]>) -> Result<Self, Self::Error> {
        Self::new(
            table
                .into_iter()
                .map(|[value, probability]| (value, probability))
                .collect(),
        )
    }
}

impl From<Cdf> for Vec<[f64; 2]> {
    fn from(cdf: Cdf) -> Self {
        cdf.points
            .into_iter()
            .map(|(value, probability)| [value, probability])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn quantiles_interpolate_between_points_and_atoms_hold_their_mass() {
        let cdf = Cdf::new(vec![(0.0, 0.4), (10.0, 0.8), (20.0, 1.0)]).unwrap();
        assert_eq!(cdf.quantile(0.1), 0.0);
        assert_eq!(cdf.quantile(0.4), 0.0);
        assert!((cdf.quantile(0.6) - 5.0).abs() < 1e-9);
        assert!((cdf.quantile(0.9) - 15.0).abs() < 1e-9);
        assert_eq!(cdf.quantile(1.0), 20.0);
        assert!((cdf.probability_at_most(5.0) - 0.6).abs() < 1e-9);
        assert_eq!(cdf.probability_at_most(-1.0), 0.0);
        assert_eq!(cdf.probability_at_most(25.0), 1.0);
        // 0.4*0 + 0.4*5 + 0.2*15
        assert!((cdf.mean() - 5.0).abs() < 1e-9);
    }

    #[test]
    fn sampled_mean_agrees_with_the_exact_mean() {
        let cdf = Cdf::new(vec![(100.0, 0.0), (1000.0, 0.5), (10_000.0, 1.0)]).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let n = 100_000;
        let sum: f64 = (0..n).map(|_| cdf.sample(&mut rng)).sum();
        let sampled = sum / n as f64;
        assert!((sampled / cdf.mean() - 1.0).abs() < 0.02, "{sampled} vs {}", cdf.mean());
    }

    #[test]
    fn malformed_tables_are_rejected_with_the_reason() {
        assert_eq!(Cdf::new(vec![]), Err(CdfError::Empty));
        assert!(matches!(
            Cdf::new(vec![(1.0, 0.5), (0.5, 1.0)]),
            Err(CdfError::NotMonotone { index: 1, .. })
        ));
        assert!(matches!(
            Cdf::new(vec![(1.0, 0.5), (2.0, 0.4)]),
            Err(CdfError::NotMonotone { index: 1, .. })
        ));
        assert!(matches!(
            Cdf::new(vec![(1.0, 1.5)]),
            Err(CdfError::ProbabilityOutOfRange { .. })
        ));
        assert!(matches!(
            Cdf::new(vec![(1.0, 0.2), (2.0, 0.9)]),
            Err(CdfError::DoesNotEndAtOne { .. })
        ));
        assert!(matches!(
            Cdf::new(vec![(f64::NAN, 1.0)]),
            Err(CdfError::NotFinite { .. })
        ));
    }
}
