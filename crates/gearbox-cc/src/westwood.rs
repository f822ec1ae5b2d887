//! PLACEHOLDER on the skeleton branch: the Westwood helper replaces this whole file.

use std::time::Instant;

use crate::algorithm::{Ack, Algorithm, Phase, SendingRate};
use crate::config::InvalidParameter;
use crate::path::PathState;

/// Westwood's parameters.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WestwoodConfig {}

impl WestwoodConfig {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), InvalidParameter> {
        Ok(())
    }
}

/// Westwood.
#[derive(Debug, Clone)]
pub struct Westwood {
    window: u64,
}

impl Westwood {
    /// Westwood from `initial_window` bytes.
    pub fn new(_config: &WestwoodConfig, initial_window: u64, _now: Instant, _path: &PathState) -> Self {
        Westwood { window: initial_window }
    }
}

impl Algorithm for Westwood {
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
