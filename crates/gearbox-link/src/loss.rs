//! Stage 2: random loss — Bernoulli or Gilbert-Elliott.
//!
//! This is the "random loss" of the papers: Floo's Table 4 loss rate (Floo
//! §4.3.1) and TCP WISE's netem loss change (TCP WISE §V, Fig. 9). It is
//! independent of congestion, which the queue stage produces by itself.
//!
//! Bernoulli loss is what `netem loss p` and `mm-loss` do. Wireless loss is
//! bursty, so the Gilbert-Elliott two-state Markov chain is offered as well (the
//! model `netem loss gemodel` implements). Per packet, the packet is first lost
//! with the loss probability of the *current* state, then the chain steps.
//! With `loss_in_good = 0` and `loss_in_bad = 1` the runs of consecutive losses
//! are exactly the sojourns in the bad state, so their mean length is
//! `1 / p_bad_to_good`.

use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Loss model configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "model", rename_all = "snake_case", deny_unknown_fields)]
pub enum LossConfig {
    /// No random loss.
    #[default]
    None,
    /// Each packet lost independently with probability `loss_rate` in `[0, 1]`.
    Bernoulli {
        /// Per-packet loss probability.
        loss_rate: f64,
    },
    /// Gilbert-Elliott chain with explicit parameters (all probabilities in `[0, 1]`).
    GilbertElliott {
        /// Per-packet probability of moving from the good to the bad state.
        p_good_to_bad: f64,
        /// Per-packet probability of moving from the bad to the good state (> 0).
        p_bad_to_good: f64,
        /// Loss probability while in the good state (usually 0).
        loss_in_good: f64,
        /// Loss probability while in the bad state (usually 1).
        loss_in_bad: f64,
    },
    /// Gilbert-Elliott chain given by its mean loss rate and mean loss-burst
    /// length; see [`GilbertElliott::from_mean_loss_and_burst`].
    GilbertElliottMean {
        /// Long-run fraction of packets lost, in `(0, 1)`.
        mean_loss_rate: f64,
        /// Mean number of consecutive packets lost per burst, >= 1.
        mean_burst_packets: f64,
    },
}

/// Parameters of a Gilbert-Elliott chain.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GilbertElliott {
    /// Per-packet probability good -> bad.
    pub p_good_to_bad: f64,
    /// Per-packet probability bad -> good.
    pub p_bad_to_good: f64,
    /// Loss probability in the good state.
    pub loss_in_good: f64,
    /// Loss probability in the bad state.
    pub loss_in_bad: f64,
}

impl GilbertElliott {
    /// The "simple Gilbert" chain (lossless good state, lossy bad state) with the
    /// given long-run loss rate and mean burst length in packets.
    ///
    /// The stationary probability of the bad state is `p/(p+r)` with
    /// `p = p_good_to_bad`, `r = p_bad_to_good`, and a bad sojourn lasts `1/r`
    /// packets on average, so `r = 1/burst` and `p = r * mean / (1 - mean)`.
    /// Returns `None` when no such chain exists (mean not in (0,1), burst < 1, or
    /// the required `p` exceeds 1 — a high loss rate with short bursts).
    pub fn from_mean_loss_and_burst(mean_loss_rate: f64, mean_burst_packets: f64) -> Option<Self> {
        if !(mean_loss_rate > 0.0
            && mean_loss_rate < 1.0
            && mean_burst_packets >= 1.0
            && mean_burst_packets.is_finite())
        {
            return None;
        }
        let r = 1.0 / mean_burst_packets;
        let p = r * mean_loss_rate / (1.0 - mean_loss_rate);
        (p <= 1.0).then_some(GilbertElliott {
            p_good_to_bad: p,
            p_bad_to_good: r,
            loss_in_good: 0.0,
            loss_in_bad: 1.0,
        })
    }

    /// Long-run loss rate of the chain.
    pub fn mean_loss_rate(&self) -> f64 {
        let denom = self.p_good_to_bad + self.p_bad_to_good;
        if denom == 0.0 {
            return self.loss_in_good;
        }
        let pi_bad = self.p_good_to_bad / denom;
        pi_bad * self.loss_in_bad + (1.0 - pi_bad) * self.loss_in_good
    }
}

