//! The servers under test as child processes: started, waited for until they listen,
//! killed when dropped. Child processes rather than in-process servers so that each
//! one's CPU time can be read apart from the client's (see [`super::proc_stats`]).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::proc_stats::process_cpu_s;

/// A server child process, killed when dropped.
pub(super) struct Server {
    child: Child,
    pub(super) port: u16,
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    pub(super) fn start(name: &'static str, mut cmd: Command, port: u16, log: PathBuf) -> anyhow::Result<Server> {
        let log_file = std::fs::File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .with_context(|| format!("cannot start {name} ({:?})", cmd.get_program()))?;
        let mut server = Server { child, port, log };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = server.child.try_wait()? {
                bail!("{name} exited ({status}) before serving: {}", server.log_tail());
            }
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(server);
            }
            if Instant::now() > deadline {
                bail!(
                    "{name} did not listen on port {port} within 15 s: {}",
                    server.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<_> = text.lines().rev().take(20).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(super) fn cpu_s(&self) -> f64 {
        process_cpu_s(self.child.id()).unwrap_or(f64::NAN)
    }

    pub(super) fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }
}

/// A loopback port free on both TCP and UDP (both servers listen on the same number for
/// h2 and h3).
pub(super) fn free_port() -> anyhow::Result<u16> {
    for _ in 0..50 {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0")?;
        let port = tcp.local_addr()?.port();
        if std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    bail!("no loopback port free on both TCP and UDP")
}
