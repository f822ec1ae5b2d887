//! Request workloads for gearbox, defined as data.
//!
//! A workload is a TOML file of distributions (CDF tables) and a few parameters; five ship
//! with gearbox under `workloads/` and are embedded here by name, and users can pass their
//! own file. Generation is deterministic for a seed and sans-IO: no clocks, no sockets, and
//! no file access besides reading a workload file. The same generator feeds the client
//! (`gearbox load`), the virtual-time simulator and Python.
//!
//! | name | pattern | source |
//! |---|---|---|
//! | `feed` | clicks of ~13.5 concurrent requests, responses < 50 KB | WiseTrans §III-D, Appendix A |
//! | `app` | request/response sizes and inter-send gaps of Fig. 5 | Floo §4.2 |
//! | `search` | one response per new connection, sizes in MSS, many /24 prefixes | TCP WISE §V-B2, Fig. 10 |
//! | `bulk` | one long transfer | — |
//! | `page` | web pages as dependency graphs | FlexHTTP Table 1, SAILfish Table 5.1 |
//!
//! Rejected alternative: workloads as Rust code. Tables in files can be read, cited,
//! diffed and replaced by a user without rebuilding, and Python reads the same files.
//!
//! ```
//! use gearbox_workload::{Limit, WorkloadSpec};
//! let app = WorkloadSpec::builtin("app").unwrap();
//! let requests = app.generate(42, Limit::DurationMs(60_000.0));
//! assert!(requests.iter().all(|r| r.send_at_ms < 60_000.0));
//! assert_eq!(requests, app.generate(42, Limit::DurationMs(60_000.0)));
//! ```

mod cdf;
mod generate;
mod page;
mod spec;

pub use cdf::{Cdf, CdfError};
pub use generate::{request_bytes_for_get, Limit, Request, RequestStream};
pub use page::{generate_page, Dependencies, KindSpec, ObjectKind, Page, PageError, PageObject, PageSpec};
pub use spec::{
    BulkSpec, ClickSpec, ClientSpec, ConnectionReuse, Pattern, WorkloadError, WorkloadSpec, DEFAULT_MSS_BYTES,
};
