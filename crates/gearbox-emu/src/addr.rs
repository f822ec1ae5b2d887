//! The address plan.
//!
//! Each run has its own server and client namespaces and adds nothing to the
//! root namespace, so addresses of concurrent runs never meet and a fixed plan
//! is enough (a per-run plan, e.g. `10.<k>.x.y` from the pid, was rejected: it
//! would only shrink the space and make addresses differ between runs).
//!
//! - server: [`SERVER_ADDR`] (`10.0.0.1/32`);
//! - client prefix `i` (a path in `single`/`multipath`, a /24 in `population`),
//!   host `h`: `100.(64 + i / 256).(i % 256).(h + 1)` inside `100.64.0.0/10`,
//!   which leaves room for [`MAX_PREFIXES`] /24s of [`MAX_HOSTS`] hosts.

use std::net::Ipv4Addr;

/// The server's address in its namespace.
pub const SERVER_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
/// The route the server namespace sends every client through.
pub const CLIENT_RANGE: &str = "100.64.0.0/10";
/// /24s available to clients (the /10 holds 2^14 of them).
pub const MAX_PREFIXES: u32 = 1 << 14;
/// Hosts per /24 (`.1` to `.254`).
pub const MAX_HOSTS: u32 = 254;

/// Address of host `host` (0-based) in client prefix `prefix` (0-based).
/// Callers keep `prefix < MAX_PREFIXES` and `host < MAX_HOSTS`.
pub fn client_addr(prefix: u32, host: u32) -> Ipv4Addr {
    let prefix = prefix.min(MAX_PREFIXES - 1);
    let host = host.min(MAX_HOSTS - 1);
    Ipv4Addr::new(100, 64 + (prefix >> 8) as u8, (prefix & 0xff) as u8, (host + 1) as u8)
}

/// The (prefix, host) of a client address, `None` outside the client plan.
pub fn client_index(addr: [u8; 4]) -> Option<(u32, u32)> {
    let [a, b, c, d] = addr;
    if a != 100 || !(64..128).contains(&b) || d == 0 || d == 255 {
        return None;
    }
    Some(((u32::from(b - 64) << 8) | u32::from(c), u32::from(d) - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_addresses_round_trip_through_the_plan() {
        for (p, h) in [(0, 0), (1, 0), (255, 3), (256, 0), (MAX_PREFIXES - 1, MAX_HOSTS - 1)] {
            let a = client_addr(p, h);
            assert_eq!(client_index(a.octets()), Some((p, h)), "{a}");
        }
        assert_eq!(client_addr(0, 0), Ipv4Addr::new(100, 64, 0, 1));
        assert_eq!(client_addr(3, 1), Ipv4Addr::new(100, 64, 3, 2));
        assert_eq!(client_addr(300, 0), Ipv4Addr::new(100, 65, 44, 1));
    }

    #[test]
    fn addresses_outside_the_plan_are_not_clients() {
        for a in [
            [10, 0, 0, 1],
            [100, 63, 0, 1],
            [100, 128, 0, 1],
            [100, 64, 0, 0],
            [100, 64, 0, 255],
        ] {
            assert_eq!(client_index(a), None, "{a:?}");
        }
    }
}
