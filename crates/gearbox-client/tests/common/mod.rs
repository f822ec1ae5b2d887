//! Real peers for the client's integration tests: caddy (HTTP/1.1, HTTP/2, HTTP/3 over
//! quic-go) and nginx (HTTP/1.1, HTTP/2), each run from a temp dir with a certificate
//! made for the test, on a free loopback port, and killed when its guard is dropped
//! (also when the test panics).

#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gearbox_client::{Client, ClientConfig, Trust};

/// How a test names the binary it needs and what to do when it is missing.
pub fn require_binary(path: &str, package: &str) -> PathBuf {
    let p = PathBuf::from(path);
    assert!(
        p.exists(),
        "{path} is missing: this test runs against a real {package}. Run the project's setup script \
         (scripts/setup.sh) or `apt-get install {package}`, then run the tests again."
    );
    p
}

/// A loopback port free for both TCP and UDP right now, for a server started next.
///
/// Ports come from 20000-32767, below Linux's ephemeral range (32768-60999), and from a
/// process-wide counter: a port the kernel hands out for `bind(0)` may be handed out again
/// (to another test's `bind(0)` or as an outgoing connection's source port) between this
/// check and the server's own bind, so two servers started side by side could end up on
/// one port and a test could talk to the wrong one.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id().wrapping_mul(7919) % 12_768;
    for _ in 0..12_768 {
        let port = (20_000 + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % 12_768) as u16;
        let tcp = TcpListener::bind(("127.0.0.1", port));
        if tcp.is_ok() && UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no port in 20000-32767 free for both TCP and UDP on 127.0.0.1");
}

/// A temp dir with `cert.pem`/`key.pem` for `localhost` and 127.0.0.1, and a `site/`
/// with `hello.txt` and a 300 000-byte `big.bin`.
pub struct Site {
    pub dir: tempfile::TempDir,
}

pub const HELLO: &str = "hello from a real peer\n";
pub const BIG_BYTES: usize = 300_000;

