//! TCP WISE's Connection Manager (TCP WISE §IV-A): the Cwnd Table and the gear that
//! gives each new connection its initial window from it.
//!
//! The table holds, per client cluster (an address prefix, TCP WISE's /24) and hour of
//! day, the initial windows under test, α and β (more for the fast start, §IV-C3), and
//! the chance of α; every connection draws one (§IV-A, "A/B testing"). The learner (`gearbox learn tcpwise`,
//! §IV-C) writes the next table from the records of these draws; the edge reloads it.
//! The file format is docs/tcpwise.md's.

mod gear;
mod table;

pub use gear::{SharedTable, TcpWiseGear};
pub use table::{CwndTable, Entry, Prefix, TableError, View, MAX_CAP, MAX_SET, MIN_IW};
