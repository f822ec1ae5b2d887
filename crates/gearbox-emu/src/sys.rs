//! The few Linux system calls the emulator makes, each wrapped once so the
//! `unsafe` stays in this file.
//!
//! Hand-written rather than a crate because each is a handful of lines and the
//! TUN crates (`tun`, `tun-tap`, `tokio-tun`) create the device in the caller's
//! own namespace only: none can open it inside another network namespace, which
//! is the whole point here (a thread `setns`es into the namespace, opens
//! `/dev/net/tun` there, and the descriptor keeps working from the root
//! namespace). `nix` would cover the rest, but pulling it in for six calls that
//! libc already declares buys little.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// `-1` from a libc call → the thread's `errno` as an `io::Error`.
fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Name of the TUN device the emulator opens in each namespace.
pub const TUN_NAME: &str = "gbx0";

/// Moves the calling thread into the network namespace behind `ns` (a file
/// such as `/run/netns/NAME`). Only this thread moves; other threads keep theirs.
pub fn enter_netns(ns: &File) -> io::Result<()> {
    // SAFETY: setns only reads the descriptor; a bad one is an error return.
    check(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) }).map(|_| ())
}

/// Opens a non-persistent layer-3 TUN device named `name` (no packet-info
/// header: each read or write is exactly one IP packet) in the calling
/// thread's network namespace. The device disappears when the descriptor is
/// closed, which is what makes a crashed relay leave nothing behind.
pub fn open_tun(name: &str) -> io::Result<OwnedFd> {
    let path = CString::new("/dev/net/tun").map_err(io::Error::other)?;
    // SAFETY: a valid NUL-terminated path; the result is checked.
    let fd = check(unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK) })?;
    // SAFETY: `fd` was just opened and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    if name.is_empty() || name.len() >= req.ifr_name.len() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad TUN device name"));
    }
    for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    req.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: TUNSETIFF reads and writes one ifreq, which lives for the call.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req as *mut libc::ifreq) })?;
    Ok(fd)
}

/// Reads one packet into `buf`; `Ok(None)` when nothing is waiting.
pub fn read_nonblocking(fd: RawFd, buf: &mut [std::mem::MaybeUninit<u8>]) -> io::Result<Option<usize>> {
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n >= 0 {
        return Ok(Some(n as usize));
    }
    let e = io::Error::last_os_error();
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
        _ => Err(e),
    }
}

/// Writes one packet; a TUN write is all or nothing.
pub fn write_packet(fd: RawFd, packet: &[u8]) -> io::Result<()> {
    // SAFETY: reads `packet.len()` bytes from a live slice.
    let n = unsafe { libc::write(fd, packet.as_ptr().cast(), packet.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// An epoll instance.
pub struct Epoll(OwnedFd);

impl Epoll {
    pub fn new() -> io::Result<Self> {
        // SAFETY: no pointers; the result is checked and then owned.
        let fd = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: fresh descriptor, owned by nobody else.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Watches `fd` for reading (level-triggered), reporting `token`.
    pub fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: `ev` lives for the call.
        check(unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) }).map(|_| ())
    }

    /// Waits for readiness, at most `timeout` (`None`: no limit); returns how
    /// many entries of `events` were filled (0 on timeout or a signal).
    ///
    /// `epoll_pwait2` (Linux 5.11) takes a nanosecond timeout, so the relay
    /// needs no timerfd: one system call per wake-up instead of three
    /// (settime, wait, read). The kernel may end the wait late by the
    /// thread's timer slack or 0.1% of the timeout, whichever is larger.
    pub fn wait(&self, events: &mut [libc::epoll_event], timeout: Option<Duration>) -> io::Result<usize> {
        let max = events.len().min(i32::MAX as usize) as libc::c_int;
        let ts = timeout.map(|t| libc::timespec {
            tv_sec: t.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: t.subsec_nanos() as libc::c_long,
        });
        let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: the kernel fills at most `max` entries of `events`; `ts_ptr`
        // is null or points at `ts`, which outlives the call; no signal mask.
        let n = unsafe { libc::epoll_pwait2(self.0.as_raw_fd(), events.as_mut_ptr(), max, ts_ptr, std::ptr::null()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(0);
            }
            return Err(e);
        }
        Ok(n as usize)
    }
}

/// Nanoseconds of CLOCK_MONOTONIC, the clock timerfd uses.
pub fn monotonic_now() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-parameter; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    Duration::new(ts.tv_sec.max(0) as u64, ts.tv_nsec.clamp(0, 999_999_999) as u32)
}

/// An eventfd used to wake the relay from another thread.
pub struct Waker(OwnedFd);

impl Waker {
    pub fn new() -> io::Result<Self> {
        // SAFETY: no pointers; the result is checked and then owned.
        let fd = check(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        // SAFETY: fresh descriptor, owned by nobody else.
        Ok(Waker(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    pub fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // A full counter (EAGAIN) already means "woken".
        let _ = write_packet(self.0.as_raw_fd(), &one);
    }
}

/// Sets the calling thread's timer slack: how late the kernel may fire its
/// timers to batch wake-ups. Smaller = more exact delays, more wake-ups.
pub fn set_timer_slack(ns: u64) -> io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument.
    check(unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) }).map(|_| ())
}

