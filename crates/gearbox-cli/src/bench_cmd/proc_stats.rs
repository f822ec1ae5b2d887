//! What `/proc` says about CPU time, UDP drops and load: the figures that tell which side
//! of a loopback measurement was the bottleneck.

/// User + system CPU time of a process (all its threads), seconds, from `/proc/PID/stat`.
pub(super) fn process_cpu_s(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name.
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // /proc reports clock ticks of USER_HZ, which Linux fixes at 100 for user space.
    Some(ticks / 100.0)
}

pub(super) fn own_cpu_s() -> f64 {
    process_cpu_s(std::process::id()).unwrap_or(f64::NAN)
}

/// UDP datagrams the kernel dropped because a socket's receive buffer was full, so far:
/// machine-wide (`RcvbufErrors` in `/proc/net/snmp`) and at the sockets bound to
/// `server_port` (the `drops` column of `/proc/net/udp`). Drops make QUIC's congestion
/// controller back off, so they explain HTTP/3 figures that CPU does not; the rest of the
/// machine-wide count is, during a measurement, essentially the client's socket.
pub(super) fn udp_drops(server_port: u16) -> Drops {
    let snmp = std::fs::read_to_string("/proc/net/snmp").unwrap_or_default();
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp:"));
    let all = match (udp.next(), udp.next()) {
        (Some(names), Some(values)) => names
            .split_whitespace()
            .zip(values.split_whitespace())
            .find(|(n, _)| *n == "RcvbufErrors")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0),
        _ => 0,
    };
    let table = std::fs::read_to_string("/proc/net/udp").unwrap_or_default();
    let server = table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
            (port == server_port).then(|| f.last()?.parse::<u64>().ok()).flatten()
        })
        .sum();
    Drops { all, server }
}

/// Counts of [`udp_drops`].
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Drops {
    all: u64,
    server: u64,
}

impl Drops {
    /// What happened between `before` and `self`: (at the server, elsewhere).
    pub(super) fn since(self, before: Drops) -> (u64, u64) {
        let server = self.server.saturating_sub(before.server);
        (server, self.all.saturating_sub(before.all).saturating_sub(server))
    }
}

/// CPU time the whole machine spent busy so far (every core, every process), seconds,
/// from the first line of `/proc/stat` (user, nice, system, irq, softirq, steal).
pub(super) fn machine_busy_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return f64::NAN;
    };
    let f: Vec<f64> = line.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    let busy: f64 = [0, 1, 2, 5, 6, 7].iter().filter_map(|&i| f.get(i)).sum();
    busy / 100.0
}

pub(super) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}
