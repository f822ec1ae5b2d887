//! What every gear hands back: its choice, a reason for people, and an optional id for
//! itself.
//!
//! The reason is free text that goes into telemetry (the client record's `decision`
//! field) so that a person, a report or a learner can see why. The id is what the gear
//! uses to recognise the outcome of its own decision later: the data plane copies it onto
//! the record it hands to `observe` (the client record's `decision_id`). Rejected
//! alternative: parsing the reason back, which ties the telemetry text to the gear's
//! bookkeeping so that rewording a reason breaks the gear.

use serde::{Deserialize, Serialize};

/// A gear's own label on one decision, echoed on the record of what the decision led to.
///
/// Only the gear that issued it knows what it means (WiseTrans: which probe slot of
/// which exploration, or which verification request); the data plane copies it and
/// never looks inside. Written to telemetry as a plain integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DecisionId(pub u64);

impl std::fmt::Display for DecisionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One answer of a gear at a decision point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision<C> {
    /// What was chosen.
    pub choice: C,
    /// Why, in words for people and telemetry (each gear documents its format).
    pub reason: String,
    /// Set when the gear wants to recognise this decision's outcome; the data plane
    /// copies it onto the record it reports back.
    pub id: Option<DecisionId>,
}

impl<C> Decision<C> {
    /// `choice` because of `reason`, with no id.
    pub fn new(choice: C, reason: impl Into<String>) -> Self {
        Decision {
            choice,
            reason: reason.into(),
            id: None,
        }
    }

    /// The same decision carrying `id`.
    pub fn with_id(mut self, id: DecisionId) -> Self {
        self.id = Some(id);
        self
    }

    /// The same reason and id over a choice mapped by `f` (e.g. the gear's choice turned
    /// into what the data plane acts on).
    pub fn map<D>(self, f: impl FnOnce(C) -> D) -> Decision<D> {
        Decision {
            choice: f(self.choice),
            reason: self.reason,
            id: self.id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapped_decision_keeps_its_reason_and_id() {
        let d = Decision::new(3u8, "why").with_id(DecisionId(7)).map(u32::from);
        assert_eq!(d.choice, 3u32);
        assert_eq!(d.reason, "why");
        assert_eq!(d.id, Some(DecisionId(7)));
        assert_eq!(Decision::new((), "x").id, None);
    }

    #[test]
    fn a_decision_id_is_written_as_a_plain_number() {
        assert_eq!(serde_json::to_string(&DecisionId(42)).unwrap(), "42");
        assert_eq!(serde_json::from_str::<DecisionId>("42").unwrap(), DecisionId(42));
    }
}
