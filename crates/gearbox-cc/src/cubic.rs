//! PLACEHOLDER on the skeleton branch: the Cubic helper replaces this whole file.

use std::time::Instant;

use crate::algorithm::{Ack, Algorithm, Phase, SendingRate};
use crate::config::InvalidParameter;
use crate::path::PathState;

/// Cubic's parameters.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CubicConfig {}

impl CubicConfig {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), InvalidParameter> {
        Ok(())
    }
}

/// Cubic.
#[derive(Debug, Clone)]
pub struct Cubic {
    window: u64,
}

impl Cubic {
    /// Cubic from `initial_window` bytes.
    pub fn new(_config: &CubicConfig, initial_window: u64, _now: Instant, _path: &PathState) -> Self {
        Cubic { window: initial_window }
    }
}

impl Algorithm for Cubic {
    fn on_ack(&mut self, _now: Instant, _ack: &Ack, _path: &PathState) {}

    fn on_congestion_event(&mut self, _now: Instant, _sent: Instant, _pc: bool, _lost: u64, _path: &PathState) {}

    fn window(&self) -> u64 {
        self.window
    }

    fn phase(&self) -> Phase {
        Phase::Converged
    }

    fn phase_name(&self) -> &'static str {
        "placeholder"
    }

    fn enter_converged(&mut self, _now: Instant, rate: SendingRate, _path: &PathState) {
        self.window = rate.cwnd;
    }

    fn clone_box(&self) -> Box<dyn Algorithm> {
        Box::new(self.clone())
    }
}
