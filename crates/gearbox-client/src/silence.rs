//! Silent-path detection on QUIC connections: a connection with requests outstanding
//! that hears nothing from the server for a few probe timeouts is declared broken, so no
//! request waits for QUIC's idle timeout (30 s) when UDP is blackholed mid-session (a
//! firewall or a mobile network that starts dropping UDP).
//!
//! The rule (what Chromium does, see below, scaled to act in about 1-3 s):
//!
//! - **Signal: nothing received.** The clock runs while at least one request is
//!   outstanding on the connection, from the later of the first request's start and the
//!   last UDP datagram the connection received from the server (quinn's
//!   `ConnectionStats::udp_rx.datagrams`, read every [`POLL`]). Received datagrams rather
//!   than ACK frames (`frame_rx.acks`): during a download the client sends only ACKs,
//!   which elicit none, so the server's data packets are then the only sign that the
//!   path works. Rather than sent/lost packets (`path.lost_packets`): a throttled but
//!   working path loses packets too and must not be closed; only a path on which
//!   *nothing* comes back is silent.
//! - **Something is always in flight to answer.** The QUIC transport of the client sends
//!   a PING after [`RETRANSMITTABLE_ON_WIRE`] (200 ms) without receiving anything
//!   (quinn's `keep_alive_interval`, which restarts on every received packet), so a
//!   healthy server answers within an RTT plus its ACK delay even while it is thinking
//!   or the client has nothing to send. This is Chromium's
//!   `kDefaultRetransmittableOnWireTimeout` (200 ms, net/quic/quic_context.h): PINGs so
//!   that no more than that passes without a retransmittable packet on the wire.
//! - **Silent after k PTOs.** The connection is silent after
//!   `max(SILENCE_FLOOR, RETRANSMITTABLE_ON_WIRE + k × PTO)`, k = [`PTOS_FOR_SILENCE`]
//!   = 4, PTO = SRTT + 4·RTTVAR + max_ack_delay (RFC 9002 §6.2.1). quinn exposes the
//!   smoothed RTT (`Connection::rtt`) but not RTTVAR; RTTVAR is taken as SRTT / 2, the
//!   value RFC 9002 §5.3 starts from, so PTO = 3·SRTT + 25 ms (the default
//!   max_ack_delay). The 1 s floor keeps scheduling hiccups on sub-millisecond paths
//!   (loopback) from closing working connections. At 40 ms RTT the limit is 1 s, at
//!   100 ms 1.5 s, at 200 ms 2.7 s.
//! - **Then:** the connection is closed, requests in flight on it fail with
//!   [`crate::ClientError::QuicSilent`], and the client's fallback rules
//!   (`crate::client`) retry idempotent ones over TCP and mark QUIC broken for the origin.
//!
//! Why k = 4 and not Chromium's blackhole delay: Chromium's QUICHE has two detectors
//! (`QuicNetworkBlackholeDetector`, quiche/quic/core/quic_network_blackhole_detector.h).
//! *Path degrading* fires after `kNumProbeTimeoutsForPathDegradingDelay` = 4 PTOs
//! without forward progress (`QuicSentPacketManager::GetPathDegradingDelay`,
//! quic_sent_packet_manager.cc); Chromium then moves the session to another network if
//! it has one (`migrate_sessions_early_v2`). The *network blackhole* closes the
//! connection after `kDefaultMaxTailLossProbes` (2) tail-loss probes plus 5 RTOs
//! (`GetNetworkBlackholeDelay`; 5 by `default_enable_5rto_blackhole_detection_` in
//! quic_connection.cc): 2 TLPs and 31 RTO intervals of at least 200 ms
//! (`kMinRetransmissionTimeMs`), over 6 s. A client with a working TCP path to the same
//! server has an alternative "network" at hand, so it acts where Chromium acts with one:
//! at path degrading. A false alarm costs one retry over TCP and QUIC broken for 300 s;
//! a missed blackhole costs every outstanding request the wait.
//!
//! A QUIC *handshake* has no statistics to watch (quinn gives none before it completes),
//! so it is bounded by the same limit computed from the last RTT seen to the origin
//! ([`handshake_grace`]), and never by less than [`HANDSHAKE_GRACE_FLOOR`]: two of
//! quinn's initial PTOs (333 ms initial RTT, RFC 9002 §6.2.2), so one lost Initial is
//! retransmitted and still answered in time. The floor holds even when the origin's RTT
//! is known to be short: quinn's handshake retransmits on its initial RTT, not on ours,
//! so its first retransmission comes ~1 s in whatever the path; a 1 s bound turned one
//! Initial dropped by a full queue into a path taken out (seen in the emulator's
//! multipath test, a 20 ms path whose queue other page loads were filling).
//!
//! That bound is short on purpose: it is for a request that has somewhere else to go
//! when QUIC does not answer ([`Fallback::Available`]: the race and `auto` fall back to
//! TCP, a multipath load carries on over its other paths), where waiting costs more than
//! giving up. A request that can only go over QUIC ([`Fallback::Unavailable`]: a fixed
//! `Quic` transport, forced HTTP/3) gains nothing by giving up early; the handshake only
//! fails it. On a 300-500 ms path with a few percent loss, two lost Initials push a
//! handshake past 2 s (quinn's probes go at about 1, 3 and 7 s), so such a request waits
//! up to [`HANDSHAKE_LIMIT_WITHOUT_FALLBACK`], 10 s, what Chromium allows any QUIC
//! handshake: QUICHE's `kMaxTimeForCryptoHandshakeSecs` (quiche/quic/core/
//! quic_constants.h), the default of `QuicConfig`'s `max_time_before_crypto_handshake`
//! and of Chromium's `QuicParams::max_time_before_crypto_handshake` (net/quic/
//! quic_context.h). Chromium also closes a handshake that receives nothing for
//! `kInitialIdleTimeoutSecs` (5 s, the same file); quinn tells nothing about a handshake
//! in progress, so that shorter rule cannot be applied here, and a handshake into a
//! blackhole waits the whole 10 s. ([`handshake_bound`]; the connect timeout, 10 s by
//! default, still caps both.)
//!
//! [`SilenceClock`] is the rule as a sans-IO object (tested with invented time);
//! [`SilenceWatch`] runs it for one connection in its own task.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};

