//! Stage 1: the policer by protocol.
//!
//! WiseTrans (§II-B "High spatial heterogeneity" and Fig. 7) reports
//! that ISP gateways and home routers treat UDP — hence QUIC — differently from
//! TCP: they drop it at random, rate-limit it, or block it outright. This stage
//! reproduces those three treatments for one IP protocol (UDP or TCP) and passes
//! everything else untouched.
//!
//! The protocol is read from the packet bytes themselves (IPv4 protocol byte,
//! IPv6 next-header after walking the usual extension headers) so that the TUN
//! emulator needs no side channel. A packet that is not parseable IP is never
//! policed: a middlebox that cannot classify a packet lets it through.
//!
//! The rate limit is a *policer* (a token bucket that drops what does not fit),
//! not a shaper that queues: that is what rate-limiting middleboxes in WiseTrans
//! do, and shaping is already the job of the queue+rate stage.

use std::time::Duration;

use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::DropReason;

/// IP protocol number of TCP (IANA).
pub const IPPROTO_TCP: u8 = 6;
/// IP protocol number of UDP (IANA).
pub const IPPROTO_UDP: u8 = 17;

/// Which transport protocol a policer targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// UDP, i.e. QUIC/HTTP3 — the usual target of middlebox QoS (WiseTrans §II-B).
    Udp,
    /// TCP.
    Tcp,
}

impl Protocol {
    /// The IANA protocol number.
    pub fn number(self) -> u8 {
        match self {
            Protocol::Udp => IPPROTO_UDP,
            Protocol::Tcp => IPPROTO_TCP,
        }
    }
}

/// What the policer does to packets of its protocol (WiseTrans §II-B: "randomly
/// dropping, rate limiting, or even blocking UDP traffic").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum PolicerConfig {
    /// No policing (also how a schedule removes a policer).
    #[default]
    None,
    /// Drop each packet of `protocol` independently with probability `drop_rate` (0..=1).
    Drop {
        /// Protocol the treatment applies to.
        protocol: Protocol,
        /// Probability in `[0, 1]` that a packet of `protocol` is dropped.
        drop_rate: f64,
    },
    /// Token-bucket policer: packets of `protocol` that find fewer tokens than their
    /// size are dropped. The bucket starts full.
    RateLimit {
        /// Protocol the treatment applies to.
        protocol: Protocol,
        /// Token refill rate, bits per second (> 0).
        rate_bps: u64,
        /// Bucket depth in bytes (> 0): the largest burst let through at line rate.
        burst_bytes: u64,
    },
    /// Drop every packet of `protocol`.
    Block {
        /// Protocol the treatment applies to.
        protocol: Protocol,
    },
}

impl PolicerConfig {
    /// The protocol this policer targets (`None` when it polices nothing).
    pub fn protocol(&self) -> Option<Protocol> {
        match self {
            PolicerConfig::None => None,
            PolicerConfig::Drop { protocol, .. }
            | PolicerConfig::RateLimit { protocol, .. }
            | PolicerConfig::Block { protocol } => Some(*protocol),
        }
    }
}

/// Extracts the transport protocol number of an IPv4 or IPv6 packet.
///
/// For IPv6 the chain of hop-by-hop (0), routing (43), fragment (44),
/// authentication (51) and destination-options (60) headers is walked, because a
/// middlebox classifies on the upper-layer protocol, not on the first header.
/// Returns `None` for anything that is not a well-formed enough IP header.
pub fn ip_protocol(packet: &[u8]) -> Option<u8> {
    let first = *packet.first()?;
    match first >> 4 {
        4 => {
            if packet.len() < 20 {
                return None;
            }
            Some(packet[9])
        }
        6 => {
            if packet.len() < 40 {
                return None;
            }
            let mut next = packet[6];
            let mut offset = 40usize;
            // A bound on the walk: a hostile packet cannot make us loop forever.
            for _ in 0..8 {
                let ext_len = match next {
                    0 | 43 | 60 => {
                        let len_byte = *packet.get(offset + 1)? as usize;
                        (len_byte + 1) * 8
                    }
                    44 => 8,
                    51 => {
                        let len_byte = *packet.get(offset + 1)? as usize;
                        (len_byte + 2) * 4
                    }
                    _ => return Some(next),
                };
                next = *packet.get(offset)?;
                offset += ext_len;
            }
            None
        }
        _ => None,
    }
}

