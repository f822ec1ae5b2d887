//! The TCP WISE gear at accept (TCP WISE §IV-A, Connection Manager): each new
//! connection draws one IW of its cluster's set in the current Cwnd Table (α at the
//! entry's chance, the others sharing the rest equally: [`View::draw`](super::View::draw)).
//!
//! The table is shared with whoever reloads it (the edge watches the file): a reload
//! swaps the whole table at once, so a connection sees either the old table or the
//! new one, never a mix. On kernel TCP the same draw happens inside the edge's BPF
//! `sock_ops` program (`gearbox-bpf`), because the window must be set before the
//! kernel sends anything, which is before the edge's `accept` returns; this gear
//! answers for QUIC, and for TCP only says the kernel decides.

use std::sync::{Arc, RwLock};
use std::time::Instant;

use gearbox_gear_api::{AcceptedConnection, Decision, EdgeRecord, InitialWindowGear, IwChoice, Transport};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::table::{CwndTable, Prefix};

/// The current table, swapped whole on reload.
#[derive(Debug, Clone)]
pub struct SharedTable(Arc<RwLock<Arc<CwndTable>>>);

impl SharedTable {
    /// Starts with `table`.
    pub fn new(table: CwndTable) -> Self {
        SharedTable(Arc::new(RwLock::new(Arc::new(table))))
    }

    /// The table now.
    pub fn get(&self) -> Arc<CwndTable> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the table.
    pub fn set(&self, table: CwndTable) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(table);
    }
}

/// Draws each QUIC connection's initial window from the Cwnd Table.
pub struct TcpWiseGear {
    table: SharedTable,
    rng: ChaCha8Rng,
}

impl TcpWiseGear {
    /// A gear over `table`, its draws seeded by `seed`.
    pub fn new(table: SharedTable, seed: u64) -> Self {
        TcpWiseGear {
            table,
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }
}

impl InitialWindowGear for TcpWiseGear {
    fn choose(&mut self, conn: &AcceptedConnection, _now: Instant) -> Decision<Option<IwChoice>> {
        if conn.transport == Transport::Tcp {
            return Decision::new(None, "tcpwise:kernel");
        }
        let table = self.table.get();
        let hour = conn.cluster.hour;
        let Some(view) = table.lookup(conn.client_addr.ip(), hour) else {
            return Decision::new(None, format!("tcpwise:v{}:no-entry", table.version));
        };
        let (k, iw) = view.draw(self.rng.random::<f64>());
        let cluster = match view.prefix {
            Prefix::Others => "others".to_string(),
            p => p.to_string(),
        };
        let which = match k {
            0 => "alpha".to_string(),
            1 => "beta".to_string(),
            k => format!("iw{k}"),
        };
        let reason = format!("tcpwise:v{}:{cluster}:{which}:{iw}", table.version);
        Decision::new(
            Some(IwChoice {
                cluster: Some(cluster),
                hour: Some(hour),
                iw_set: Some(view.iw.clone()),
                iw,
                table_version: Some(table.version),
                source: "table".into(),
            }),
            reason,
        )
    }

    fn observe(&mut self, _record: &EdgeRecord, _now: Instant) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(ip: &str, transport: Transport) -> AcceptedConnection {
        // 13:00 UTC on 2026-11-24.
        let t = 1_795_957_200_000.0 + 13.0 * 3_600_000.0 - (1_795_957_200_000.0 % 86_400_000.0);
        AcceptedConnection::new(1, format!("{ip}:5000").parse().unwrap(), transport, t)
    }

    #[test]
    fn connections_draw_alpha_and_beta_at_the_entrys_chance_and_a_reload_takes_effect() {
        let table = SharedTable::new(
            CwndTable::parse(
                "version = 1\ncap = 100\n[[cluster]]\nprefix = \"10.1.2.0/24\"\niw = [10, 20]\nchance_alpha = 0.25\n",
            )
            .unwrap(),
        );
        let mut gear = TcpWiseGear::new(table.clone(), 7);
        let c = conn("10.1.2.9", Transport::Quic);
        assert_eq!(c.cluster.hour, 13);
        let draws: Vec<u32> = (0..4000)
            .map(|_| gear.choose(&c, Instant::now()).choice.unwrap().iw)
            .collect();
        let alphas = draws.iter().filter(|&&w| w == 10).count() as f64 / draws.len() as f64;
        assert!(draws.iter().all(|&w| w == 10 || w == 20));
        assert!((alphas - 0.25).abs() < 0.03, "alpha share {alphas}");
        let d = gear.choose(&c, Instant::now());
        let choice = d.choice.unwrap();
        assert_eq!(choice.cluster.as_deref(), Some("10.1.2.0/24"));
        assert_eq!(
            (choice.hour, choice.iw_set, choice.source.as_str()),
            (Some(13), Some(vec![10, 20]), "table")
        );
        assert!(d.reason.starts_with("tcpwise:v1:10.1.2.0/24:"), "{}", d.reason);

        table.set(
            CwndTable::parse("version = 2\ncap = 100\n[[cluster]]\nprefix = \"others\"\niw = [30, 30]\n").unwrap(),
        );
        let after = gear.choose(&c, Instant::now()).choice.unwrap();
        assert_eq!((after.iw, after.cluster.as_deref()), (30, Some("others")));
        // The fast start's five IWs: α at its chance, the four others equally (QUIC).
        table.set(
            CwndTable::parse(
                "version = 3\ncap = 100\n[[cluster]]\nprefix = \"others\"\niw = [10, 15, 20, 25, 30]\nchance_alpha = 0.2\n",
            )
            .unwrap(),
        );
        let mut counts = std::collections::BTreeMap::new();
        for _ in 0..5000 {
            let c = gear.choose(&c, Instant::now()).choice.unwrap();
            assert_eq!(c.iw_set, Some(vec![10, 15, 20, 25, 30]));
            *counts.entry(c.iw).or_insert(0usize) += 1;
        }
        assert_eq!(counts.keys().copied().collect::<Vec<_>>(), vec![10, 15, 20, 25, 30]);
        for (iw, n) in &counts {
            let share = *n as f64 / 5000.0;
            assert!((share - 0.2).abs() < 0.03, "IW {iw}: share {share}");
        }
        // TCP: the kernel draws.
        assert_eq!(
            gear.choose(&conn("10.1.2.9", Transport::Tcp), Instant::now()).choice,
            None
        );
    }
}