/// Longest the client lets pass without receiving anything before it sends a PING
/// (Chromium's `kDefaultRetransmittableOnWireTimeout`).
pub const RETRANSMITTABLE_ON_WIRE: Duration = Duration::from_millis(200);
/// Probe timeouts without anything received that make a connection silent (Chromium's
/// `kNumProbeTimeoutsForPathDegradingDelay`).
pub const PTOS_FOR_SILENCE: u32 = 4;
/// The peer's ACK delay bound assumed in the PTO (RFC 9000 §18.2 default
/// `max_ack_delay`).
pub const MAX_ACK_DELAY: Duration = Duration::from_millis(25);
/// No connection is declared silent sooner than this.
pub const SILENCE_FLOOR: Duration = Duration::from_secs(1);
/// The shortest bound on a QUIC handshake, and the bound when no RTT to the origin is
/// known: two of quinn's initial PTOs.
pub const HANDSHAKE_GRACE_FLOOR: Duration = Duration::from_secs(2);
/// The bound on a QUIC handshake of a request without a fallback ([`Fallback::Unavailable`]):
/// Chromium's limit on a crypto handshake, QUICHE's `kMaxTimeForCryptoHandshakeSecs`
/// (quiche/quic/core/quic_constants.h).
pub const HANDSHAKE_LIMIT_WITHOUT_FALLBACK: Duration = Duration::from_secs(10);
/// How often a watched connection's statistics are read while requests are outstanding.
pub const POLL: Duration = Duration::from_millis(25);

/// RFC 9002's probe timeout with RTTVAR = SRTT / 2: 3 × SRTT + max_ack_delay.
pub fn pto(srtt: Duration) -> Duration {
    srtt.saturating_mul(3).saturating_add(MAX_ACK_DELAY)
}

