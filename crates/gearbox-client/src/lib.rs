//! The gearbox client: HTTPS requests over pooled HTTP/1.1, HTTP/2 and HTTP/3 connections,
//! each timed (RCT, TTFB, handshake) with its transport state and written as one
//! telemetry record (docs/architecture.md, "The parts" and principle 4, "Telemetry
//! first").
//!
//! - [`Client`]: the async client; [`Client::request`] for one request,
//!   [`Client::load_page`] for a page's dependency graph over one connection.
//! - [`Client::load_page_multipath`]: a page over HTTP/3 on every local path, each
//!   request on the path a path scheduler ([`gearbox_gear_api::PathGear`]) picks
//!   ([`multipath`]).
//! - [`TransportGear`] (from `gearbox-gear-api`): the hook where WiseTrans chooses TCP or
//!   QUIC for each `Auto` request; [`StaticTransport`] is the static baseline.
//! - [`TransportPref::Race`]: Chromium-style QUIC/TCP racing with broken-QUIC marking
//!   ([`race`]), the browser baseline of the transport gear.
//! - [`replay`]: a workload replayed at its send times, and the RCT statistics of the
//!   replay ([`replay::Summary`]), as `gearbox load` and the demo run them.
//! - [`BlockingClient`]: the same with its own runtime, for Python.
//!
//! Every failure is a typed [`ClientError`] and a record with `error` set; every wait is
//! bounded by the connect and request timeouts of [`ClientConfig`].

mod blocking;
mod client;
mod config;
mod conn;
mod error;
mod exchange;
pub mod gear;
mod h1;
mod h2;
mod h3;
pub mod hedge;
pub mod multipath;
mod page;
pub mod race;
pub mod replay;
pub mod silence;
mod tcp;

pub use blocking::BlockingClient;
pub use client::{Client, Request, Response};
pub use config::ClientConfig;
pub use error::ClientError;
pub use gear::{StaticTransport, TransportChoice, TransportGear, TransportPref};
pub use gearbox_gear_api::{Decision, DecisionId};
pub use hedge::HedgeRule;
pub use multipath::{MultipathLoad, MultipathOptions, PathDown};
pub use page::{ObjectTiming, PageLoad, PageLoadOptions};

// Types of the public API from other crates, so callers need not depend on them.
pub use bytes::Bytes;
pub use gearbox_dataplane::telemetry::{ClientRecord, Protocol};
pub use gearbox_dataplane::tls::Trust;
pub use http::{HeaderMap, HeaderValue, Method};
