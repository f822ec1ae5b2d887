//! TCP WISE's initial window for kernel TCP (TCP WISE §IV-A): the `sock_ops` program
//! of `bpf/iw.bpf.c`, attached to the edge's cgroup, and the maps the edge fills from
//! the Cwnd Table and reads each connection's draw back from.
//!
//! The program acts only on connections to the edge's own port in the edge's own
//! network namespace (it runs for every socket of the cgroup, which is shared with
//! other processes). Its maps hold the table as it stands in the current hour; the
//! edge refills them when the table or the hour changes ([`IwProgram::fill`]), entry
//! by entry, so a connection sees an entry's old value or its new one.

use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, FromRawFd};

use libbpf_rs::{MapCore, MapFlags};

use crate::{check_environment, route_libbpf_messages, BpfError};

/// The compiled program (`build.rs`).
const OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/iw.bpf.o"));

const AF_INET: u32 = 2;
const AF_INET6: u32 = 10;

/// The most IWs one entry may hold (`MAX_SET` of `bpf/iw.bpf.c`; the Cwnd Table's limit).
pub const MAX_SET: usize = 8;
/// Bytes of `struct iw_entry`.
const ENTRY_BYTES: usize = 4 * MAX_SET + 12 + 16 + 4;

/// One entry of the table for the kernel: who (a prefix, or `None` for the others)
/// and the set under test.
#[derive(Debug, Clone, PartialEq)]
pub struct IwEntry {
    /// Address and prefix length; `None`: every client no prefix matches.
    pub prefix: Option<(IpAddr, u8)>,
    /// The set under test, packets (2 to [`MAX_SET`]): the first is α.
    pub iw: Vec<u32>,
    /// Probability of α, in [0, 1]; the others share the rest equally.
    pub chance_alpha: f64,
}

/// What the kernel drew for one connection.
#[derive(Debug, Clone, PartialEq)]
pub struct IwDraw {
    /// The entry's prefix (`None`: the others).
    pub prefix: Option<(IpAddr, u8)>,
    /// The entry's set, α first.
    pub iw_set: Vec<u32>,
    /// The window drawn, packets.
    pub iw: u32,
    /// Whether the kernel accepted `TCP_BPF_IW` (0 from `bpf_setsockopt`).
    pub applied: bool,
}

/// A BPF program's run-time statistics as the kernel keeps them
/// (`bpf_prog_info.run_cnt` and `run_time_ns`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Times the program ran.
    pub runs: u64,
    /// Time spent in it in all, nanoseconds.
    pub run_time_ns: u64,
}

/// The kernel's BPF run-time statistics, on for as long as this value lives
/// (`BPF_ENABLE_STATS` with `BPF_STATS_RUN_TIME`: every program run is timed, which costs
/// a little, so the kernel keeps it off by default). Needs root.
#[derive(Debug)]
pub struct BpfStats {
    _fd: std::os::fd::OwnedFd,
}

impl BpfStats {
    /// Turns the statistics on.
    pub fn enable() -> Result<BpfStats, BpfError> {
        check_environment()?;
        // SAFETY: a plain syscall wrapper; the returned descriptor is ours to own.
        let fd = unsafe { libbpf_sys::bpf_enable_stats(libbpf_sys::BPF_STATS_RUN_TIME) };
        if fd < 0 {
            return Err(BpfError::Environment {
                what: "turning BPF run-time statistics on (BPF_ENABLE_STATS)",
                message: std::io::Error::from_raw_os_error(-fd).to_string(),
            });
        }
        // SAFETY: `fd` is a descriptor the kernel just opened for us.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        Ok(BpfStats { _fd: fd })
    }
}

/// The loaded and attached program.
pub struct IwProgram {
    object: libbpf_rs::Object,
    _link: libbpf_rs::Link,
}

impl std::fmt::Debug for IwProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IwProgram")
    }
}

fn libbpf(what: &'static str) -> impl Fn(libbpf_rs::Error) -> BpfError {
    move |source| BpfError::Libbpf { what, source }
}