/// How long a connection with requests outstanding may hear nothing before it is
/// silent: `max(SILENCE_FLOOR, RETRANSMITTABLE_ON_WIRE + PTOS_FOR_SILENCE × PTO)`.
pub fn silent_after(srtt: Duration) -> Duration {
    RETRANSMITTABLE_ON_WIRE
        .saturating_add(pto(srtt).saturating_mul(PTOS_FOR_SILENCE))
        .max(SILENCE_FLOOR)
}

/// The bound on a QUIC handshake: [`silent_after`] of the last RTT seen to the origin,
/// at least [`HANDSHAKE_GRACE_FLOOR`].
pub fn handshake_grace(srtt: Option<Duration>) -> Duration {
    srtt.map_or(HANDSHAKE_GRACE_FLOOR, silent_after)
        .max(HANDSHAKE_GRACE_FLOOR)
}

/// Whether a request whose QUIC handshake fails has somewhere else to go, which decides
/// how long the handshake may take ([`handshake_bound`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// It has: TCP (`auto`, the race) or another path (a multipath load). The handshake
    /// is given up after [`handshake_grace`].
    Available,
    /// It has not (a fixed `Quic` transport, forced HTTP/3): the handshake may take up
    /// to [`HANDSHAKE_LIMIT_WITHOUT_FALLBACK`].
    Unavailable,
}

/// The bound on a new QUIC handshake: [`handshake_grace`] of the last RTT seen to the
/// origin when the request has a fallback, else at least
/// [`HANDSHAKE_LIMIT_WITHOUT_FALLBACK`] (never less than with one); never less than
/// `floor` (the client's `quic_silence_floor`) either way.
pub fn handshake_bound(srtt: Option<Duration>, fallback: Fallback, floor: Duration) -> Duration {
    let grace = handshake_grace(srtt);
    let bound = match fallback {
        Fallback::Available => grace,
        Fallback::Unavailable => grace.max(HANDSHAKE_LIMIT_WITHOUT_FALLBACK),
    };
    bound.max(floor)
}

/// The rule of the module doc over one connection's readings.
#[derive(Debug, Clone)]
pub struct SilenceClock {
    /// (datagrams received at the last change, when that change was seen); `None` while
    /// no request is outstanding.
    running: Option<(u64, Instant)>,
    /// No silence shorter than this counts (at least [`SILENCE_FLOOR`]).
    floor: Duration,
}

impl Default for SilenceClock {
    fn default() -> Self {
        SilenceClock::new()
    }
}

impl SilenceClock {
    /// A clock with nothing outstanding.
    pub fn new() -> Self {
        SilenceClock::with_floor(SILENCE_FLOOR)
    }

    /// A clock that declares no silence shorter than `floor` (the client's
    /// `quic_silence_floor`; never below [`SILENCE_FLOOR`]).
    pub fn with_floor(floor: Duration) -> Self {
        SilenceClock {
            running: None,
            floor: floor.max(SILENCE_FLOOR),
        }
    }

    /// One reading at `now`: whether requests are outstanding, the connection's count of
    /// received datagrams, its smoothed RTT. Returns how long it has been silent when
    /// that passed [`silent_after`].
    pub fn observe(&mut self, outstanding: bool, rx_datagrams: u64, srtt: Duration, now: Instant) -> Option<Duration> {
        if !outstanding {
            self.running = None;
            return None;
        }
        match self.running {
            Some((rx, since)) if rx == rx_datagrams => {
                let silent = now.saturating_duration_since(since);
                (silent >= silent_after(srtt).max(self.floor)).then_some(silent)
            }
            _ => {
                self.running = Some((rx_datagrams, now));
                None
            }
        }
    }
}

/// One QUIC connection's watch: how many requests are outstanding on it, and whether it
/// was found silent.
#[derive(Debug)]
pub(crate) struct SilenceWatch {
    outstanding: AtomicUsize,
    wake: Notify,
    /// `Some(ms)` once the connection was declared silent after `ms` without a datagram.
    silent: watch::Sender<Option<u64>>,
}

