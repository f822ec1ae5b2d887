//! Racing QUIC against TCP, Chromium-style: the `Race` baseline of the transport gear,
//! and the memory of broken QUIC that every mode that can fall back to TCP shares
//! (`Auto` and `Race`, see `Client`'s fallback rules and `crate::silence`).
//!
//! WiseTrans is judged against what browsers do today. Chromium opens a new
//! connection to a QUIC-capable origin by starting the QUIC handshake and holding the
//! TCP attempt back for a short while; whichever connects first carries the request. A
//! QUIC attempt that fails, or loses to TCP, marks QUIC "broken" for the origin, and
//! while it is broken TCP is used directly, so a network that blocks UDP costs the
//! delay once, not on every connection. The rules here:
//!
//! - TCP starts `max(1.5 x SRTT, 300 ms)` after QUIC, SRTT being the last RTT measured
//!   to the origin by a raced request; with no RTT known the delay is the 300 ms floor
//!   (Chromium's `kDefaultRTT`, used there as the delay itself). If QUIC fails before
//!   the delay is up, TCP starts at once.
//! - Broken: 300 s for the first break, doubling with each consecutive break (a QUIC
//!   win resets the count), at most 2 days.
//! - All of it is forgotten on a network change, i.e. when the set of local addresses
//!   differs from the one seen at the previous race decision.
//! - Requests that find a live pooled connection of the protocol the last race chose
//!   use it without racing.
//!
//! [`RaceState`] holds these rules as a sans-IO object (every call takes `now`), so
//! they are tested with invented time; `Client` does the sockets. Rejected alternative:
//! racing every request. It would double the handshakes for nothing once a connection
//! is up, and it is not what the browser baseline does.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gearbox_dataplane::telemetry::Protocol;

use crate::client::{lock_std, Client, ParsedUrl, Request};
use crate::conn::{Dial, Key};
use crate::error::ClientError;
use crate::exchange::{Exchanged, Failure, Progress};
use crate::gear::TransportPref;
use crate::h1::start_h1;
use crate::h2::start_h2;
use crate::h3::H3Conn;
use crate::silence::Fallback;
use crate::tcp::{open_tcp_tls, TcpTls};

/// Floor of the TCP delay, and the delay when no RTT to the origin is known.
pub const RACE_MIN_DELAY: Duration = Duration::from_millis(300);
/// How long QUIC stays broken after its first break.
pub const BROKEN_BASE: Duration = Duration::from_secs(300);
/// Longest a break lasts, however many came before.
pub const BROKEN_MAX: Duration = Duration::from_secs(2 * 24 * 3600);

/// What the race knows about one origin.
#[derive(Debug, Clone, Default)]
struct OriginRace {
    /// Last smoothed RTT measured on a raced request to the origin, milliseconds.
    srtt_ms: Option<f64>,
    /// Protocol of the connection the last race chose (`Tcp` or `Quic`).
    choice: Option<TransportPref>,
    /// QUIC is not tried before this instant.
    broken_until: Option<Instant>,
    /// Consecutive breaks (a QUIC win resets it); the next break lasts
    /// `BROKEN_BASE * 2^breaks`.
    breaks: u32,
    /// Last smoothed RTT of any QUIC request to the origin (whatever the mode): bounds
    /// the next QUIC handshake (`crate::silence::handshake_bound`).
    quic_srtt_ms: Option<f64>,
}

/// The race's memory across requests, per origin (`host:port`).
#[derive(Debug, Clone, Default)]
pub struct RaceState {
    origins: HashMap<String, OriginRace>,
    /// Fingerprint of the local address set at the last [`RaceState::network`] call.
    addresses: Option<u64>,
}

impl RaceState {
    /// An empty state: no RTTs, nothing broken.
    pub fn new() -> Self {
        RaceState::default()
    }

    /// Tells the state the current local address set (a fingerprint, see
    /// [`local_address_fingerprint`]); a change forgets everything (Chromium clears
    /// broken alternative services on a network change). Returns whether it changed.
    pub fn network(&mut self, fingerprint: u64) -> bool {
        let changed = self.addresses.is_some_and(|old| old != fingerprint);
        if changed {
            self.origins.clear();
        }
        self.addresses = Some(fingerprint);
        changed
    }

