//! Floo: the congestion controller of each connection, re-chosen every selection
//! period from the connection's monitor and switched with state migration (Floo §3).
//!
//! - [`features`]: the Monitor's normalised state (§3.2 Table 2, §3.3), the one place
//!   the normalisation lives;
//! - [`gear`]: the Selector (§3.3) as a [`gearbox_gear_api::CcaPeriodGear`] over a
//!   trained policy file, and the static and random baselines of §5.2.
//!
//! The Switcher (§3.4) is the congestion-control suite's (`gearbox-cc`'s
//! `SwitchHandle`), called by the edge and the simulator.

pub mod features;
pub mod gear;

pub use features::{observation, Observation, ACTIONS, FEATURE_NAMES, NUM_FEATURES};
pub use gear::{FixedCca, FlooGear, FlooModelError, RandomCca, POLICY_FILE};
