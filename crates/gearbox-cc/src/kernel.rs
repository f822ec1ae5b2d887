//! Kernel TCP congestion control, per socket (`TCP_CONGESTION`, tcp(7)).
//!
//! The edge sets a connection's controller at accept, before any data is sent, and a
//! gear may change it on the live socket through a [`TcpCcHandle`]. No state migrates
//! there (Floo §3.4's migration needs the controller's variables, which the kernel
//! keeps private): on a change the kernel calls the old controller's `release` and the
//! new one's `init` (`tcp_reinit_congestion_control`), so the new controller starts from
//! the socket's current cwnd and ssthresh with its own state fresh. Only what the kernel
//! offers can be set: `/proc/sys/net/ipv4/tcp_available_congestion_control` lists it,
//! and an unprivileged process is further limited to `tcp_allowed_congestion_control`.
//!
//! Westwood+ is gearbox's own for kernel TCP: a BPF `struct_ops` controller
//! (`gearbox-bpf`, beyond the seed: Floo §6 names eBPF as the way to bring controller
//! choice to kernel TCP), registered with the kernel the first time a socket asks for it
//! and for the life of the process. Where it cannot be registered (no root, no BTF) the
//! error says why and lists what the kernel offers.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::{Cca, UnknownCc};

/// A kernel TCP congestion controller, set per socket with `TCP_CONGESTION`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TcpCc {
    /// The kernel's Reno.
    Reno,
    /// The kernel's CUBIC (the usual system default).
    Cubic,
    /// The kernel's BBR (`tcp_bbr`).
    Bbr,
    /// TCP Westwood+, gearbox's BPF `struct_ops` controller (`gearbox-bpf`).
    Westwood,
}

impl TcpCc {
    /// Every kernel controller gearbox knows, in `--help` order.
    pub const ALL: [TcpCc; 4] = [TcpCc::Reno, TcpCc::Cubic, TcpCc::Bbr, TcpCc::Westwood];

    /// The kernel's name for it (what `tcp_available_congestion_control` lists).
    pub fn name(self) -> &'static str {
        match self {
            TcpCc::Reno => "reno",
            TcpCc::Cubic => "cubic",
            TcpCc::Bbr => "bbr",
            TcpCc::Westwood => gearbox_bpf::westwood::NAME,
        }
    }

    /// The kernel controller that runs `cca`, where there is one (Copa and Vivace have
    /// none).
    pub fn for_cca(cca: Cca) -> Option<TcpCc> {
        match cca {
            Cca::NewReno => Some(TcpCc::Reno),
            Cca::Cubic => Some(TcpCc::Cubic),
            Cca::Bbr => Some(TcpCc::Bbr),
            Cca::Westwood => Some(TcpCc::Westwood),
            Cca::Copa | Cca::Vivace => None,
        }
    }

    /// The algorithm this kernel controller runs.
    pub fn cca(self) -> Cca {
        match self {
            TcpCc::Reno => Cca::NewReno,
            TcpCc::Cubic => Cca::Cubic,
            TcpCc::Bbr => Cca::Bbr,
            TcpCc::Westwood => Cca::Westwood,
        }
    }

    /// Sets this controller on `socket` (registering Westwood+ with the kernel first if
    /// it is the one asked for). Fails with the kernel's error when the module is not
    /// loaded or not allowed for an unprivileged process, or with why Westwood+ could
    /// not be registered.
    pub fn apply(self, socket: &socket2::SockRef<'_>) -> std::io::Result<()> {
        set_by_name(socket, self.name())
    }

    /// Reads the controller a socket runs, as the kernel names it.
    pub fn current(socket: &socket2::SockRef<'_>) -> std::io::Result<String> {
        let raw = socket.tcp_congestion()?;
        let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        Ok(String::from_utf8_lossy(&raw[..end]).into_owned())
    }
}

impl fmt::Display for TcpCc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TcpCc {
    type Err = UnknownCc;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TcpCc::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownCc {
                name: s.to_string(),
                valid: TcpCc::ALL.map(|c| c.name()).join(", "),
            })
    }
}

/// The kernel TCP controller gearbox's edge and client set when none is configured:
/// CUBIC (RFC 9438), the same as QUIC's default ([`crate::QuicCc::CUBIC`]), so that
/// HTTP/2 against HTTP/3 compares transports, not controllers. The system's default
/// differs between hosts (BBR on some, which ignores random loss where CUBIC halves its
/// window), and a lab result must not depend on the host it ran on; `system` keeps it.
pub const DEFAULT_TCP_CC: TcpCc = TcpCc::Cubic;

/// A configured kernel TCP controller: a named one, or `system` (the socket keeps the
/// system's default, `net.ipv4.tcp_congestion_control`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpCcSetting(pub Option<TcpCc>);

impl TcpCcSetting {
    /// The word for "the system's default".
    pub const SYSTEM: &'static str = "system";
}

impl FromStr for TcpCcSetting {
    type Err = UnknownCc;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.eq_ignore_ascii_case(Self::SYSTEM) {
            return Ok(TcpCcSetting(None));
        }
        s.parse::<TcpCc>()
            .map(|c| TcpCcSetting(Some(c)))
            .map_err(|e| UnknownCc {
                valid: format!("{}, {}", e.valid, Self::SYSTEM),
                ..e
            })
    }
}

impl fmt::Display for TcpCcSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.map_or(Self::SYSTEM, TcpCc::name))
    }
}

/// The kernel refused a controller on a live socket.
#[derive(Debug, thiserror::Error)]
#[error("the kernel refused TCP congestion control {cc:?} ({source}); it offers: {available}")]
pub struct TcpSwitchError {
    /// The controller asked for.
    pub cc: String,
    /// What `tcp_available_congestion_control` lists.
    pub available: String,
    /// The kernel's error.
    pub source: std::io::Error,
}