    /// How long TCP waits behind QUIC for a new connection to `origin`.
    pub fn tcp_delay(&self, origin: &str) -> Duration {
        match self.origins.get(origin).and_then(|o| o.srtt_ms) {
            Some(srtt) if srtt.is_finite() && srtt > 0.0 => {
                Duration::try_from_secs_f64(1.5 * srtt / 1e3).map_or(RACE_MIN_DELAY, |d| d.max(RACE_MIN_DELAY))
            }
            _ => RACE_MIN_DELAY,
        }
    }

    /// Whether QUIC is marked broken for `origin` at `now`.
    pub fn is_broken(&self, origin: &str, now: Instant) -> bool {
        self.broken_for(origin, now).is_some()
    }

    /// How much longer QUIC stays broken for `origin` (None: not broken).
    pub fn broken_for(&self, origin: &str, now: Instant) -> Option<Duration> {
        let until = self.origins.get(origin)?.broken_until?;
        (until > now).then(|| until - now)
    }

    /// The protocol the last race to `origin` chose.
    pub fn choice(&self, origin: &str) -> Option<TransportPref> {
        self.origins.get(origin).and_then(|o| o.choice)
    }

    /// QUIC connected first: it is the origin's choice and its break count is reset.
    pub fn quic_won(&mut self, origin: &str) {
        let o = self.origins.entry(origin.to_string()).or_default();
        o.choice = Some(TransportPref::Quic);
        o.breaks = 0;
        o.broken_until = None;
    }

    /// QUIC failed or lost while TCP connected: TCP is the choice and QUIC is broken
    /// for `BROKEN_BASE * 2^(consecutive breaks before)`, at most `BROKEN_MAX`.
    /// Returns how long.
    pub fn quic_broken(&mut self, origin: &str, now: Instant) -> Duration {
        let o = self.origins.entry(origin.to_string()).or_default();
        let factor = 1u32.checked_shl(o.breaks).unwrap_or(u32::MAX);
        let span = BROKEN_BASE
            .checked_mul(factor)
            .map_or(BROKEN_MAX, |d| d.min(BROKEN_MAX));
        o.breaks = o.breaks.saturating_add(1);
        o.broken_until = Some(now + span);
        o.choice = Some(TransportPref::Tcp);
        span
    }

    /// TCP connected while QUIC was broken (the choice, without a new break).
    pub fn tcp_used(&mut self, origin: &str) {
        self.origins.entry(origin.to_string()).or_default().choice = Some(TransportPref::Tcp);
    }

    /// The smoothed RTT a QUIC request measured to `origin`, milliseconds (any mode).
    pub fn observe_quic_rtt(&mut self, origin: &str, rtt_ms: f64) {
        if rtt_ms.is_finite() && rtt_ms > 0.0 {
            self.origins.entry(origin.to_string()).or_default().quic_srtt_ms = Some(rtt_ms);
        }
    }

    /// The last smoothed RTT a QUIC request measured to `origin`.
    pub fn quic_rtt(&self, origin: &str) -> Option<Duration> {
        let ms = self.origins.get(origin)?.quic_srtt_ms?;
        Duration::try_from_secs_f64(ms / 1e3).ok()
    }

    /// The smoothed RTT a raced request measured to `origin`, milliseconds.
    pub fn observe_rtt(&mut self, origin: &str, rtt_ms: f64) {
        if rtt_ms.is_finite() && rtt_ms > 0.0 {
            if let Some(o) = self.origins.get_mut(origin) {
                o.srtt_ms = Some(rtt_ms);
            } else {
                self.origins.insert(
                    origin.to_string(),
                    OriginRace {
                        srtt_ms: Some(rtt_ms),
                        ..OriginRace::default()
                    },
                );
            }
        }
    }
}

/// A fingerprint of this host's local address set (every address of every interface,
/// sorted), from `getifaddrs`. A change of it is what the race calls a network change.
/// Returns 0 when the set cannot be read (then no change is ever seen).
pub fn local_address_fingerprint() -> u64 {
    let mut addrs = local_addresses();
    addrs.sort();
    addrs.dedup();
    let mut h = DefaultHasher::new();
    addrs.hash(&mut h);
    h.finish()
}

fn local_addresses() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, valid until freed.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points to a sockaddr whose family tells its real type.
            let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
            if family == libc::AF_INET {
                // SAFETY: family AF_INET means the storage is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                out.push(IpAddr::from(u32::from_be(sin.sin_addr.s_addr).to_be_bytes()));
            } else if family == libc::AF_INET6 {
                // SAFETY: family AF_INET6 means the storage is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                out.push(IpAddr::from(sin6.sin6_addr.s6_addr));
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: head came from a successful getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out
}