impl IwProgram {
    /// Loads the program and attaches it to this process's cgroup (v2; see
    /// `own_cgroup2` for a mount namespace without a cgroup2 mount), acting on
    /// connections to `port` in the network namespace of `listener` (the edge's TCP
    /// listening socket). No entries yet: every connection keeps the kernel's default
    /// until [`IwProgram::fill`].
    pub fn attach(listener: &impl AsFd, port: u16) -> Result<IwProgram, BpfError> {
        check_environment()?;
        route_libbpf_messages();
        let netns = sockopt_u64(listener.as_fd().as_raw_fd(), SO_NETNS_COOKIE).map_err(|e| BpfError::Environment {
            what: "reading the listening socket's network-namespace cookie (SO_NETNS_COOKIE, Linux 5.14+)",
            message: e.to_string(),
        })?;
        let (cgroup_path, cgroup) = own_cgroup2().map_err(|message| BpfError::Environment {
            what: "opening this process's cgroup v2",
            message,
        })?;
        let object = libbpf_rs::ObjectBuilder::default()
            .open_memory(OBJECT)
            .map_err(libbpf("opening the TCP WISE BPF object"))?
            .load()
            .map_err(libbpf(
                "loading the TCP WISE sock_ops program (see the gearbox_bpf log for the verifier's output)",
            ))?;
        let link = {
            let prog = object
                .progs_mut()
                .find(|p| p.name() == "gearbox_iw")
                .ok_or_else(|| not_found("the gearbox_iw program"))?;
            prog.attach_cgroup(cgroup.as_raw_fd())
                .map_err(libbpf("attaching the TCP WISE sock_ops program to the cgroup"))?
        };
        let program = IwProgram { object, _link: link };
        let mut cfg = Vec::with_capacity(16);
        cfg.extend_from_slice(&netns.to_ne_bytes());
        cfg.extend_from_slice(&u32::from(port).to_ne_bytes());
        cfg.extend_from_slice(&1u32.to_ne_bytes());
        program
            .map("config")?
            .update(&0u32.to_ne_bytes(), &cfg, MapFlags::ANY)
            .map_err(libbpf("configuring the TCP WISE program"))?;
        tracing::info!(target: "gearbox_bpf", cgroup = %cgroup_path.display(), port, "TCP WISE sock_ops program attached");
        Ok(program)
    }

    fn map(&self, name: &str) -> Result<libbpf_rs::Map<'_>, BpfError> {
        self.object
            .maps()
            .find(|m| m.name() == name)
            .ok_or_else(|| not_found("a TCP WISE map"))
    }

    /// The kernel's run-time statistics of the program so far: how often it ran and for
    /// how long in all. The kernel counts only while statistics are on ([`BpfStats`]).
    pub fn run_stats(&self) -> Result<RunStats, BpfError> {
        let prog = self
            .object
            .progs()
            .find(|p| p.name() == "gearbox_iw")
            .ok_or_else(|| not_found("the gearbox_iw program"))?;
        let mut info = libbpf_sys::bpf_prog_info::default();
        let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
        // SAFETY: `info` is a `bpf_prog_info` of `len` bytes that the kernel fills; every
        // pointer field in it is zero, so the kernel writes no arrays.
        let rc = unsafe {
            libbpf_sys::bpf_obj_get_info_by_fd(
                prog.as_fd().as_raw_fd(),
                (&mut info as *mut libbpf_sys::bpf_prog_info).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return Err(BpfError::Environment {
                what: "reading the TCP WISE program's statistics (BPF_OBJ_GET_INFO_BY_FD)",
                message: std::io::Error::from_raw_os_error(-rc).to_string(),
            });
        }
        Ok(RunStats {
            runs: info.run_cnt,
            run_time_ns: info.run_time_ns,
        })
    }

    /// Makes the kernel's maps hold exactly `entries` (at most one without a prefix).
    /// A set of more than [`MAX_SET`] IWs is refused (the Cwnd Table refuses it first).
    pub fn fill(&self, entries: &[IwEntry]) -> Result<(), BpfError> {
        if let Some(e) = entries.iter().find(|e| e.iw.is_empty() || e.iw.len() > MAX_SET) {
            return Err(BpfError::Environment {
                what: "filling the TCP WISE maps",
                message: format!(
                    "an entry's set has {} IWs; 1 to {MAX_SET} fit the kernel's map",
                    e.iw.len()
                ),
            });
        }
        let v4 = self.map("prefixes_v4")?;
        let v6 = self.map("prefixes_v6")?;
        let mut keep_v4 = Vec::new();
        let mut keep_v6 = Vec::new();
        let mut others = vec![0u8; ENTRY_BYTES];
        for e in entries {
            let value = encode_entry(e);
            match e.prefix {
                None => others = value,
                Some((IpAddr::V4(a), len)) => {
                    let mut key = u32::from(len).to_ne_bytes().to_vec();
                    key.extend_from_slice(&a.octets());
                    v4.update(&key, &value, MapFlags::ANY)
                        .map_err(libbpf("filling the IPv4 prefixes"))?;
                    keep_v4.push(key);
                }
                Some((IpAddr::V6(a), len)) => {
                    let mut key = u32::from(len).to_ne_bytes().to_vec();
                    key.extend_from_slice(&a.octets());
                    v6.update(&key, &value, MapFlags::ANY)
                        .map_err(libbpf("filling the IPv6 prefixes"))?;
                    keep_v6.push(key);
                }
            }
        }
        for (map, keep) in [(&v4, &keep_v4), (&v6, &keep_v6)] {
            let stale: Vec<Vec<u8>> = map.keys().filter(|k| !keep.contains(k)).collect();
            for k in stale {
                map.delete(&k).map_err(libbpf("removing a stale prefix"))?;
            }
        }
        self.map("others")?
            .update(&0u32.to_ne_bytes(), &others, MapFlags::ANY)
            .map_err(libbpf("setting the others entry"))
    }

    /// The draw of the connection on `socket`, removed from the kernel's map; `None`
    /// when the program did not act on it (no entry applies, or not the edge's).
    pub fn take_draw(&self, socket: &impl AsFd) -> Option<IwDraw> {
        let cookie = sockopt_u64(socket.as_fd().as_raw_fd(), SO_COOKIE).ok()?;
        let draws = self.map("draws").ok()?;
        let key = cookie.to_ne_bytes();
        let raw = draws.lookup(&key, MapFlags::ANY).ok()??;
        let _ = draws.delete(&key);
        decode_draw(&raw)
    }
}

