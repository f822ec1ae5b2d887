//! # gearbox-gear-api — the gear shape, shared by both ends
//!
//! A gear is a small sans-IO object that makes one decision of gearbox: it is told what
//! happened (`observe`, given a record) and asked for a choice at its decision point
//! (`choose`, given the decision's input), always with `now`, never reading a clock or
//! touching a socket itself (docs/architecture.md, "The gear shape"). Each answer is a
//! [`Decision`]: the choice, a reason for people and telemetry, and an optional
//! [`DecisionId`] that the data plane echoes on the record of what the decision led to.
//!
//! This crate holds only that shape: one trait per decision point, the records each
//! reads, and their choice types. Implementations live in `gearbox-gears` (one module per
//! gear), baselines that a data plane needs on its own (the client's static transport,
//! the edge's static controller and window from its flags) in that data plane. The
//! crate depends on serde alone, so the edge can host a gear without the client library,
//! the client without the edge, and the simulator and tests without either. Rejected
//! alternative: the traits in the client crate, which made every edge-side gear drag
//! the client (and its HTTP/3 stack) into the edge.
//!
//! | decision point | side, when | trait | input | learns from | paper |
//! |---|---|---|---|---|---|
//! | transport | client, request start | [`TransportGear`] | origin | [`ClientRecord`] | WiseTrans §III-A |
//! | HTTP version | client, page load start | [`HttpVersionGear`] | page URL | [`PageRecord`] | FlexHTTP §3.4 |
//! | path | client, request start (multipath) | [`PathGear`] | [`PathRequest`], [`PathState`]s | [`ClientRecord`] | SAILfish §4.2.1 |
//! | congestion control | edge, accept | [`CcaGear`] | [`AcceptedConnection`] | [`EdgeRecord`] | Floo §3.1 |
//! | congestion control | edge, every selection period | [`CcaPeriodGear`] | [`ConnectionStats`] | (its input) | Floo §3.2–3.3 |
//! | initial window | edge, accept | [`InitialWindowGear`] | [`AcceptedConnection`] | [`EdgeRecord`] | TCP WISE §IV-A |

pub mod conn;
pub mod decision;
pub mod http_version;
pub mod path;
pub mod path_monitor;
pub mod record;
pub mod transport;

pub use conn::{AcceptedConnection, Cca, CcaGear, CcaPeriodGear, ClientCluster, ConnectionStats, InitialWindowGear};
pub use decision::{Decision, DecisionId};
pub use http_version::{HttpVersion, HttpVersionGear, PageRecord};
pub use path::{PathGear, PathRequest, PathState, SRTT_HISTORY};
pub use path_monitor::{PathMonitor, PathSample};
pub use record::{ClientRecord, EdgeRecord, IwChoice, Protocol, Side, TransportSnapshot, SCHEMA_VERSION};
pub use transport::{Transport, TransportChoice, TransportGear};