impl Client {
    /// `Race`: follow the last race's choice while its connection lives; otherwise race
    /// a new connection (QUIC first, TCP after the delay) unless QUIC is broken, in
    /// which case TCP is used directly. Rules and reasons: `crate::race`.
    pub(crate) async fn send_race(
        &self,
        key: &Key,
        dial: &Dial<'_>,
        url: &ParsedUrl,
        req: &Request,
        p: &mut Progress,
    ) -> Result<Exchanged, Failure> {
        let origin = key.0.as_str();
        let race_lock = lock_std(&self.inner.race_locks).entry(key.clone()).or_default().clone();
        let racing = race_lock.lock().await;
        let (broken, choice, delay) = {
            let mut race = lock_std(&self.inner.race);
            race.network(local_address_fingerprint());
            (
                race.is_broken(origin, Instant::now()),
                race.choice(origin),
                race.tcp_delay(origin),
            )
        };
        if broken {
            drop(racing);
            p.race = Some("tcp-broken");
            lock_std(&self.inner.race).tcp_used(origin);
            return self.send_h2(key, dial, url, req, p).await;
        }
        if !req.force_new_connection {
            let idle = self.inner.cfg.idle_timeout;
            let now = Instant::now();
            match choice {
                Some(TransportPref::Quic) => {
                    let live = self
                        .inner
                        .pools
                        .h3
                        .slot(key)
                        .lock()
                        .await
                        .conn
                        .as_ref()
                        .is_some_and(|c| c.reusable(idle, now));
                    if live {
                        drop(racing);
                        p.race = Some("reuse-quic");
                        return self.send_h3(key, dial, url, req, Fallback::Available, p).await;
                    }
                }
                Some(TransportPref::Tcp) => {
                    let live = {
                        let slot = self.inner.pools.h2.slot(key);
                        let slot = slot.lock().await;
                        slot.h1_only || slot.h2.as_ref().is_some_and(|c| c.reusable(idle, now))
                    };
                    if live {
                        drop(racing);
                        p.race = Some("reuse-tcp");
                        return self.send_h2(key, dial, url, req, p).await;
                    }
                }
                _ => {}
            }
        }
        // The race's connection goes into the pool, and the request then takes it from
        // there like any pooled request (so it must not ask for yet another one).
        let pooled_req = Request {
            force_new_connection: false,
            ..req.clone()
        };
        match self.race_connect(dial, delay).await {
            Err(e) => {
                p.race = Some("failed");
                p.protocol = Protocol::H2;
                Err(Failure::from(e))
            }
            Ok(Raced::Quic(conn)) => {
                lock_std(&self.inner.race).quic_won(origin);
                self.inner.pools.h3.slot(key).lock().await.conn = Some(Arc::new(*conn));
                drop(racing);
                p.race = Some("quic");
                let res = self.send_h3(key, dial, url, &pooled_req, Fallback::Available, p).await;
                p.new_connection = true;
                res
            }
            Ok(Raced::Tcp { io, quic_failed }) => {
                let span = lock_std(&self.inner.race).quic_broken(origin, Instant::now());
                tracing::debug!(
                    origin,
                    quic_failed,
                    broken_s = span.as_secs(),
                    "QUIC lost the race; marked broken"
                );
                p.race = Some(if quic_failed { "tcp-quic-failed" } else { "tcp-won" });
                let id = self.next_id();
                let slot = self.inner.pools.h2.slot(key);
                let mut tcp = slot.lock().await;
                if io.is_h2() {
                    tcp.h2 = Some(Arc::new(start_h2(*io, id, dial.target.addr).await?));
                    drop(tcp);
                    drop(racing);
                    let res = self.send_h2(key, dial, url, &pooled_req, p).await;
                    p.new_connection = true;
                    res
                } else {
                    tcp.h1_only = true;
                    drop(tcp);
                    let conn = start_h1(*io, id, dial.target.addr).await?;
                    drop(racing);
                    self.send_h1(key, dial, url, req, Some(conn), p).await
                }
            }
        }
    }