/// The loss stage.
#[derive(Debug, Clone)]
pub enum Loss {
    /// Never drops.
    None,
    /// Independent loss with this probability.
    Bernoulli(f64),
    /// Markov-modulated loss; `bad` is the current state.
    GilbertElliott {
        /// Chain parameters.
        params: GilbertElliott,
        /// True while in the bad state. The chain starts good.
        bad: bool,
    },
}

impl Loss {
    /// Builds the stage from a validated config (an impossible
    /// `GilbertElliottMean` is rejected by validation; here it degrades to no loss).
    pub fn new(config: &LossConfig) -> Self {
        match *config {
            LossConfig::None => Loss::None,
            LossConfig::Bernoulli { loss_rate } => Loss::Bernoulli(loss_rate),
            LossConfig::GilbertElliott {
                p_good_to_bad,
                p_bad_to_good,
                loss_in_good,
                loss_in_bad,
            } => Loss::GilbertElliott {
                params: GilbertElliott {
                    p_good_to_bad,
                    p_bad_to_good,
                    loss_in_good,
                    loss_in_bad,
                },
                bad: false,
            },
            LossConfig::GilbertElliottMean {
                mean_loss_rate,
                mean_burst_packets,
            } => match GilbertElliott::from_mean_loss_and_burst(mean_loss_rate, mean_burst_packets) {
                Some(params) => Loss::GilbertElliott { params, bad: false },
                None => Loss::None,
            },
        }
    }

    /// True if the next packet is lost.
    #[inline]
    pub fn lose(&mut self, rng: &mut ChaCha8Rng) -> bool {
        match self {
            Loss::None => false,
            Loss::Bernoulli(p) => rng.random::<f64>() < *p,
            Loss::GilbertElliott { params, bad } => {
                let p_loss = if *bad { params.loss_in_bad } else { params.loss_in_good };
                let lost = rng.random::<f64>() < p_loss;
                let p_switch = if *bad {
                    params.p_bad_to_good
                } else {
                    params.p_good_to_bad
                };
                if rng.random::<f64>() < p_switch {
                    *bad = !*bad;
                }
                lost
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn bernoulli_loss_falls_inside_the_binomial_99_percent_interval() {
        let n = 200_000u64;
        let p = 0.02;
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut loss = Loss::new(&LossConfig::Bernoulli { loss_rate: p });
        let lost = (0..n).filter(|_| loss.lose(&mut rng)).count() as f64;
        let mean = n as f64 * p;
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        // 2.576 sigma = two-sided 99% of the normal approximation to the binomial.
        assert!(
            (lost - mean).abs() <= 2.576 * sd,
            "lost {lost}, expected {mean} +- {}",
            2.576 * sd
        );
    }

    #[test]
    fn gilbert_elliott_matches_mean_loss_and_burst_length() {
        let (mean, burst) = (0.05, 4.0);
        let ge = GilbertElliott::from_mean_loss_and_burst(mean, burst).unwrap();
        assert!((ge.mean_loss_rate() - mean).abs() < 1e-12);
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let mut loss = Loss::new(&LossConfig::GilbertElliottMean {
            mean_loss_rate: mean,
            mean_burst_packets: burst,
        });
        let n = 1_000_000;
        let (mut lost, mut bursts, mut prev) = (0u64, 0u64, false);
        for _ in 0..n {
            let l = loss.lose(&mut rng);
            if l {
                lost += 1;
                if !prev {
                    bursts += 1;
                }
            }
            prev = l;
        }
        let measured_mean = lost as f64 / n as f64;
        let measured_burst = lost as f64 / bursts as f64;
        assert!((measured_mean - mean).abs() < 0.005, "mean loss {measured_mean}");
        assert!((measured_burst - burst).abs() < 0.2, "mean burst {measured_burst}");
        // Bursty, unlike Bernoulli at the same rate whose mean burst is 1/(1-p) ~ 1.05.
        assert!(measured_burst > 3.0);
    }

    #[test]
    fn impossible_gilbert_elliott_targets_are_refused() {
        assert!(GilbertElliott::from_mean_loss_and_burst(0.9, 1.0).is_none());
        assert!(GilbertElliott::from_mean_loss_and_burst(0.0, 3.0).is_none());
        assert!(GilbertElliott::from_mean_loss_and_burst(0.1, 0.5).is_none());
    }
}
