//! Parameters of every algorithm of the suite, in one TOML table (`[cc]` of the edge's
//! config), checked before any connection uses them.

use std::time::{Duration, Instant};

use gearbox_gear_api::Cca;

use crate::algorithm::Algorithm;
use crate::path::PathState;
use crate::switchable::SwitchConfig;
use crate::{bbr, copa, cubic, newreno, vivace, westwood};

/// RTT assumed before the first sample (RFC 9002 §6.2.2's kInitialRtt).
pub const INITIAL_RTT: Duration = Duration::from_millis(333);

/// Largest initial window accepted, packets. RFC 6928 asked for 10; TCP WISE (§V)
/// explores windows up to a few tens; 1000 packets (1.2 MB at 1200 bytes) is beyond any
/// measured benefit and keeps a typo from flooding a path.
pub const MAX_INITIAL_WINDOW_PACKETS: u32 = 1000;

/// A parameter outside its valid range.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
#[error("invalid congestion-control parameter {field} = {value}: {reason}")]
pub struct InvalidParameter {
    /// Dotted name of the field (`copa.delta`).
    pub field: String,
    /// The value given, as text.
    pub value: String,
    /// What a valid value is.
    pub reason: String,
}

impl InvalidParameter {
    /// The error for `field` holding `value`, which should be `reason`.
    pub fn new(field: &str, value: impl ToString, reason: &str) -> Self {
        InvalidParameter {
            field: field.to_string(),
            value: value.to_string(),
            reason: reason.to_string(),
        }
    }
}

/// Checks `value` of `field` is finite and above zero.
pub fn positive(field: &str, value: f64) -> Result<(), InvalidParameter> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(InvalidParameter::new(field, value, "must be a finite number above 0"))
    }
}

/// Checks `value` of `field` is finite and at least zero.
pub fn non_negative(field: &str, value: f64) -> Result<(), InvalidParameter> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(InvalidParameter::new(
            field,
            value,
            "must be a finite number, 0 or above",
        ))
    }
}

/// Bytes of an initial window of `packets` packets of `crate::PACKET_BYTES`, checked:
/// 0 and anything above [`MAX_INITIAL_WINDOW_PACKETS`] are errors naming the value.
pub fn initial_window_bytes(packets: u32) -> Result<u64, InvalidParameter> {
    if packets == 0 || packets > MAX_INITIAL_WINDOW_PACKETS {
        return Err(InvalidParameter::new(
            "initial_window",
            packets,
            &format!("must be 1..={MAX_INITIAL_WINDOW_PACKETS} packets"),
        ));
    }
    Ok(u64::from(packets) * crate::PACKET_BYTES)
}

/// Parameters of the whole suite; every field has the published defaults.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CcConfig {
    /// NewReno (RFC 9002 §7).
    pub newreno: newreno::NewRenoConfig,
    /// CUBIC (RFC 9438) with HyStart++ (RFC 9406).
    pub cubic: cubic::CubicConfig,
    /// BBR v1.
    pub bbr: bbr::BbrConfig,
    /// Copa.
    pub copa: copa::CopaConfig,
    /// Westwood+.
    pub westwood: westwood::WestwoodConfig,
    /// PCC Vivace.
    pub vivace: vivace::VivaceConfig,
    /// Switching between them.
    pub switch: SwitchConfig,
}

impl CcConfig {
    /// Checks every parameter; the first bad one is the error.
    pub fn validate(&self) -> Result<(), InvalidParameter> {
        self.newreno.validate()?;
        self.cubic.validate()?;
        self.bbr.validate()?;
        self.copa.validate()?;
        self.westwood.validate()?;
        self.vivace.validate()?;
        non_negative("switch.max_defer_s", self.switch.max_defer_s)
    }

    /// A fresh `cca` starting from `initial_window` bytes.
    pub fn build(&self, cca: Cca, initial_window: u64, now: Instant, path: &PathState) -> Box<dyn Algorithm> {
        match cca {
            Cca::NewReno => Box::new(newreno::NewReno::new(&self.newreno, initial_window, now, path)),
            Cca::Cubic => Box::new(cubic::Cubic::new(&self.cubic, initial_window, now, path)),
            Cca::Bbr => Box::new(bbr::Bbr::new(&self.bbr, initial_window, now, path)),
            Cca::Copa => Box::new(copa::Copa::new(&self.copa, initial_window, now, path)),
            Cca::Westwood => Box::new(westwood::Westwood::new(&self.westwood, initial_window, now, path)),
            Cca::Vivace => Box::new(vivace::Vivace::new(&self.vivace, initial_window, now, path)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_window_out_of_range_names_the_value() {
        assert_eq!(initial_window_bytes(10).unwrap(), 12_000);
        let e = initial_window_bytes(0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid congestion-control parameter initial_window = 0: must be 1..=1000 packets"
        );
        assert!(initial_window_bytes(1001).unwrap_err().to_string().contains("= 1001"));
    }

    #[test]
    fn unknown_fields_are_refused_by_name() {
        let e = toml::from_str::<CcConfig>("[copa]\ndelta_typo = 1.0").unwrap_err();
        assert!(e.to_string().contains("delta_typo"), "{e}");
    }
}