    /// Opens one connection by racing: the QUIC handshake starts now, TCP+TLS after
    /// `delay` (at once if QUIC fails first); the first to connect wins and the other
    /// attempt is dropped. Fails only when both fail (with TCP's error).
    async fn race_connect(&self, dial: &Dial<'_>, delay: Duration) -> Result<Raced, ClientError> {
        let addr = dial.target.addr.to_string();
        let quic = self.open_quic(dial);
        tokio::pin!(quic);
        let head_start = tokio::time::sleep(delay);
        tokio::pin!(head_start);
        let quic_failed = tokio::select! {
            r = &mut quic => match r {
                Ok(conn) => return Ok(Raced::Quic(Box::new(conn))),
                Err(e) => {
                    tracing::debug!(%addr, error = %e, "QUIC failed before TCP started");
                    true
                }
            },
            () = &mut head_start => false,
        };
        let tcp = open_tcp_tls(dial, &self.inner.tls_tcp);
        tokio::pin!(tcp);
        if quic_failed {
            return tcp.await.map(|io| Raced::Tcp {
                io: Box::new(io),
                quic_failed: true,
            });
        }
        tokio::select! {
            r = &mut quic => match r {
                Ok(conn) => Ok(Raced::Quic(Box::new(conn))),
                Err(e) => {
                    tracing::debug!(%addr, error = %e, "QUIC failed while TCP was connecting");
                    tcp.await.map(|io| Raced::Tcp { io: Box::new(io), quic_failed: true })
                }
            },
            r = &mut tcp => match r {
                Ok(io) => Ok(Raced::Tcp { io: Box::new(io), quic_failed: false }),
                Err(tcp_err) => match quic.await {
                    Ok(conn) => Ok(Raced::Quic(Box::new(conn))),
                    Err(_) => Err(tcp_err),
                },
            },
        }
    }
}

/// The connection a race produced.
enum Raced {
    /// QUIC connected first.
    Quic(Box<H3Conn>),
    /// TCP+TLS connected first (`quic_failed`: QUIC had failed, rather than being slower).
    Tcp { io: Box<TcpTls>, quic_failed: bool },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_waits_300_ms_without_an_rtt_and_one_and_a_half_rtts_with_a_long_one() {
        let mut s = RaceState::new();
        assert_eq!(s.tcp_delay("a:443"), Duration::from_millis(300));
        s.observe_rtt("a:443", 50.0);
        assert_eq!(s.tcp_delay("a:443"), Duration::from_millis(300), "floor");
        s.observe_rtt("a:443", 400.0);
        assert_eq!(s.tcp_delay("a:443"), Duration::from_millis(600));
        s.observe_rtt("a:443", f64::NAN);
        assert_eq!(s.tcp_delay("a:443"), Duration::from_millis(600), "bad RTTs are ignored");
    }

    #[test]
    fn quic_breaks_for_five_minutes_doubling_per_consecutive_break_up_to_two_days() {
        let mut s = RaceState::new();
        let t0 = Instant::now();
        assert_eq!(s.quic_broken("a:443", t0), Duration::from_secs(300));
        assert!(s.is_broken("a:443", t0 + Duration::from_secs(299)));
        assert!(!s.is_broken("a:443", t0 + Duration::from_secs(300)));
        assert_eq!(s.quic_broken("a:443", t0), Duration::from_secs(600));
        assert_eq!(s.quic_broken("a:443", t0), Duration::from_secs(1200));
        for _ in 0..40 {
            s.quic_broken("a:443", t0);
        }
        assert_eq!(s.quic_broken("a:443", t0), BROKEN_MAX);
        assert!(!s.is_broken("b:443", t0), "per origin");
        s.quic_won("a:443");
        assert!(!s.is_broken("a:443", t0));
        assert_eq!(
            s.quic_broken("a:443", t0),
            Duration::from_secs(300),
            "a win resets the count"
        );
        assert_eq!(s.choice("a:443"), Some(TransportPref::Tcp));
    }

    #[test]
    fn a_network_change_forgets_broken_quic_but_the_same_network_does_not() {
        let mut s = RaceState::new();
        let t0 = Instant::now();
        assert!(!s.network(1), "first sight is no change");
        s.quic_broken("a:443", t0);
        assert!(!s.network(1));
        assert!(s.is_broken("a:443", t0));
        assert!(s.network(2));
        assert!(!s.is_broken("a:443", t0));
        assert_eq!(s.choice("a:443"), None);
    }

    #[test]
    fn this_host_has_a_local_address_set() {
        // Loopback at least; the fingerprint is stable while nothing changes.
        assert!(!local_addresses().is_empty());
        assert_eq!(local_address_fingerprint(), local_address_fingerprint());
    }
}
