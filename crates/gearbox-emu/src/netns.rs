//! Namespaces, their TUN devices and the processes inside them.
//!
//! Setup goes through iproute2 (`ip netns add/del`, `ip -n NS -batch -`)
//! rather than rtnetlink: it is a handful of commands a reader can replay by
//! hand, errors come back as `ip`'s own words, and one batch process adds
//! thousands of population addresses in well under a second.
//!
//! Everything is named after the run (`gbx<pid>x<4 hex>` + `s`/`c`), and the
//! TUN devices are not persistent, so removing the two namespaces removes
//! everything. Removal happens on drop (normal exit, error, panic); against
//! SIGKILL a watchdog process waits on a pipe that only this process writes:
//! EOF without the word `done` means the emulator died, and the watchdog
//! kills what is left in the namespaces and deletes them.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use crate::sys;

/// A setup step that failed.
#[derive(Debug, thiserror::Error)]
#[error("{step}: {detail}")]
pub struct SetupError {
    /// What was being done, e.g. the `ip` command line.
    pub step: String,
    /// Why it failed.
    pub detail: String,
}

fn setup_err(step: impl Into<String>, detail: impl ToString) -> SetupError {
    SetupError {
        step: step.into(),
        detail: detail.to_string(),
    }
}

/// Runs `ip ARGS`, optionally feeding `stdin`; `ip`'s stderr becomes the error.
pub fn ip(args: &[&str], stdin: Option<&str>) -> Result<String, SetupError> {
    let step = format!("ip {}", args.join(" "));
    let mut child = Command::new("ip")
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| setup_err(&step, format!("cannot run `ip` (is iproute2 installed?): {e}")))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes()).map_err(|e| setup_err(&step, e))?;
    }
    let out = child.wait_with_output().map_err(|e| setup_err(&step, e))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(setup_err(step, String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// A fresh run name: `gbx<pid>x<4 hex digits>` (at most 15 characters, so
/// `NAME` + `s`/`c` stays within 16).
pub fn unique_name() -> String {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded from the OS per process and per instance: enough
    // to tell apart two runs with the same pid (the pid is already unique
    // among live processes).
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    format!("gbx{}x{:04x}", std::process::id(), h.finish() & 0xffff)
}

/// Deletes namespaces left by runs whose process is gone and whose watchdog
/// could not clean up either (both killed at once, e.g. by a container stop):
/// names `gbx<pid>x<4 hex>s|c` whose `<pid>` no longer exists. A name whose pid
/// is alive is left alone, even if the pid was reused. Best effort.
pub fn sweep_stale() {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = stale_owner(&name) else { continue };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        tracing::info!("gearbox-emu: removing namespace {name} left by dead run {pid}");
        if let Ok(out) = ip(&["netns", "pids", &name], None) {
            for p in out.split_whitespace().filter_map(|p| p.parse::<u32>().ok()) {
                sys::kill_pid(p, libc::SIGKILL);
            }
        }
        let _ = ip(&["netns", "del", &name], None);
    }
}

/// The pid in a run's namespace name, `None` if the name is not one of ours.
fn stale_owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("gbx")?;
    let rest = rest.strip_suffix('s').or_else(|| rest.strip_suffix('c'))?;
    let (pid, tag) = rest.split_once('x')?;
    let ours = !pid.is_empty()
        && pid.bytes().all(|b| b.is_ascii_digit())
        && tag.len() == 4
        && tag.bytes().all(|b| b.is_ascii_hexdigit());
    ours.then(|| pid.parse().ok()).flatten()
}

/// The script of the watchdog: `$@` are the namespaces to remove when its
/// stdin reaches EOF without a `done` line first.
const WATCHDOG: &str = r#"trap '' INT TERM HUP
read -r line
[ "$line" = done ] && exit 0
for round in 1 2; do
  for ns in "$@"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  done
done
for ns in "$@"; do ip netns del "$ns" 2>/dev/null; done
exit 0"#;

/// The two namespaces of a run; removed (with everything in them) on drop.
pub struct Namespaces {
    /// Run name.
    pub name: String,
    /// Server namespace, `NAMEs`.
    pub server: String,
    /// Client namespace, `NAMEc`.
    pub client: String,
    created: Vec<String>,
    watchdog: Option<(Child, ChildStdin)>,
}

