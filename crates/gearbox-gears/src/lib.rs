//! # gearbox-gears — the gears, as sans-IO decision objects
//!
//! Every gear is a small object that is told what happened and asked for a choice,
//! given `now` (docs/architecture.md, "The gear shape"). The data plane, the emulator and the
//! simulator all drive them the same way, and tests drive them with invented time and
//! records.
//!
//! - [`transport`]: TCP or QUIC per request on the client — WiseTrans v1
//!   and v2, with the static, strawman and Chromium-race baselines.
//! - [`floo`]: the congestion controller per connection, every selection period on
//!   the edge — Floo's Monitor state, the trained Selector and the static and random
//!   baselines.
//! - [`path`]: the path of each stream on a multipath client — the stream schedulers
//!   SAILfish is compared with (MinRTT, round-robin, single best path, ECF, BLEST).
//! - [`http_version`]: HTTP/2 or HTTP/3 per page load on the client — FlexHTTP's selector
//!   (the (URL, hour-of-week) cache, a random choice on a miss, the agent's forest), with
//!   [`http_version_local`]: the local trace pool and the local fine-tuning (§3.5).
//! - [`tcpwise`]: the initial window per client cluster and hour on the edge — TCP
//!   WISE's Cwnd Table and its A/B draw.

pub mod floo;
pub mod http_version;
pub mod http_version_local;
pub mod path;
pub mod tcpwise;
pub mod transport;

/// The median of a series (the mean of the middle two for an even count; NaN for none):
/// the workspace's one definition, `gearbox_dataplane::stats::median`, for the gears'
/// rules that compare medians of completion times.
pub(crate) fn median(values: &[f64]) -> f64 {
    gearbox_dataplane::stats::median(values).unwrap_or(f64::NAN)
}