impl Site {
    pub fn new() -> Site {
        let dir = tempfile::tempdir().expect("temp dir");
        gearbox_dataplane::tls::write_self_signed(
            &["localhost".to_string(), "127.0.0.1".to_string()],
            &dir.path().join("cert.pem"),
            &dir.path().join("key.pem"),
        )
        .expect("self-signed certificate");
        let site = dir.path().join("site");
        std::fs::create_dir_all(&site).expect("site dir");
        std::fs::write(site.join("hello.txt"), HELLO).expect("hello.txt");
        let big: Vec<u8> = (0..BIG_BYTES).map(|i| (i % 251) as u8).collect();
        std::fs::write(site.join("big.bin"), big).expect("big.bin");
        Site { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn cert(&self) -> PathBuf {
        self.dir.path().join("cert.pem")
    }

    /// Our own edge on loopback (TCP and UDP on one free port, unless `config`
    /// sets them), serving with this site's certificate.
    pub async fn edge(&self, config: gearbox_edge::EdgeConfig) -> gearbox_edge::Edge {
        self.edge_with(config, |_| {}).await
    }

    /// [`Site::edge`] with its gears changed by `gears`.
    #[allow(dead_code)]
    pub async fn edge_with(
        &self,
        config: gearbox_edge::EdgeConfig,
        gears: impl FnOnce(&mut gearbox_edge::ConnectionGears),
    ) -> gearbox_edge::Edge {
        let config = gearbox_edge::EdgeConfig {
            cert: self.cert(),
            key: self.path().join("key.pem"),
            ..config
        };
        let mut g = gearbox_edge::ConnectionGears::from_config(&config);
        gears(&mut g);
        gearbox_edge::Edge::bind(config, g)
            .await
            .expect("edge binds on loopback")
    }

    /// [`Site::edge`] with the defaults: both protocols on one loopback port.
    pub async fn default_edge(&self) -> gearbox_edge::Edge {
        self.edge(gearbox_edge::EdgeConfig {
            listen: "127.0.0.1:0".parse().expect("address"),
            ..gearbox_edge::EdgeConfig::default()
        })
        .await
    }

    /// A client that trusts exactly this site's certificate.
    pub fn client(&self) -> Client {
        Client::new(self.config()).expect("client")
    }

    pub fn config(&self) -> ClientConfig {
        ClientConfig {
            trust: Trust::Roots(vec![self.cert()]),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(15),
            ..ClientConfig::default()
        }
    }
}

/// A child process killed (and reaped) on drop.
pub struct ServerGuard {
    child: Child,
    pub port: u16,
    name: &'static str,
    log: PathBuf,
}

impl ServerGuard {
    pub fn origin(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The server's log (printed when a test fails while the guard is alive).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the server completes a TLS handshake on its TCP port (and, when
    /// `udp_too`, has bound its UDP port). A TCP accept alone only shows that the
    /// listening socket exists: nginx's master binds it before its worker serves.
    fn wait_ready(&mut self, udp_too: bool, cert: &Path) {
        let deadline = Instant::now() + Duration::from_secs(15);
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("{} exited early ({status}); log:\n{}", self.name, self.log());
            }
            let last = match tls_handshake(addr, cert) {
                Ok(()) if !udp_too || udp_port_bound(self.port) => return,
                Ok(()) => "UDP port not bound yet".to_string(),
                Err(e) => e,
            };
            assert!(
                Instant::now() < deadline,
                "{} did not complete a TLS handshake on port {} within 15 s (last: {last}); log:\n{}",
                self.name,
                self.port,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// One blocking TLS 1.3 handshake with `addr`, trusting `cert`.
fn tls_handshake(addr: SocketAddr, cert: &Path) -> Result<(), String> {
    let cfg = gearbox_dataplane::tls::client_config(&Trust::Roots(vec![cert.to_path_buf()]), &[b"http/1.1"])
        .map_err(|e| e.to_string())?;
    let name = rustls_pki_types::ServerName::try_from("localhost").expect("a valid server name");
    let mut conn = rustls::ClientConnection::new(std::sync::Arc::new(cfg), name).map_err(|e| e.to_string())?;
    let mut tcp = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    tcp.set_write_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).map_err(|e| e.to_string())?;
    }
    Ok(())
}

impl Drop for ServerGuard {
    /// Stops the server's whole process group: nginx's workers outlive a killed master,
    /// so killing only the child would leave them running. TERM first (nginx's master
    /// then stops its workers), KILL whatever is left after two seconds. When the test
    /// is failing, prints the server's log first.
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- {} log ({}):\n{}", self.name, self.log.display(), self.log());
        }
        let group = -(self.child.id() as i32);
        // SAFETY: kill(2) on our own child's process group; no memory is involved.
        unsafe { libc::kill(group, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: as above.
        unsafe { libc::kill(group, libc::SIGKILL) };
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether some socket is bound to UDP `port` (from /proc/net/udp{,6}).
fn udp_port_bound(port: u16) -> bool {
    let needle = format!(":{port:04X} ");
    ["/proc/net/udp", "/proc/net/udp6"].iter().any(|f| {
        std::fs::read_to_string(f)
            .map(|t| {
                t.lines().skip(1).any(|l| {
                    l.split_whitespace()
                        .nth(1)
                        .is_some_and(|a| format!("{a} ").contains(&needle))
                })
            })
            .unwrap_or(false)
    })
}

/// caddy serving the site over HTTP/1.1, HTTP/2 and HTTP/3 on 127.0.0.1.
pub fn caddy(site: &Site) -> ServerGuard {
    let bin = require_binary("/usr/bin/caddy", "caddy");
    let port = free_port();
    let dir = site.path();
    let caddyfile = format!(
        "{{\n\tadmin off\n\tauto_https disable_redirects\n\tdefault_sni localhost\n\tstorage file_system {data}\n\
         \tservers {{\n\t\tprotocols h1 h2 h3\n\t}}\n}}\n\
         https://127.0.0.1:{port}, https://localhost:{port} {{\n\tbind 127.0.0.1\n\ttls {cert} {key}\n\
         \troot * {site}\n\tfile_server\n}}\n",
        data = dir.join("caddy-data").display(),
        cert = dir.join("cert.pem").display(),
        key = dir.join("key.pem").display(),
        site = dir.join("site").display(),
    );
    let conf = dir.join("Caddyfile");
    std::fs::write(&conf, caddyfile).expect("Caddyfile");
    let log = dir.join("caddy.log");
    let out = std::fs::File::create(&log).expect("caddy log");
    let child = Command::new(bin)
        .args(["run", "--adapter", "caddyfile", "--config"])
        .arg(&conf)
        .env("HOME", dir)
        .env("XDG_DATA_HOME", dir.join("xdg-data"))
        .env("XDG_CONFIG_HOME", dir.join("xdg-config"))
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log fd"))
        .stderr(out)
        .process_group(0)
        .spawn()
        .expect("start caddy");
    let mut guard = ServerGuard {
        child,
        port,
        name: "caddy",
        log,
    };
    guard.wait_ready(true, &site.cert());
    guard
}

/// nginx serving the site over TLS 1.3 on 127.0.0.1 with HTTP/2 (when `http2`) and
/// HTTP/1.1, closing idle keep-alive connections after `keepalive_s` seconds.
pub fn nginx(site: &Site, http2: bool, keepalive_s: u32) -> ServerGuard {
    let bin = require_binary("/usr/sbin/nginx", "nginx");
    let port = free_port();
    let dir = site.path();
    let d = |name: &str| dir.join(name).display().to_string();
    let conf = format!(
        "worker_processes 1;\npid {pid};\nerror_log {err} info;\n{user}events {{ worker_connections 64; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {t}/body;\n  proxy_temp_path {t}/proxy;\n\
         fastcgi_temp_path {t}/fastcgi;\n  uwsgi_temp_path {t}/uwsgi;\n  scgi_temp_path {t}/scgi;\n\
         keepalive_timeout {keepalive_s}s;\n  server {{\n    listen 127.0.0.1:{port} ssl{h2};\n    ssl_certificate {cert};\n\
         ssl_certificate_key {key};\n    ssl_protocols TLSv1.3;\n    root {site};\n  }}\n}}\n",
        pid = d("nginx.pid"),
        err = d("nginx-error.log"),
        // Running as root, nginx's workers would switch to `nobody`, who cannot read a
        // private temp dir.
        user = if running_as_root() { "user root;\n" } else { "" },
        t = d("nginx-tmp"),
        h2 = if http2 { " http2" } else { "" },
        cert = d("cert.pem"),
        key = d("key.pem"),
        site = d("site"),
    );
    std::fs::create_dir_all(dir.join("nginx-tmp")).expect("nginx temp dir");
    let conf_path = dir.join("nginx.conf");
    std::fs::write(&conf_path, conf).expect("nginx.conf");
    let log = dir.join("nginx-error.log");
    let child = Command::new(bin)
        .arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(&conf_path)
        .args(["-g", "daemon off;"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("nginx-stderr.log")).expect("nginx stderr"))
        .process_group(0)
        .spawn()
        .expect("start nginx");
    let mut guard = ServerGuard {
        child,
        port,
        name: "nginx",
        log,
    };
    guard.wait_ready(false, &site.cert());
    guard
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// The UDP socket of a front for our edge on loopback, on a port whose TCP twin forwards
/// every connection to `edge_tcp` untouched (so a request that falls back to TCP finds the
/// edge at the same origin); what the front does with UDP is the caller's.
#[allow(dead_code)] // not every test binary has a front
pub async fn udp_front_with_tcp_to(edge_tcp: std::net::SocketAddr) -> tokio::net::UdpSocket {
    // A UDP port whose TCP twin is free too.
    let (front, tcp) = loop {
        let front = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let port = front.local_addr().unwrap().port();
        if let Ok(tcp) = tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
            break (front, tcp);
        }
    };
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = tcp.accept().await {
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(edge_tcp).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    front
}

/// Liveness bound of every test: a hang fails the test instead of blocking the suite.
pub const TEST_BOUND: Duration = Duration::from_secs(60);

pub async fn bounded<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(TEST_BOUND, f)
        .await
        .expect("test did not finish within its liveness bound")
}