impl Namespaces {
    /// Starts the watchdog, then creates `NAMEs` and `NAMEc`.
    pub fn create(name: &str) -> Result<Self, SetupError> {
        let server = format!("{name}s");
        let client = format!("{name}c");
        let mut child = Command::new("sh")
            .args(["-c", WATCHDOG, "gearbox-emu-watchdog", &server, &client])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group: a Ctrl-C meant for the emulator must not kill it.
            .process_group(0)
            .spawn()
            .map_err(|e| setup_err("start the cleanup watchdog (sh)", e))?;
        let pipe = child
            .stdin
            .take()
            .ok_or_else(|| setup_err("start the cleanup watchdog (sh)", "no stdin pipe"))?;
        let mut ns = Namespaces {
            name: name.to_string(),
            server,
            client,
            created: Vec::new(),
            watchdog: Some((child, pipe)),
        };
        for n in [ns.server.clone(), ns.client.clone()] {
            ip(&["netns", "add", &n], None)?;
            ns.created.push(n);
        }
        Ok(ns)
    }

    /// Kills every process inside the namespaces.
    pub fn kill_all(&self) {
        for _ in 0..2 {
            for ns in &self.created {
                if let Ok(out) = ip(&["netns", "pids", ns], None) {
                    for pid in out.split_whitespace().filter_map(|p| p.parse::<u32>().ok()) {
                        sys::kill_pid(pid, libc::SIGKILL);
                    }
                }
            }
        }
    }

    /// Kills what runs inside, deletes the namespaces and dismisses the watchdog.
    pub fn remove(&mut self) {
        if !self.created.is_empty() {
            self.kill_all();
        }
        for ns in std::mem::take(&mut self.created) {
            if let Err(e) = ip(&["netns", "del", &ns], None) {
                tracing::warn!("gearbox-emu: cannot delete namespace {ns}: {e}");
            }
        }
        if let Some((mut child, mut pipe)) = self.watchdog.take() {
            // If the write fails the watchdog is gone or will clean up itself: both fine.
            let _ = pipe.write_all(b"done\n");
            drop(pipe);
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Runs `f` on a thread inside namespace `ns`. Sockets it creates stay in that
/// namespace wherever they are used later.
pub fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> io::Result<T> {
    let file = File::open(format!("/run/netns/{ns}"))?;
    std::thread::scope(|s| {
        s.spawn(move || {
            sys::enter_netns(&file)?;
            Ok(f())
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("thread inside the namespace panicked")))
    })
}

/// Opens the TUN device inside namespace `ns` (IPv6 off for new devices there,
/// so the kernel's router solicitations do not cross the links).
pub fn open_tun_in(ns: &str) -> Result<OwnedFd, SetupError> {
    let step = format!("open TUN {} in namespace {ns}", sys::TUN_NAME);
    in_netns(ns, || {
        // /proc/sys/net follows the network namespace of the thread that opens it.
        let _ = std::fs::write("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1");
        sys::open_tun(sys::TUN_NAME)
    })
    .and_then(|r| r)
    .map_err(|e| setup_err(step, e))
}

/// The TCP ports in LISTEN state and the bound UDP ports in namespace `ns`,
/// read from `/proc/thread-self/net/*` by a thread inside it. (Reading
/// `/proc/PID/net` of the server command instead races with its start: until
/// `ip netns exec` has switched namespace, that shows the root namespace's
/// sockets.)
pub fn bound_ports(ns: &str) -> io::Result<(Vec<u16>, Vec<u16>)> {
    in_netns(ns, || {
        let read = |file: &str, want_state: &str| -> Vec<u16> {
            let Ok(text) = std::fs::read_to_string(format!("/proc/thread-self/net/{file}")) else {
                return Vec::new();
            };
            text.lines()
                .skip(1)
                .filter_map(|line| {
                    let mut fields = line.split_whitespace();
                    let local = fields.nth(1)?;
                    let state = fields.nth(1)?;
                    let port = u16::from_str_radix(local.rsplit(':').next()?, 16).ok()?;
                    (state == want_state && port != 0).then_some(port)
                })
                .collect()
        };
        // 0A = TCP_LISTEN; 07 = TCP_CLOSE, what an unconnected bound UDP socket shows.
        let mut tcp = read("tcp", "0A");
        tcp.extend(read("tcp6", "0A"));
        let mut udp = read("udp", "07");
        udp.extend(read("udp6", "07"));
        (tcp, udp)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_of_the_run_scheme_have_an_owner() {
        assert_eq!(stale_owner("gbx123x0a9fs"), Some(123));
        assert_eq!(stale_owner("gbx123x0a9fc"), Some(123));
        assert_eq!(stale_owner("gbx123x0a9f"), None);
        assert_eq!(stale_owner("gbx123x0a9gs"), None);
        assert_eq!(stale_owner("gbxx0a9fs"), None);
        assert_eq!(stale_owner("lab-ns"), None);
        let n = unique_name();
        assert!(n.len() <= 15, "{n}");
        assert_eq!(stale_owner(&format!("{n}s")), Some(std::process::id()));
    }
}
