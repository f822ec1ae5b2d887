//! The Westwood+ BPF controller registers with the kernel and carries real TCP
//! connections on loopback, chosen at connect time or switched on a live socket.
//! Needs root and a kernel with BTF (CI runs as root; `make test` fails rather than
//! skips without them).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;

use gearbox_bpf::westwood;

fn congestion_of(s: &TcpStream) -> String {
    let raw = socket2::SockRef::from(s).tcp_congestion().expect("TCP_CONGESTION");
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    String::from_utf8_lossy(&raw[..end]).into_owned()
}

/// Sends `bytes` from a server socket to a client over loopback; `on_server` runs on
/// the server's socket before sending and `mid` halfway through. Returns what the
/// client received and the server's controller at the end.
fn transfer(
    bytes: usize,
    on_server: impl FnOnce(&TcpStream),
    mid: impl FnOnce(&TcpStream) + Send + 'static,
) -> (usize, String) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let client = thread::spawn(move || {
        let mut c = TcpStream::connect(addr).unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let mut got = 0;
        loop {
            let n = c.read(&mut buf).unwrap();
            if n == 0 {
                break got;
            }
            got += n;
        }
    });
    let (mut s, _) = listener.accept().unwrap();
    on_server(&s);
    let chunk = vec![7u8; 64 * 1024];
    let mut sent = 0;
    let mut mid = Some(mid);
    while sent < bytes {
        let n = chunk.len().min(bytes - sent);
        s.write_all(&chunk[..n]).unwrap();
        sent += n;
        if sent >= bytes / 2 {
            if let Some(f) = mid.take() {
                f(&s);
            }
        }
    }
    let cc = congestion_of(&s);
    s.shutdown(std::net::Shutdown::Write).unwrap();
    (client.join().unwrap(), cc)
}

#[test]
fn westwood_registers_and_carries_a_connection_chosen_at_accept() {
    westwood::ensure().expect("registering Westwood+ (needs root and BTF)");
    assert!(
        westwood::kernel_offers(westwood::NAME),
        "the kernel lists westwood after ensure()"
    );
    // A second call is a no-op.
    westwood::ensure().unwrap();
    let (got, cc) = transfer(
        32 << 20,
        |s| {
            socket2::SockRef::from(s)
                .set_tcp_congestion(westwood::NAME.as_bytes())
                .unwrap()
        },
        |_| {},
    );
    assert_eq!(got, 32 << 20);
    assert_eq!(cc, "westwood");
}

#[test]
fn a_live_connection_switches_between_cubic_and_westwood() {
    westwood::ensure().expect("registering Westwood+ (needs root and BTF)");
    let (got, cc) = transfer(
        32 << 20,
        |s| socket2::SockRef::from(s).set_tcp_congestion(b"cubic").unwrap(),
        |s| {
            assert_eq!(congestion_of(s), "cubic");
            socket2::SockRef::from(s)
                .set_tcp_congestion(westwood::NAME.as_bytes())
                .unwrap();
        },
    );
    assert_eq!(got, 32 << 20);
    assert_eq!(cc, "westwood");
}