fn not_found(what: &str) -> BpfError {
    BpfError::Environment {
        what: "finding the compiled BPF objects",
        message: format!("{what} is missing from the embedded object"),
    }
}

/// `struct iw_entry` of `bpf/iw.bpf.c`: iw[MAX_SET], count, chance (1/1,000,000),
/// prefixlen, addr[16], family; native byte order except the address.
fn encode_entry(e: &IwEntry) -> Vec<u8> {
    let chance = (e.chance_alpha.clamp(0.0, 1.0) * 1e6).round() as u32;
    let (len, addr, family) = match e.prefix {
        None => (0u32, [0u8; 16], 0u32),
        Some((IpAddr::V4(a), l)) => {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&a.octets());
            (u32::from(l), b, AF_INET)
        }
        Some((IpAddr::V6(a), l)) => (u32::from(l), a.octets(), AF_INET6),
    };
    let mut v = Vec::with_capacity(ENTRY_BYTES);
    let count = e.iw.len().min(MAX_SET);
    for k in 0..MAX_SET {
        v.extend_from_slice(&e.iw.get(k).copied().filter(|_| k < count).unwrap_or(0).to_ne_bytes());
    }
    for x in [count as u32, chance, len] {
        v.extend_from_slice(&x.to_ne_bytes());
    }
    v.extend_from_slice(&addr);
    v.extend_from_slice(&family.to_ne_bytes());
    v
}

/// `struct iw_draw`: an `iw_entry` ([`ENTRY_BYTES`]), the window drawn, bpf_setsockopt's result.
fn decode_draw(raw: &[u8]) -> Option<IwDraw> {
    let u32_at = |o: usize| raw.get(o..o + 4).map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
    let base = 4 * MAX_SET;
    let count = (u32_at(base)? as usize).min(MAX_SET);
    let iw_set = (0..count).map(|k| u32_at(4 * k)).collect::<Option<Vec<u32>>>()?;
    let (len, family) = (u32_at(base + 8)?, u32_at(base + 28)?);
    let addr: [u8; 16] = raw.get(base + 12..base + 28)?.try_into().ok()?;
    let prefix = match family {
        AF_INET => Some((IpAddr::from([addr[0], addr[1], addr[2], addr[3]]), len as u8)),
        AF_INET6 => Some((IpAddr::from(addr), len as u8)),
        _ => None,
    };
    Some(IwDraw {
        prefix,
        iw_set,
        iw: u32_at(ENTRY_BYTES)?,
        applied: u32_at(ENTRY_BYTES + 4)? == 0,
    })
}

const SO_COOKIE: libc::c_int = 57;
const SO_NETNS_COOKIE: libc::c_int = 71;

fn sockopt_u64(fd: i32, opt: libc::c_int) -> std::io::Result<u64> {
    let mut value: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: value and len are valid for the duration of the call and sized for u64.
    let rc = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, opt, (&mut value as *mut u64).cast(), &mut len) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(value)
}

