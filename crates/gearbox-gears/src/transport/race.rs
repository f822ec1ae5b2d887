//! The Chromium baseline: race QUIC against TCP on every new connection.
//!
//! The gear only asks for [`TransportChoice::Race`]; the racing itself needs sockets and
//! lives in the client (the client library's `race` module: QUIC first, TCP after
//! `max(1.5 × SRTT, 300 ms)`, broken QUIC skipped for 300 s doubling up to 2 days,
//! forgotten on a network change). The client appends what the race did to the
//! reason (`;race=quic`, `;race=tcp-won`, `;race=tcp-broken`, ...), so the record says
//! which transport won and why.

use std::time::Instant;

use gearbox_gear_api::{ClientRecord, Decision, TransportChoice, TransportGear};

use super::Reason;

/// Always [`TransportChoice::Race`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Race;

impl Race {
    /// The race gear.
    pub fn new() -> Self {
        Race
    }
}

impl TransportGear for Race {
    fn choose(&mut self, _origin: &str, _now: Instant) -> Decision<TransportChoice> {
        let reason = Reason {
            mode: "race",
            phase: "race",
            score: None,
            choice: TransportChoice::Race,
            why: "chromium-race",
            extra: &[],
        };
        Decision::new(TransportChoice::Race, reason.render())
    }

    fn observe(&mut self, _record: &ClientRecord, _now: Instant) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_race_gear_asks_the_client_to_race() {
        let d = Race::new().choose("a:443", Instant::now());
        assert_eq!(d.choice, TransportChoice::Race);
        assert_eq!(d.reason, "race;phase=race;score=-;choice=race;why=chromium-race");
    }
}