/// Sets `TCP_CONGESTION` to `name`. For Westwood+ it registers the BPF controller
/// first, and once more if the kernel no longer lists it (another process that had
/// registered it exited).
fn set_by_name(socket: &socket2::SockRef<'_>, name: &str) -> std::io::Result<()> {
    if name != gearbox_bpf::westwood::NAME {
        return socket.set_tcp_congestion(name.as_bytes());
    }
    let register = || {
        gearbox_bpf::westwood::ensure().map_err(|e| {
            std::io::Error::other(format!(
                "TCP congestion control {name:?} is gearbox's BPF controller and could not be registered: {e}; the kernel offers: {}",
                available()
            ))
        })
    };
    register()?;
    match socket.set_tcp_congestion(name.as_bytes()) {
        // ENOENT: the kernel does not list the name.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            gearbox_bpf::westwood::forget_if_gone();
            register()?;
            socket.set_tcp_congestion(name.as_bytes())
        }
        other => other,
    }
}

/// The controllers this kernel offers (`/proc/sys/net/ipv4/tcp_available_congestion_control`).
pub fn available() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|e| format!("unknown ({e})"))
}

/// A live TCP socket's controller, changeable while the connection runs. Cheap to
/// clone, `Send + Sync`.
///
/// It holds a duplicate of the socket's descriptor, which keeps the socket open as long
/// as a handle lives: the edge drops its handles with the connection (its
/// `LiveConnections` entry goes when the connection's task ends), so a closed
/// connection is never held open by one.
#[derive(Debug, Clone)]
pub struct TcpCcHandle {
    socket: Arc<socket2::Socket>,
}

impl TcpCcHandle {
    /// A handle on `socket` (its descriptor is duplicated).
    pub fn new(socket: &socket2::SockRef<'_>) -> std::io::Result<Self> {
        Ok(TcpCcHandle::from_socket(Arc::new(socket.try_clone()?)))
    }

    /// A handle on a descriptor the caller already duplicated.
    pub fn from_socket(socket: Arc<socket2::Socket>) -> Self {
        TcpCcHandle { socket }
    }

    /// Switches the socket to `cc`, by the kernel's name, at once (registering
    /// Westwood+ first when it is the one asked for).
    pub fn switch_to(&self, cc: &str) -> Result<(), TcpSwitchError> {
        set_by_name(&socket2::SockRef::from(&*self.socket), cc).map_err(|source| TcpSwitchError {
            cc: cc.to_string(),
            available: available(),
            source,
        })
    }

    /// The controller the socket runs now, as the kernel names it.
    pub fn current(&self) -> std::io::Result<String> {
        TcpCc::current(&socket2::SockRef::from(&*self.socket))
    }

    /// The socket (for reading its `TCP_INFO`).
    pub fn socket(&self) -> &socket2::Socket {
        &self.socket
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn names_round_trip() {
        for c in TcpCc::ALL {
            assert_eq!(c.name().parse::<TcpCc>().unwrap(), c);
        }
    }

    #[test]
    fn a_setting_is_a_controller_or_the_system_default() {
        assert_eq!("system".parse::<TcpCcSetting>().unwrap(), TcpCcSetting(None));
        assert_eq!("BBR".parse::<TcpCcSetting>().unwrap(), TcpCcSetting(Some(TcpCc::Bbr)));
        for setting in [TcpCcSetting(None), TcpCcSetting(Some(TcpCc::Cubic))] {
            assert_eq!(setting.to_string().parse::<TcpCcSetting>().unwrap(), setting);
        }
        let err = "vegas".parse::<TcpCcSetting>().unwrap_err();
        assert_eq!(err.name, "vegas");
        assert!(err.valid.ends_with("westwood, system"), "{}", err.valid);
    }

    #[test]
    fn kernel_tcp_congestion_is_set_per_socket() {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        let r = socket2::SockRef::from(&s);
        TcpCc::Reno.apply(&r).unwrap();
        assert_eq!(TcpCc::current(&r).unwrap(), "reno");
    }

    #[test]
    fn a_live_connection_switches_controller_mid_transfer_and_loses_no_byte() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let sender = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            conn.set_write_timeout(Some(std::time::Duration::from_secs(30)))
                .unwrap();
            let handle = TcpCcHandle::new(&socket2::SockRef::from(&conn)).unwrap();
            let chunk: Vec<u8> = (0..65_536u32).map(|i| (i % 251) as u8).collect();
            let mut seen = Vec::new();
            for (i, cc) in ["cubic", "bbr", "westwood", "reno", "cubic"].iter().enumerate() {
                handle.switch_to(cc).unwrap();
                seen.push(handle.current().unwrap());
                for _ in 0..(i + 1) * 40 {
                    conn.write_all(&chunk).unwrap();
                }
            }
            let err = handle.switch_to("no-such-cc").unwrap_err();
            (seen, err.to_string())
        });
        let mut client = std::net::TcpStream::connect(addr).unwrap();
        client
            .set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        let mut got = Vec::new();
        client.read_to_end(&mut got).unwrap();
        let (seen, err) = sender.join().unwrap();
        assert_eq!(seen, ["cubic", "bbr", "westwood", "reno", "cubic"]);
        assert_eq!(got.len(), 65_536 * 40 * (1 + 2 + 3 + 4 + 5));
        assert!(got
            .iter()
            .enumerate()
            .all(|(i, &b)| b == ((i % 65_536) as u32 % 251) as u8));
        assert!(err.contains("\"no-such-cc\"") && err.contains("it offers: "), "{err}");
    }
}
