//! Transport-state snapshots: quinn's connection statistics and the kernel's `TCP_INFO`.
//!
//! `TCP_INFO` is read with a raw `getsockopt` on libc's `tcp_info` (which follows the
//! kernel's struct up to 6.x); socket2 exposes only a few fields of it. The kernel fills
//! as much of the struct as it knows and we start from zeroes, so older kernels give
//! zero for newer fields instead of garbage.

use std::os::fd::{AsFd, AsRawFd};

use crate::telemetry::TransportSnapshot;

/// Raw `TCP_INFO` of a TCP socket.
pub fn tcp_info<S: AsFd>(socket: &S) -> std::io::Result<libc::tcp_info> {
    // SAFETY: tcp_info is plain old data; an all-zero value is valid.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the pointer and length describe `info`, which outlives the call.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_fd().as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(info)
}

/// Bytes sent on a TCP socket and not yet acknowledged by the peer.
pub fn tcp_unacked_bytes(info: &libc::tcp_info) -> u64 {
    info.tcpi_bytes_sent
        .saturating_sub(info.tcpi_bytes_retrans)
        .saturating_sub(info.tcpi_bytes_acked)
}

/// Retransmission timeouts of the connection (`tcpi_total_rto`), or `None` where the kernel
/// does not report it: before Linux 6.7 `TCP_INFO` is shorter and the field reads zero, so a
/// zero is a count only when the kernel filled the field (the returned length covers it).
fn tcp_total_rto(info: &libc::tcp_info) -> Option<u64> {
    (info.tcpi_total_rto != 0 || kernel_has_total_rto()).then_some(u64::from(info.tcpi_total_rto))
}

/// Whether this kernel's `TCP_INFO` reaches `tcpi_total_rto` (Linux 6.7+), read once.
fn kernel_has_total_rto() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut parts = release.trim().split(['.', '-']).map(|p| p.parse::<u32>().unwrap_or(0));
        let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        (major, minor) >= (6, 7)
    })
}

/// Snapshot of a TCP connection from `TCP_INFO`; `cc` is the kernel's controller name.
pub fn tcp_snapshot<S: AsFd>(socket: &S) -> std::io::Result<TransportSnapshot> {
    let info = tcp_info(socket)?;
    let cc = gearbox_cc::TcpCc::current(&socket2::SockRef::from(socket)).unwrap_or_else(|_| "unknown".into());
    Ok(TransportSnapshot {
        cc,
        rtt_ms: f64::from(info.tcpi_rtt) / 1e3,
        min_rtt_ms: (info.tcpi_min_rtt != 0 && info.tcpi_min_rtt != u32::MAX)
            .then(|| f64::from(info.tcpi_min_rtt) / 1e3),
        rttvar_ms: Some(f64::from(info.tcpi_rttvar) / 1e3),
        cwnd_bytes: u64::from(info.tcpi_snd_cwnd) * u64::from(info.tcpi_snd_mss),
        sent_packets: u64::from(info.tcpi_segs_out),
        lost_packets: u64::from(info.tcpi_total_retrans),
        congestion_events: None,
        unacked_bytes: Some(tcp_unacked_bytes(&info)),
        delivery_rate_bps: Some(info.tcpi_delivery_rate.saturating_mul(8)),
        timeouts: tcp_total_rto(&info),
    })
}

/// Snapshot of a QUIC connection from quinn's statistics.
pub fn quic_snapshot(conn: &quinn::Connection, cc: &str) -> TransportSnapshot {
    let s = conn.stats();
    TransportSnapshot {
        cc: cc.to_string(),
        rtt_ms: s.path.rtt.as_secs_f64() * 1e3,
        min_rtt_ms: Some(s.path.min_rtt.as_secs_f64() * 1e3),
        rttvar_ms: None,
        cwnd_bytes: s.path.cwnd,
        sent_packets: s.path.sent_packets,
        lost_packets: s.path.lost_packets,
        congestion_events: Some(s.path.congestion_events),
        unacked_bytes: None,
        delivery_rate_bps: None,
        timeouts: None,
    }
}

/// Socket buffer size asked for QUIC's UDP sockets: 4 MiB.
///
/// The kernel default (about 208 KiB here) overflows during an HTTP/3 bulk transfer on
/// loopback (about one datagram per MB dropped, measured with `gearbox bench edge`), and
/// each drop costs QUIC a loss recovery. The kernel caps the value at `net.core.rmem_max`.
pub const UDP_BUFFER_BYTES: usize = 4 << 20;

/// Socket buffer size asked for a server's QUIC socket: 32 MiB.
///
/// A server's one UDP socket carries every connection: with 10,000 idle QUIC connections
/// and 1,000 active ones (`gearbox bench load`, docs/reliability.md "Load") the edge's
/// socket overflowed whenever the edge was busy elsewhere (70,194 datagrams dropped in
/// 13 s of HTTP/2 load, all of them the idle connections' PINGs and ACKs), and
/// connections whose every packet for their idle timeout was dropped were lost. A
/// larger buffer rides out a longer busy spell. Set past `net.core.rmem_max` with
/// `SO_RCVBUFFORCE` where the process may (`CAP_NET_ADMIN`), else capped by it.
pub const SERVER_UDP_BUFFER_BYTES: usize = 32 << 20;

/// A bound UDP socket for a quinn endpoint, with [`UDP_BUFFER_BYTES`] send and receive buffers.
pub fn quic_udp_socket(addr: std::net::SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    quic_udp_socket_sized(addr, UDP_BUFFER_BYTES)
}

/// A bound UDP socket for a quinn endpoint with `bytes` of send and receive buffer, past
/// `net.core.rmem_max` / `wmem_max` where the process is allowed to.
pub fn quic_udp_socket_sized(addr: std::net::SocketAddr, bytes: usize) -> std::io::Result<std::net::UdpSocket> {
    let domain = socket2::Domain::for_address(addr);
    let socket = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    if addr.is_ipv6() {
        let _ = socket.set_only_v6(false);
    }
    // Best effort: a smaller buffer still works, only with more drops.
    if !force_buffer(&socket, libc::SO_RCVBUFFORCE, bytes) {
        let _ = socket.set_recv_buffer_size(bytes);
    }
    if !force_buffer(&socket, libc::SO_SNDBUFFORCE, bytes) {
        let _ = socket.set_send_buffer_size(bytes);
    }
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// `setsockopt(SOL_SOCKET, option, bytes)` for the privileged `SO_RCVBUFFORCE` /
/// `SO_SNDBUFFORCE`; whether the kernel took it.
fn force_buffer(socket: &socket2::Socket, option: libc::c_int, bytes: usize) -> bool {
    use std::os::fd::AsRawFd;
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: the fd is open for the socket's lifetime; the value is one c_int read by the kernel.
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            std::ptr::addr_of!(v).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

/// A quinn endpoint on [`quic_udp_socket`]; `server` makes it accept connections.
pub fn quic_endpoint(
    addr: std::net::SocketAddr,
    server: Option<quinn::ServerConfig>,
) -> std::io::Result<quinn::Endpoint> {
    let runtime = quinn::default_runtime()
        .ok_or_else(|| std::io::Error::other("no async runtime for quinn (not inside tokio)"))?;
    // A server's socket carries every connection, and gets the larger buffer.
    let bytes = if server.is_some() {
        SERVER_UDP_BUFFER_BYTES
    } else {
        UDP_BUFFER_BYTES
    };
    quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        server,
        quic_udp_socket_sized(addr, bytes)?,
        runtime,
    )
}