/// Puts the calling thread under SCHED_FIFO at `priority`.
pub fn set_realtime(priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: pid 0 = the calling thread; `param` lives for the call.
    check(unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) }).map(|_| ())
}

/// CPU time (user + system) the calling thread has used.
pub fn thread_cpu_time() -> Duration {
    // SAFETY: rusage is plain data; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid out-parameter.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec.max(0) as u64, (t.tv_usec.clamp(0, 999_999) * 1000) as u32);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The calling thread's kernel id.
pub fn gettid() -> i32 {
    // SAFETY: gettid cannot fail.
    unsafe { libc::gettid() }
}

/// CPU time (user + system) of thread `tid` of this process, from
/// `/proc/self/task/TID/stat` (fields 14 and 15, in clock ticks).
pub fn task_cpu_time(tid: i32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; fields after it start past the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks = u64::try_from(ticks).ok().filter(|&t| t > 0)?;
    Some(Duration::from_secs_f64((utime + stime) as f64 / ticks as f64))
}

/// The effective user id (0 = root).
pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// Sends `sig` to every process of process group `pgid`.
pub fn kill_group(pgid: u32, sig: libc::c_int) {
    if let Ok(p) = libc::pid_t::try_from(pgid) {
        if p > 1 {
            // SAFETY: plain syscall; ESRCH (already gone) is fine.
            unsafe { libc::kill(-p, sig) };
        }
    }
}

/// Sends `sig` to one process.
pub fn kill_pid(pid: u32, sig: libc::c_int) {
    if let Ok(p) = libc::pid_t::try_from(pid) {
        if p > 1 {
            // SAFETY: plain syscall; ESRCH (already gone) is fine.
            unsafe { libc::kill(p, sig) };
        }
    }
}

/// CLOCK_REALTIME now (the clock of packet-socket timestamps).
pub fn realtime_now() -> Duration {
    // SAFETY: timespec is plain data written by the call.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid clock id and a live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Bytes of each packet a transmit tap keeps: the IPv4 header and a little more,
/// enough to tell packets apart.
pub const TAP_SNAPLEN: usize = 64;

/// Opens, in the calling thread's namespace, a packet socket on device `ifname`
/// that receives the first [`TAP_SNAPLEN`] bytes of every packet the namespace
/// *sends* into it, each stamped by the kernel (`SO_TIMESTAMPNS`, realtime)
/// when the device was handed the packet. A classic BPF filter
/// (`SKF_AD_PKTTYPE == PACKET_OUTGOING`) keeps the packets the relay writes
/// in the other way out of it. Non-blocking.
pub fn open_transmit_tap(ifname: &str) -> io::Result<OwnedFd> {
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket(2); the result is checked.
    let fd = check(unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            libc::c_int::from(proto),
        )
    })?;
    // SAFETY: `fd` was just opened and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let filter = [
        libc::sock_filter {
            code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: (libc::SKF_AD_OFF + libc::SKF_AD_PKTTYPE) as u32,
        },
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: u32::from(libc::PACKET_OUTGOING),
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: TAP_SNAPLEN as u32,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        },
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    let set = |level, name, value: *const libc::c_void, len: usize| {
        // SAFETY: `value` points to `len` readable bytes that live for the call.
        check(unsafe { libc::setsockopt(fd.as_raw_fd(), level, name, value, len as libc::socklen_t) })
    };
    set(
        libc::SOL_SOCKET,
        libc::SO_ATTACH_FILTER,
        (&prog as *const libc::sock_fprog).cast(),
        std::mem::size_of::<libc::sock_fprog>(),
    )?;
    let on: libc::c_int = 1;
    set(
        libc::SOL_SOCKET,
        libc::SO_TIMESTAMPNS,
        (&on as *const libc::c_int).cast(),
        std::mem::size_of::<libc::c_int>(),
    )?;
    let rcvbuf: libc::c_int = 4 << 20;
    let _ = set(
        libc::SOL_SOCKET,
        libc::SO_RCVBUFFORCE,
        (&rcvbuf as *const libc::c_int).cast(),
        std::mem::size_of::<libc::c_int>(),
    );
    let name = CString::new(ifname).map_err(io::Error::other)?;
    // SAFETY: a valid NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if ifindex == 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: sockaddr_ll is plain data; all-zero is valid.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = proto;
    addr.sll_ifindex = ifindex as i32;
    // SAFETY: `addr` is a sockaddr_ll of the size passed.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    })?;
    Ok(fd)
}

/// Takes one packet from a transmit tap: its first bytes into `buf` and the
/// kernel's realtime timestamp. `Ok(None)` when the tap is empty.
pub fn recv_tapped(fd: RawFd, buf: &mut [u8; TAP_SNAPLEN]) -> io::Result<Option<(usize, Duration)>> {
    // Room for one cmsg carrying a timespec, aligned.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data; all-zero is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: every pointer in `msg` refers to a live buffer of the stated size.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(e),
        };
    }
    let mut stamp = None;
    // SAFETY: the CMSG macros walk the control buffer the kernel filled in.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                stamp = Some(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    match stamp {
        Some(t) => Ok(Some((n as usize, t))),
        None => Err(io::Error::other("a tapped packet without its timestamp")),
    }
}
