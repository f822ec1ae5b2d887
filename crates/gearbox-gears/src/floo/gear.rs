//! The Floo gear: every selection period, the controller a running connection should
//! switch to (Floo §3.1 Fig. 4: Monitor -> Selector -> Switcher).
//!
//! [`FlooGear`] is the Selector (§3.3): the trained actor network, loaded from a model
//! directory (`policy.json` in the project's dense-network format with its sidecar,
//! docs/models.md) and evaluated in-process by `gearbox-policy` on the Monitor's
//! normalised state ([`super::features::observation`]). Its action is one of the four
//! controllers of §2.1, greedily (the most probable class). The Switcher (§3.4) is the
//! caller's: the edge and the simulator switch the connection's
//! [`gearbox_cc`-style](gearbox_gear_api::Cca) controller with full or part migration.
//!
//! Safe by default (docs/architecture.md principle 6):
//! - a missing or unreadable model, or one whose sidecar does not list exactly the
//!   Monitor's features in order, is refused at load with the reason, and the gear
//!   keeps every connection on its current controller (the static controller the edge
//!   was configured with);
//! - a class the build does not know (a model trained with a controller this build
//!   lacks) keeps the current controller for that period and says so in the reason;
//! - missing metrics take the documented defaults of the Monitor; the policy never
//!   sees NaN.
//!
//! The baselines of the evaluation (Floo §5.2) are gears too: [`FixedCca`] (a static
//! controller) and [`RandomCca`] (a random switch every period).

use std::path::{Path, PathBuf};
use std::time::Instant;

use gearbox_gear_api::{Cca, CcaPeriodGear, ConnectionStats, Decision};
use gearbox_policy::{Model, ModelError};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::features::{observation, ACTIONS, FEATURE_NAMES, NUM_FEATURES};

/// The model file inside a Floo model directory (its sidecar is `policy.meta.json`).
pub const POLICY_FILE: &str = "policy.json";

/// Why a Floo model cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FlooModelError {
    /// The model or its sidecar could not be read.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The sidecar's features are not the Monitor's.
    #[error("{path}: the model's features do not match the Floo monitor's: {detail}")]
    Features {
        /// The model file.
        path: PathBuf,
        /// The first difference.
        detail: String,
    },
    /// The model does not output one probability per class.
    #[error("{path}: the model has {outputs} outputs for {classes} class labels; a Floo policy outputs one probability per controller")]
    Outputs {
        /// The model file.
        path: PathBuf,
        /// Its outputs.
        outputs: usize,
        /// Its class labels.
        classes: usize,
    },
}

/// The trained selector (module docs).
pub struct FlooGear {
    model: Model,
    /// The controller of each output class (`None`: unknown to this build).
    classes: Vec<Option<Cca>>,
    out: Vec<f32>,
}

impl std::fmt::Debug for FlooGear {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlooGear")
            .field("model", &self.model.path())
            .field("classes", &self.classes)
            .finish()
    }
}

impl FlooGear {
    /// The gear of the model in `dir` (`dir/policy.json` and its sidecar).
    pub fn load(dir: impl AsRef<Path>) -> Result<FlooGear, FlooModelError> {
        let path = dir.as_ref().join(POLICY_FILE);
        let model = Model::load(&path)?;
        let names: Vec<&str> = model.feature_names().collect();
        if names != FEATURE_NAMES {
            let detail = match names
                .iter()
                .zip(FEATURE_NAMES)
                .enumerate()
                .find(|(_, (a, b))| **a != *b)
            {
                Some((i, (got, want))) => format!("feature {i} is {got:?}, the monitor's is {want:?}"),
                None => format!("{} features, the monitor has {}", names.len(), NUM_FEATURES),
            };
            return Err(FlooModelError::Features { path, detail });
        }
        let classes: Vec<Option<Cca>> = model.class_labels().iter().map(|l| Cca::from_name(l)).collect();
        if classes.is_empty() || model.num_outputs() != classes.len() {
            return Err(FlooModelError::Outputs {
                path,
                outputs: model.num_outputs(),
                classes: classes.len(),
            });
        }
        let out = vec![0.0; classes.len()];
        Ok(FlooGear { model, classes, out })
    }

    /// The model file in use.
    pub fn model_path(&self) -> &Path {
        self.model.path()
    }

    /// The class probabilities for `stats` (in the model's class order) and how many
    /// metrics were missing.
    pub fn probabilities(&mut self, stats: &ConnectionStats) -> Result<(&[f32], u32), String> {
        let obs = observation(stats);
        let raw: Vec<f64> = obs.values.iter().map(|&v| f64::from(v)).collect();
        let row = self.model.row_from_values(&raw).map_err(|e| e.to_string())?;
        self.model.predict(&row, &mut self.out).map_err(|e| e.to_string())?;
        Ok((&self.out, obs.missing))
    }
}

impl CcaPeriodGear for FlooGear {
    fn choose(&mut self, stats: &ConnectionStats, _now: Instant) -> Decision<Cca> {
        let current = stats.cca;
        let (best, p, missing) = match self.probabilities(stats) {
            Ok((probs, missing)) => {
                let (i, p) = probs
                    .iter()
                    .enumerate()
                    .fold((0, f32::MIN), |acc, (i, &p)| if p > acc.1 { (i, p) } else { acc });
                (i, p, missing)
            }
            Err(e) => return Decision::new(current, format!("floo: policy failed ({e}); keep {current}")),
        };
        let note = if missing > 0 {
            format!(", {missing} metrics missing")
        } else {
            String::new()
        };
        match self.classes[best] {
            Some(cca) if cca == current => Decision::new(cca, format!("floo: keep {cca} (p={p:.2}{note})")),
            Some(cca) => Decision::new(cca, format!("floo: {current} -> {cca} (p={p:.2}{note})")),
            None => {
                let label = &self.model.class_labels()[best];
                tracing::warn!(model = %self.model.path().display(), class = %label, "floo: the policy chose a controller this build lacks; keeping the current one");
                Decision::new(
                    current,
                    format!("floo: policy chose {label:?}, unknown to this build; keep {current}"),
                )
            }
        }
    }
}

/// A static controller: every period keeps (or returns to) one algorithm. The static
/// baselines of Floo §5.2.
#[derive(Debug, Clone, Copy)]
pub struct FixedCca(pub Cca);

impl CcaPeriodGear for FixedCca {
    fn choose(&mut self, _stats: &ConnectionStats, _now: Instant) -> Decision<Cca> {
        Decision::new(self.0, format!("static {}", self.0))
    }
}

/// Random switching: every period a controller drawn uniformly from the four of
/// Floo §2.1 (the evaluation's random-switching baseline), seeded.
#[derive(Debug, Clone)]
pub struct RandomCca {
    rng: ChaCha8Rng,
}

impl RandomCca {
    /// A random switcher with its seed.
    pub fn new(seed: u64) -> Self {
        RandomCca {
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }
}

impl CcaPeriodGear for RandomCca {
    fn choose(&mut self, stats: &ConnectionStats, _now: Instant) -> Decision<Cca> {
        let to = ACTIONS[self.rng.random_range(0..ACTIONS.len())];
        Decision::new(to, format!("random: {} -> {to}", stats.cca))
    }
}