/// An outstanding request on a watched connection (counted until dropped).
pub(crate) struct Outstanding(Arc<SilenceWatch>);

impl Drop for Outstanding {
    fn drop(&mut self) {
        self.0.outstanding.fetch_sub(1, Ordering::AcqRel);
    }
}

impl SilenceWatch {
    /// Starts watching `quic` in a task of its own. The task ends when the connection
    /// closes or the returned watch is dropped; it closes a connection found silent, and
    /// one left unused (nothing outstanding) for `idle`, which the pool would not reuse
    /// and whose PINGs would otherwise go on.
    pub fn spawn(quic: quinn::Connection, idle: Duration, floor: Duration) -> Arc<SilenceWatch> {
        let (silent, _) = watch::channel(None);
        let w = Arc::new(SilenceWatch {
            outstanding: AtomicUsize::new(0),
            wake: Notify::new(),
            silent,
        });
        tokio::spawn(run(quic, Arc::downgrade(&w), idle, floor));
        w
    }

    /// Counts a request as outstanding until the guard is dropped.
    pub fn begin(self: &Arc<Self>) -> Outstanding {
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        self.wake.notify_one();
        Outstanding(self.clone())
    }

    /// Resolves with the silence (ms) once the connection is declared silent.
    pub async fn silenced(&self) -> u64 {
        let mut rx = self.silent.subscribe();
        let found = rx.wait_for(Option::is_some).await.ok().and_then(|v| *v);
        match found {
            Some(ms) => ms,
            // The watch cannot be dropped while `self` lives; never resolve otherwise.
            None => std::future::pending().await,
        }
    }

    /// The silence (ms) if the connection was declared silent.
    pub fn silent_ms(&self) -> Option<u64> {
        *self.silent.borrow()
    }
}