/// This process's cgroup in the v2 hierarchy, opened, and what to call it in the log:
/// the `0::PATH` line of `/proc/self/cgroup` under the `cgroup2` mount of
/// `/proc/self/mountinfo`.
///
/// `ip netns exec` (how the lab and `gearbox emu` start the edge) runs its command in a
/// new mount namespace with a fresh `/sys`, so no cgroup file system is mounted there
/// although the process is still in its cgroup. Then the cgroup2 hierarchy is mounted
/// *detached* (`fsopen`/`fsmount`, Linux 5.2+, root): a mount with no place in any file
/// tree, seen by no other process, gone when its descriptor is closed. Its root is the
/// root of this process's cgroup namespace, which is what `PATH` is relative to.
fn own_cgroup2() -> Result<(std::path::PathBuf, std::os::fd::OwnedFd), String> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("/proc/self/cgroup: {e}"))?;
    let rel = cgroups
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("this process is in no cgroup v2 (no 0:: line in /proc/self/cgroup)")?
        .trim_start_matches('/')
        .to_string();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    let mount = mounts.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        (post.split_whitespace().next()? == "cgroup2").then(|| pre.split_whitespace().nth(4).map(str::to_string))?
    });
    if let Some(mount) = mount {
        let path = std::path::Path::new(&mount).join(&rel);
        let file = std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        return Ok((path, file.into()));
    }
    let root = detached_cgroup2_mount().map_err(|e| {
        format!("no cgroup2 file system is mounted in this mount namespace, and mounting one detached failed: {e}")
    })?;
    let name = std::ffi::CString::new(if rel.is_empty() { ".".to_string() } else { rel.clone() })
        .map_err(|_| format!("the cgroup path {rel:?} holds a NUL byte"))?;
    // SAFETY: root is an open directory descriptor and name a valid C string.
    let fd = unsafe {
        libc::openat(
            root.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(format!(
            "cgroup {rel:?} in a detached cgroup2 mount: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: fd was just opened and is owned by nothing else.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    Ok((std::path::Path::new("(detached cgroup2 mount)").join(rel), fd))
}

/// The cgroup2 hierarchy as a detached mount: `fsopen("cgroup2")`, `FSCONFIG_CMD_CREATE`,
/// `fsmount`; the descriptor of its root.
fn detached_cgroup2_mount() -> std::io::Result<std::os::fd::OwnedFd> {
    const FSOPEN_CLOEXEC: libc::c_uint = 1;
    const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
    const FSMOUNT_CLOEXEC: libc::c_uint = 1;
    let check = |rc: libc::c_long| {
        if rc < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(rc as i32)
        }
    };
    // SAFETY: fsopen reads a NUL-terminated name; the result is a new descriptor we own.
    let fs = check(unsafe { libc::syscall(libc::SYS_fsopen, c"cgroup2".as_ptr(), FSOPEN_CLOEXEC) })?;
    // SAFETY: fs is the descriptor fsopen just returned, owned by nothing else.
    let fs = unsafe { std::os::fd::OwnedFd::from_raw_fd(fs) };
    // SAFETY: FSCONFIG_CMD_CREATE takes no key, value or aux.
    check(unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        )
    })?;
    // SAFETY: fs is a configured file-system context; the result is a new descriptor.
    let mnt = check(unsafe { libc::syscall(libc::SYS_fsmount, fs.as_raw_fd(), FSMOUNT_CLOEXEC, 0) })?;
    // SAFETY: mnt was just returned by fsmount and is owned by nothing else.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(mnt) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_and_draws_have_the_c_layout() {
        let e = IwEntry {
            prefix: Some(("10.1.2.0".parse().unwrap(), 24)),
            iw: vec![10, 15, 20, 25, 30],
            chance_alpha: 0.25,
        };
        let mut raw = encode_entry(&e);
        assert_eq!(raw.len(), 64);
        raw.extend_from_slice(&20u32.to_ne_bytes());
        raw.extend_from_slice(&0i32.to_ne_bytes());
        let d = decode_draw(&raw).unwrap();
        assert_eq!(d.prefix, e.prefix);
        assert_eq!(
            (d.iw_set.as_slice(), d.iw, d.applied),
            (&[10, 15, 20, 25, 30][..], 20, true)
        );
        assert_eq!(u32::from_ne_bytes(raw[32..36].try_into().unwrap()), 5, "count");
        assert_eq!(u32::from_ne_bytes(raw[36..40].try_into().unwrap()), 250_000);
    }
}
