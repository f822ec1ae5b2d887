//! Seeded synthetic trace generators.
//!
//! Real traces cannot be downloaded in this lab (docs/architecture.md "Choices
//! made"), so these generators produce *synthetic imitations* of the public
//! trace families the papers train and evaluate on (Floo Table 6:
//! Lumos 4G/5G, NYC, PiTree, HSR, FCC18, Ghent; and the mahimahi LTE traces).
//! They match only the first-order statistics stated per preset (mean level,
//! coefficient of variation, time scale of variation, fades); they are not the
//! real traces and results on them are not results on those traces.
//! docs/traces.md lists each preset, the family it imitates and the statistics
//! measured on the output by `tests/tracegen.rs`.
//!
//! Model: the rate is a log-normal process whose log follows a stationary AR(1)
//! (a sampled Ornstein-Uhlenbeck process) with correlation time `tau_s`, sampled
//! every 100 ms. A log-normal with `sigma^2 = ln(1 + cv^2)` and
//! `mu = ln(mean) - sigma^2/2` has exactly the requested mean and CV, and the
//! AR(1) keeps that marginal at every step. Optional fades (handovers, tunnels,
//! mmWave blockage) multiply the rate by `depth` for a duration drawn uniformly
//! in `[0.5, 1.5] x mean_duration_s`, separated by gaps drawn the same way
//! around `mean_interval_s` — near-periodic, as handovers along a railway are.
//! The base level is raised by `1 / (1 - f (1 - depth))`, `f` the fraction of
//! time in fades, so fades do not change the long-run mean.
//!
//! A random-walk or Markov-chain of discrete levels was the alternative; it
//! gives step-like traces whose CV depends on the number of levels, and is
//! harder to set to a target mean and CV.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::trace::{Trace, TraceError};

/// Sampling step of the generated rate process, seconds.
pub const STEP_S: f64 = 0.1;

/// Fades: deep, short drops of the rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fades {
    /// Mean time between the end of one fade and the start of the next, s.
    pub mean_interval_s: f64,
    /// Mean fade duration, s.
    pub mean_duration_s: f64,
    /// Rate during a fade as a fraction of what it would have been (e.g. 0.02).
    pub depth: f64,
}

/// Parameters of the rate process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessParams {
    /// Long-run mean rate, bits per second.
    pub mean_bps: f64,
    /// Coefficient of variation (std/mean) of the rate outside fades.
    pub cv: f64,
    /// Correlation time of the log-rate, s (how long a good or bad spell lasts).
    pub tau_s: f64,
    /// Optional fades.
    pub fades: Option<Fades>,
}

/// Named presets, each imitating a family of public traces (see docs/traces.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// 3G/HSDPA-like (Norway HSDPA commute traces, low-rate FCC broadband as used in ABR work).
    Hsdpa3g,
    /// Stationary 4G/LTE (PiTree indoor, FCC18, NYC and Lumos stationary).
    Lte4gStationary,
    /// Mobile 4G/LTE (mahimahi Verizon/T-Mobile LTE driving, NYC bus/taxi, Lumos driving, Ghent).
    Lte4gMobile,
    /// Stationary 5G mmWave (Lumos5G stationary).
    Nr5gStationary,
    /// Mobile 5G mmWave with blockage (Lumos5G walking/driving).
    Nr5gMobile,
    /// WiFi: office and busy public WiFi (the WiFi traces of Floo §5.2).
    Wifi,
    /// 4G on high-speed rail, with deep handover fades (HSR traces, Floo Table 6 [30]).
    HighSpeedRail,
}

impl Preset {
    /// All presets.
    pub const ALL: [Preset; 7] = [
        Preset::Hsdpa3g,
        Preset::Lte4gStationary,
        Preset::Lte4gMobile,
        Preset::Nr5gStationary,
        Preset::Nr5gMobile,
        Preset::Wifi,
        Preset::HighSpeedRail,
    ];

    /// Short name (for files and reports).
    pub fn name(self) -> &'static str {
        match self {
            Preset::Hsdpa3g => "3g-hsdpa",
            Preset::Lte4gStationary => "4g-stationary",
            Preset::Lte4gMobile => "4g-mobile",
            Preset::Nr5gStationary => "5g-stationary",
            Preset::Nr5gMobile => "5g-mobile",
            Preset::Wifi => "wifi",
            Preset::HighSpeedRail => "high-speed-rail",
        }
    }

    /// The process parameters of this preset. These are our choices of typical
    /// magnitudes, not statistics measured on the real datasets.
    pub fn params(self) -> ProcessParams {
        let p = |mean_mbps: f64, cv: f64, tau_s: f64, fades| ProcessParams {
            mean_bps: mean_mbps * 1e6,
            cv,
            tau_s,
            fades,
        };
        match self {
            Preset::Hsdpa3g => p(1.5, 0.5, 3.0, None),
            Preset::Lte4gStationary => p(20.0, 0.25, 5.0, None),
            Preset::Lte4gMobile => p(
                12.0,
                0.7,
                1.5,
                Some(Fades {
                    mean_interval_s: 30.0,
                    mean_duration_s: 0.5,
                    depth: 0.05,
                }),
            ),
            Preset::Nr5gStationary => p(300.0, 0.35, 5.0, None),
            Preset::Nr5gMobile => p(
                150.0,
                1.0,
                1.0,
                Some(Fades {
                    mean_interval_s: 10.0,
                    mean_duration_s: 1.0,
                    depth: 0.02,
                }),
            ),
            Preset::Wifi => p(30.0, 0.4, 0.5, None),
            Preset::HighSpeedRail => p(
                6.0,
                0.8,
                1.0,
                Some(Fades {
                    mean_interval_s: 12.0,
                    mean_duration_s: 2.0,
                    depth: 0.02,
                }),
            ),
        }
    }

    /// Generates `duration_s` seconds of this preset.
    pub fn generate(self, duration_s: f64, seed: u64) -> Result<Trace, TraceError> {
        generate(&self.params(), duration_s, seed)
    }
}

