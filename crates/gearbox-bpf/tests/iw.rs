//! The TCP WISE sock_ops program sets the initial window of the edge's passive
//! connections from its maps, per client prefix, and reports each draw under the
//! socket's cookie. Real kernel TCP on loopback; needs root (CI runs as root).

use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;

use gearbox_bpf::iw::{BpfStats, IwEntry, IwProgram};

/// The sender's congestion window, packets (TCP_INFO).
fn snd_cwnd(s: &TcpStream) -> u32 {
    // SAFETY: tcp_info is plain data; getsockopt writes at most `len` bytes into it.
    unsafe {
        let mut info: libc::tcp_info = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let rc = libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        );
        assert_eq!(rc, 0, "TCP_INFO: {}", std::io::Error::last_os_error());
        info.tcpi_snd_cwnd
    }
}

#[test]
fn passive_connections_get_the_initial_window_of_their_prefix() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let program = IwProgram::attach(&listener, port).expect("attaching the sock_ops program (needs root)");

    // No entry yet: the kernel's default window, no draw.
    let _c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let (s, _) = listener.accept().unwrap();
    assert!(program.take_draw(&s).is_none());
    assert_eq!(snd_cwnd(&s), 10);

    // The /8 and a longer /24 for 127.0.0.0: the longer one applies to 127.0.0.1.
    program
        .fill(&[
            IwEntry {
                prefix: Some(("127.0.0.0".parse().unwrap(), 8)),
                iw: vec![5, 5],
                chance_alpha: 0.5,
            },
            IwEntry {
                prefix: Some(("127.0.0.0".parse().unwrap(), 24)),
                iw: vec![40, 60],
                chance_alpha: 1.0,
            },
        ])
        .unwrap();
    let _c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let (s, _) = listener.accept().unwrap();
    let d = program.take_draw(&s).expect("a draw for the connection");
    assert_eq!(d.prefix, Some(("127.0.0.0".parse().unwrap(), 24)));
    assert_eq!((d.iw_set.as_slice(), d.iw, d.applied), (&[40, 60][..], 40, true));
    assert_eq!(snd_cwnd(&s), 40, "TCP_BPF_IW applied before any data");
    // The draw is taken once.
    assert!(program.take_draw(&s).is_none());

    // Both windows are drawn at chance 0.5.
    program
        .fill(&[IwEntry {
            prefix: None,
            iw: vec![20, 30],
            chance_alpha: 0.5,
        }])
        .unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..40 {
        let _c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (s, _) = listener.accept().unwrap();
        let d = program.take_draw(&s).expect("the others entry applies");
        assert_eq!(d.prefix, None, "the /8 and /24 were removed by the refill");
        assert_eq!(snd_cwnd(&s), d.iw);
        seen.insert(d.iw);
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), [20, 30]);

    // The fast start's set of five at chance_alpha 0.2: each IW a fifth of the time
    // (α at its chance, the four others sharing the rest equally), each applied.
    let set = vec![10, 15, 20, 25, 30];
    program
        .fill(&[IwEntry {
            prefix: None,
            iw: set.clone(),
            chance_alpha: 0.2,
        }])
        .unwrap();
    let mut counts = std::collections::BTreeMap::new();
    let n = 400;
    for _ in 0..n {
        let _c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (s, _) = listener.accept().unwrap();
        let d = program.take_draw(&s).expect("the others entry applies");
        assert_eq!(d.iw_set, set);
        assert!(d.applied);
        assert_eq!(snd_cwnd(&s), d.iw);
        *counts.entry(d.iw).or_insert(0u32) += 1;
    }
    assert_eq!(counts.keys().copied().collect::<Vec<_>>(), set, "{counts:?}");
    for (iw, c) in &counts {
        // 400 draws at 0.2: mean 80, sd 8; 40..120 is five sd.
        assert!((40..=120).contains(c), "IW {iw} drawn {c} times of {n}: {counts:?}");
    }
    // More than the kernel's map holds: refused.
    let e = program
        .fill(&[IwEntry {
            prefix: None,
            iw: (3..12).collect(),
            chance_alpha: 0.5,
        }])
        .unwrap_err();
    assert!(e.to_string().contains("9 IWs"), "{e}");

    // Another port is not the edge's: untouched.
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let _c = TcpStream::connect(other.local_addr().unwrap()).unwrap();
    let (s, _) = other.accept().unwrap();
    assert!(program.take_draw(&s).is_none());
    assert_eq!(snd_cwnd(&s), 10);
}

/// `gearbox bench tcpwise` reads the program's cost from the kernel's statistics: with
/// them on, every connection runs the program (its passive side at least once) and adds
/// to its run time.
#[test]
fn the_kernel_times_the_program_while_statistics_are_on() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let program = IwProgram::attach(&listener, port).expect("attaching the sock_ops program (needs root)");
    let _on = BpfStats::enable().expect("BPF_ENABLE_STATS (needs root)");
    let before = program.run_stats().unwrap();
    for _ in 0..3 {
        let _c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let _s = listener.accept().unwrap();
    }
    let after = program.run_stats().unwrap();
    assert!(after.runs >= before.runs + 3, "{before:?} -> {after:?}");
    assert!(after.run_time_ns > before.run_time_ns, "{before:?} -> {after:?}");
}
