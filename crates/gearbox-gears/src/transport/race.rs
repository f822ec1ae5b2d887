//! The Chromium baseline: race QUIC against TCP on every new connection.
//!
//! The gear only asks for [`TransportPref::Race`]; the racing itself needs sockets and
//! lives in the client (`gearbox_client::race`: QUIC first, TCP after
//! `max(1.5 × SRTT, 300 ms)`, broken QUIC skipped for 300 s doubling up to 2 days,
//! forgotten on a network change). The client appends what the race did to the
//! reason (`;race=quic`, `;race=tcp-won`, `;race=tcp-broken`, ...), so the record says
//! which transport won and why.

use std::time::Instant;

use gearbox_client::{ClientRecord, TransportGear, TransportPref};

use super::Reason;

/// Always [`TransportPref::Race`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Race;

impl Race {
    /// The race gear.
    pub fn new() -> Self {
        Race
    }
}

impl TransportGear for Race {
    fn choose(&mut self, _origin: &str, _now: Instant) -> (TransportPref, String) {
        let reason = Reason {
            mode: "race",
            phase: "race",
            score: None,
            choice: TransportPref::Race,
            why: "chromium-race",
            extra: &[],
        };
        (TransportPref::Race, reason.render())
    }

    fn observe(&mut self, _record: &ClientRecord, _now: Instant) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_race_gear_asks_the_client_to_race() {
        let (p, why) = Race::new().choose("a:443", Instant::now());
        assert_eq!(p, TransportPref::Race);
        assert_eq!(why, "race;phase=race;score=-;choice=race;why=chromium-race");
    }
}