/// A standard normal sample (Box-Muller; rand 0.10 alone has no normal distribution).
fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>(); // (0, 1], keeps ln finite
    let u2: f64 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// The rate series `(time_s, rate_bps)` of the process, one sample per [`STEP_S`].
pub fn rate_series(params: &ProcessParams, duration_s: f64, seed: u64) -> Vec<(f64, f64)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let sigma2 = (1.0 + params.cv * params.cv).ln();
    let sigma = sigma2.sqrt();
    let fade_fraction = params.fades.map_or(0.0, |f| {
        f.mean_duration_s / (f.mean_duration_s + f.mean_interval_s) * (1.0 - f.depth)
    });
    let level = params.mean_bps / (1.0 - fade_fraction).max(1e-9);
    let mu = level.ln() - sigma2 / 2.0;
    let rho = (-STEP_S / params.tau_s.max(1e-9)).exp();
    let innovation = (1.0 - rho * rho).sqrt() * sigma;
    let steps = (duration_s / STEP_S).ceil() as usize;
    let mut x = sigma * normal(&mut rng); // start in the stationary distribution
    let uniform_around = |rng: &mut ChaCha8Rng, mean: f64| mean * (0.5 + rng.random::<f64>());
    // Fade schedule: time the next fade starts / the current one ends.
    let mut in_fade = false;
    let mut fade_switch_s = params
        .fades
        .map_or(f64::INFINITY, |f| uniform_around(&mut rng, f.mean_interval_s));
    let mut out = Vec::with_capacity(steps);
    for i in 0..steps {
        let t = i as f64 * STEP_S;
        if let Some(f) = params.fades {
            while t >= fade_switch_s {
                in_fade = !in_fade;
                let mean = if in_fade { f.mean_duration_s } else { f.mean_interval_s };
                fade_switch_s += uniform_around(&mut rng, mean);
            }
        }
        let factor = match (in_fade, params.fades) {
            (true, Some(f)) => f.depth,
            _ => 1.0,
        };
        out.push((t, (mu + x).exp() * factor));
        x = rho * x + innovation * normal(&mut rng);
    }
    out
}

/// Generates a mahimahi trace of the process.
pub fn generate(params: &ProcessParams, duration_s: f64, seed: u64) -> Result<Trace, TraceError> {
    Trace::from_throughput_series(&rate_series(params, duration_s, seed), duration_s)
}

/// A square wave alternating `high_bps` and `low_bps`, each for `half_period_s`, starting high.
pub fn square_wave(high_bps: f64, low_bps: f64, half_period_s: f64, duration_s: f64) -> Result<Trace, TraceError> {
    if !(half_period_s.is_finite() && half_period_s > 0.0) {
        return Err(TraceError::Series(format!(
            "half_period_s must be positive, got {half_period_s}"
        )));
    }
    let n = (duration_s / half_period_s).ceil().max(1.0) as usize;
    let series: Vec<(f64, f64)> = (0..n)
        .map(|i| (i as f64 * half_period_s, if i % 2 == 0 { high_bps } else { low_bps }))
        .collect();
    Trace::from_throughput_series(&series, duration_s)
}

/// A step from `before_bps` to `after_bps` at `at_s`.
pub fn step(before_bps: f64, after_bps: f64, at_s: f64, duration_s: f64) -> Result<Trace, TraceError> {
    Trace::from_throughput_series(&[(0.0, before_bps), (at_s, after_bps)], duration_s)
}

/// Statistics of a trace, as reported in docs/traces.md.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceStats {
    /// Mean capacity, bits per second.
    pub mean_bps: f64,
    /// Coefficient of variation of the capacity in 1-second bins.
    pub cv_1s: f64,
    /// Number of fades: maximal runs of 100-ms bins below 10% of the mean.
    pub fades: usize,
    /// Mean fade duration, s (0 without fades).
    pub mean_fade_s: f64,
    /// Mean capacity during fades as a fraction of the overall mean.
    pub fade_depth: f64,
}

/// Measures a trace over one period.
pub fn measure(trace: &Trace) -> TraceStats {
    let mean_bps = trace.mean_rate_bps();
    let per_s = trace.binned_rate_bps(1000);
    let m = per_s.iter().sum::<f64>() / per_s.len() as f64;
    let var = per_s.iter().map(|r| (r - m).powi(2)).sum::<f64>() / per_s.len() as f64;
    let bins = trace.binned_rate_bps(100);
    let threshold = 0.1 * mean_bps;
    let (mut fades, mut fade_bins, mut fade_sum, mut prev) = (0usize, 0usize, 0.0, false);
    for &r in &bins {
        let low = r < threshold;
        if low {
            fade_bins += 1;
            fade_sum += r;
            if !prev {
                fades += 1;
            }
        }
        prev = low;
    }
    TraceStats {
        mean_bps,
        cv_1s: var.sqrt() / m.max(f64::MIN_POSITIVE),
        fades,
        mean_fade_s: if fades > 0 {
            fade_bins as f64 * 0.1 / fades as f64
        } else {
            0.0
        },
        fade_depth: if fade_bins > 0 {
            fade_sum / fade_bins as f64 / mean_bps
        } else {
            0.0
        },
    }
}
