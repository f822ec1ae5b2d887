//! What travels on a simulated link: a QUIC datagram behind a 28-byte IPv4 + UDP
//! header, so that the link counts the same bytes per packet as the emulator does
//! (which carries real IP packets) and its protocol policer sees UDP.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use bytes::{Buf, BufMut, BytesMut};

/// IPv4 (20) + UDP (8).
pub const HEADER_BYTES: usize = 28;

/// Wraps `payload` from `src` to `dst`.
pub fn wrap(src: SocketAddrV4, dst: SocketAddrV4, payload: &[u8]) -> BytesMut {
    let total = HEADER_BYTES + payload.len();
    let mut b = BytesMut::with_capacity(total);
    b.put_u8(0x45); // version 4, header length 5 words
    b.put_u8(0);
    b.put_u16(total as u16);
    b.put_u32(0); // identification, flags, fragment offset
    b.put_u8(64); // TTL
    b.put_u8(17); // UDP
    b.put_u16(0); // checksum: not checked by the link model
    b.put_slice(&src.ip().octets());
    b.put_slice(&dst.ip().octets());
    b.put_u16(src.port());
    b.put_u16(dst.port());
    b.put_u16((8 + payload.len()) as u16);
    b.put_u16(0);
    b.put_slice(payload);
    b
}

/// The source, destination and payload of a wrapped datagram.
pub fn unwrap(mut p: BytesMut) -> Option<(SocketAddr, SocketAddr, BytesMut)> {
    if p.len() < HEADER_BYTES || p[0] != 0x45 || p[9] != 17 {
        return None;
    }
    let ip = |o: usize| Ipv4Addr::new(p[o], p[o + 1], p[o + 2], p[o + 3]);
    let port = |o: usize| u16::from_be_bytes([p[o], p[o + 1]]);
    let src = SocketAddr::V4(SocketAddrV4::new(ip(12), port(20)));
    let dst = SocketAddr::V4(SocketAddrV4::new(ip(16), port(22)));
    // Dropping the header moves the start of the buffer: no copy of the datagram.
    p.advance(HEADER_BYTES);
    Some((src, dst, p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_datagram_round_trips() {
        let a = "10.0.0.2:50000".parse().unwrap();
        let b = "10.0.0.1:4433".parse().unwrap();
        let p = wrap(a, b, b"hello");
        assert_eq!(p.len(), 33);
        let (s, d, payload) = unwrap(p).unwrap();
        assert_eq!(
            (s, d, &payload[..]),
            (SocketAddr::V4(a), SocketAddr::V4(b), &b"hello"[..])
        );
    }
}