/// The policer stage: one [`PolicerConfig`] applied to one direction.
#[derive(Debug, Clone)]
pub struct Policer {
    config: PolicerConfig,
    /// Tokens in the bucket, bytes (only used by `RateLimit`).
    tokens_bytes: f64,
    /// When the bucket was last refilled.
    last_refill: Option<Duration>,
}

impl Policer {
    /// A policer with a full bucket. The config is assumed validated
    /// ([`crate::LinkConfig::validate`]).
    pub fn new(config: PolicerConfig) -> Self {
        let tokens_bytes = match &config {
            PolicerConfig::RateLimit { burst_bytes, .. } => *burst_bytes as f64,
            _ => 0.0,
        };
        Policer {
            config,
            tokens_bytes,
            last_refill: None,
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &PolicerConfig {
        &self.config
    }

    /// Decides the fate of one packet arriving at `now`: `None` lets it pass.
    pub fn check(&mut self, now: Duration, packet: &[u8], rng: &mut ChaCha8Rng) -> Option<DropReason> {
        let target = self.config.protocol()?;
        if ip_protocol(packet) != Some(target.number()) {
            return None;
        }
        match self.config {
            PolicerConfig::None => None,
            PolicerConfig::Block { .. } => Some(DropReason::PolicerBlocked),
            PolicerConfig::Drop { drop_rate, .. } => {
                (rng.random::<f64>() < drop_rate).then_some(DropReason::PolicerRandom)
            }
            PolicerConfig::RateLimit {
                rate_bps, burst_bytes, ..
            } => {
                let burst = burst_bytes as f64;
                if let Some(last) = self.last_refill {
                    let elapsed = now.saturating_sub(last).as_secs_f64();
                    self.tokens_bytes = (self.tokens_bytes + elapsed * rate_bps as f64 / 8.0).min(burst);
                }
                self.last_refill = Some(now);
                let len = packet.len() as f64;
                if self.tokens_bytes >= len {
                    self.tokens_bytes -= len;
                    None
                } else {
                    Some(DropReason::PolicerRateLimited)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn ipv4(proto: u8, len: usize) -> Vec<u8> {
        let mut p = vec![0u8; len.max(20)];
        p[0] = 0x45;
        p[9] = proto;
        p
    }

    #[test]
    fn reads_protocol_of_ipv4_and_ipv6_with_extension_headers() {
        assert_eq!(ip_protocol(&ipv4(17, 40)), Some(17));
        let mut v6 = vec![0u8; 60];
        v6[0] = 0x60;
        v6[6] = 0; // hop-by-hop, 8 bytes, then TCP
        v6[40] = 6;
        v6[41] = 0;
        assert_eq!(ip_protocol(&v6), Some(6));
        assert_eq!(ip_protocol(&[0x45, 0, 0]), None);
        assert_eq!(ip_protocol(&[]), None);
        assert_eq!(ip_protocol(&[0x20; 64]), None);
    }

    #[test]
    fn block_drops_only_the_targeted_protocol() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut p = Policer::new(PolicerConfig::Block {
            protocol: Protocol::Udp,
        });
        let now = Duration::ZERO;
        assert_eq!(p.check(now, &ipv4(17, 100), &mut rng), Some(DropReason::PolicerBlocked));
        assert_eq!(p.check(now, &ipv4(6, 100), &mut rng), None);
        assert_eq!(p.check(now, b"not ip", &mut rng), None);
    }

    #[test]
    fn token_bucket_throttles_to_its_rate() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let rate_bps = 8_000_000u64; // 1 MB/s
        let burst = 10_000u64;
        let mut p = Policer::new(PolicerConfig::RateLimit {
            protocol: Protocol::Tcp,
            rate_bps,
            burst_bytes: burst,
        });
        // Offer 4 MB/s of 1000-byte TCP packets for 10 s.
        let pkt = ipv4(6, 1000);
        let mut passed = 0u64;
        for i in 0..40_000u64 {
            let now = Duration::from_micros(i * 250);
            if p.check(now, &pkt, &mut rng).is_none() {
                passed += 1000;
            }
        }
        let expected = 10.0 * rate_bps as f64 / 8.0 + burst as f64;
        let ratio = passed as f64 / expected;
        assert!(
            (0.99..=1.01).contains(&ratio),
            "passed {passed} bytes, expected ~{expected}"
        );
        // UDP is untouched by a TCP policer.
        assert_eq!(p.check(Duration::from_secs(10), &ipv4(17, 1000), &mut rng), None);
    }
}