/// The watching task (see [`SilenceWatch::spawn`]).
async fn run(quic: quinn::Connection, watch: Weak<SilenceWatch>, idle: Duration, floor: Duration) {
    let mut clock = SilenceClock::with_floor(floor);
    let mut idle_since = Instant::now();
    loop {
        let Some(w) = watch.upgrade() else { return };
        let busy = w.outstanding.load(Ordering::Acquire) > 0;
        let now = Instant::now();
        if busy {
            idle_since = now;
            let rx = quic.stats().udp_rx.datagrams;
            if let Some(silent) = clock.observe(true, rx, quic.rtt(), now) {
                let ms = u64::try_from(silent.as_millis()).unwrap_or(u64::MAX);
                tracing::debug!(remote = %quic.remote_address(), silent_ms = ms, "QUIC connection went silent; closing it");
                w.silent.send_replace(Some(ms));
                quic.close(quinn::VarInt::from_u32(H3_NO_ERROR), b"silent path");
                return;
            }
        } else {
            clock.observe(false, 0, Duration::ZERO, now);
            if now.saturating_duration_since(idle_since) >= idle {
                quic.close(quinn::VarInt::from_u32(H3_NO_ERROR), b"idle");
                return;
            }
        }
        // Poll while busy; while idle, sleep until a request starts (or, at the latest,
        // the idle limit, to notice an unused connection and a dropped watch).
        let wait = if busy { POLL } else { idle.min(Duration::from_secs(1)) };
        let woken = async {
            if !busy {
                w.wake.notified().await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            _ = quic.closed() => return,
            () = tokio::time::sleep(wait) => {}
            () = woken => {}
        }
    }
}

/// HTTP/3's "no error" code (RFC 9114 §8.1), used to close a connection the client gives up.
const H3_NO_ERROR: u32 = 0x100;

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn the_limit_is_four_ptos_after_the_ping_with_a_one_second_floor() {
        assert_eq!(pto(ms(40)), ms(145));
        assert_eq!(silent_after(ms(1)), SILENCE_FLOOR, "loopback: the floor");
        assert_eq!(silent_after(ms(40)), SILENCE_FLOOR, "0.2 + 4 x 0.145 = 0.78 s < 1 s");
        assert_eq!(silent_after(ms(100)), ms(200 + 4 * 325));
        assert_eq!(silent_after(ms(200)), ms(200 + 4 * 625));
        assert_eq!(handshake_grace(None), HANDSHAKE_GRACE_FLOOR);
        // A known short RTT does not shorten quinn's first Initial retransmission (~1 s).
        assert_eq!(handshake_grace(Some(ms(20))), HANDSHAKE_GRACE_FLOOR);
        assert_eq!(handshake_grace(Some(ms(100))), HANDSHAKE_GRACE_FLOOR);
        assert_eq!(handshake_grace(Some(ms(200))), ms(200 + 4 * 625));
    }

    #[test]
    fn a_handshake_without_a_fallback_may_take_chromiums_ten_seconds() {
        let floor = SILENCE_FLOOR;
        // With a fallback: exactly the grace (today's bound).
        for rtt in [None, Some(ms(20)), Some(ms(200)), Some(ms(1_000))] {
            assert_eq!(handshake_bound(rtt, Fallback::Available, floor), handshake_grace(rtt));
        }
        assert_eq!(handshake_bound(None, Fallback::Available, floor), ms(2_000));
        // Without one: 10 s, or the grace where a very long RTT makes that longer.
        assert_eq!(handshake_bound(None, Fallback::Unavailable, floor), ms(10_000));
        assert_eq!(handshake_bound(Some(ms(300)), Fallback::Unavailable, floor), ms(10_000));
        // 0.2 + 4 x (3 + 0.025) = 12.3 s.
        assert_eq!(
            handshake_bound(Some(ms(1_000)), Fallback::Unavailable, floor),
            ms(12_300)
        );
        // The client's silence floor raises both.
        let high = ms(15_000);
        assert_eq!(handshake_bound(None, Fallback::Available, high), high);
        assert_eq!(handshake_bound(None, Fallback::Unavailable, high), high);
    }

    #[test]
    fn silence_counts_only_while_requests_are_outstanding_and_nothing_arrives() {
        let t0 = Instant::now();
        let rtt = ms(40);
        let mut c = SilenceClock::new();
        // Idle for a minute: never silent.
        assert_eq!(c.observe(false, 5, rtt, t0), None);
        assert_eq!(c.observe(false, 5, rtt, t0 + ms(60_000)), None);
        // A request starts; nothing arrives for 999 ms, then a datagram.
        let t1 = t0 + ms(60_000);
        assert_eq!(c.observe(true, 5, rtt, t1), None);
        assert_eq!(c.observe(true, 5, rtt, t1 + ms(999)), None);
        assert_eq!(
            c.observe(true, 6, rtt, t1 + ms(1_000)),
            None,
            "a datagram restarts the clock"
        );
        assert_eq!(c.observe(true, 6, rtt, t1 + ms(1_999)), None);
        assert_eq!(c.observe(true, 6, rtt, t1 + ms(2_000)), Some(ms(1_000)));
    }

    #[test]
    fn a_request_starting_after_idle_time_does_not_inherit_it() {
        let t0 = Instant::now();
        let mut c = SilenceClock::new();
        assert_eq!(c.observe(true, 1, ms(10), t0), None);
        assert_eq!(c.observe(false, 1, ms(10), t0 + ms(500)), None);
        // Nothing received during 5 s of idleness, then a request: its clock starts now.
        assert_eq!(c.observe(true, 1, ms(10), t0 + ms(5_500)), None);
        assert_eq!(c.observe(true, 1, ms(10), t0 + ms(6_400)), None);
        assert_eq!(c.observe(true, 1, ms(10), t0 + ms(6_500)), Some(ms(1_000)));
    }

    #[test]
    fn a_long_rtt_path_gets_a_longer_limit() {
        let t0 = Instant::now();
        let mut c = SilenceClock::new();
        c.observe(true, 0, ms(300), t0);
        // 0.2 + 4 x 0.925 = 3.9 s.
        assert_eq!(c.observe(true, 0, ms(300), t0 + ms(3_899)), None);
        assert_eq!(c.observe(true, 0, ms(300), t0 + ms(3_900)), Some(ms(3_900)));
    }
}
