//! `gearbox bench`: benchmarks that print figures. They are not tests: nothing here
//! passes or fails on a number; the figures and their conditions go to
//! `docs/benchmarks.md`.
//!
//! `gearbox bench edge` puts our edge beside caddy (an independent HTTP/2 + HTTP/3
//! server, quic-go inside) in one run on loopback: the same files, the same
//! certificate, the same client (gearbox-client) and the same measurements, servers
//! interleaved repeat by repeat so that background load hits both alike. Both servers
//! run as child processes, so the CPU each one uses, and the client's own, are read
//! apart from `/proc`: on loopback the CPU is the bottleneck, and the output says
//! which side spent it. An in-process edge was rejected: it would share the client's
//! runtime threads and its CPU could not be told apart.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use gearbox_client::{Client, ClientConfig, Request, TransportPref, Trust};

/// Arguments of `gearbox bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub bench: Bench,
}

/// The benchmarks.
#[derive(clap::Subcommand, Debug)]
pub enum Bench {
    /// Our edge against caddy on loopback, same files and client: HTTP/2 and HTTP/3 bulk
    /// throughput and small-request rate, with the CPU each side used.
    Edge(EdgeBenchArgs),
}

/// Arguments of `gearbox bench edge`.
#[derive(clap::Args, Debug)]
pub struct EdgeBenchArgs {
    /// Size of the bulk file, in MB (10^6 bytes).
    #[arg(long, default_value_t = 200)]
    pub size_mb: u64,
    /// Length of each small-request measurement, seconds (after the warm-up).
    #[arg(long, default_value_t = 5.0)]
    pub duration_s: f64,
    /// Warm-up before each small-request measurement, seconds.
    #[arg(long, default_value_t = 1.0)]
    pub warmup_s: f64,
    /// Small requests in flight at once, on one connection.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Repeats of every measurement; the median is reported, the best beside it.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Size of the small responses, bytes.
    #[arg(long, default_value_t = 1024)]
    pub small_bytes: u64,
    /// The caddy binary.
    #[arg(long, default_value = "caddy")]
    pub caddy: PathBuf,
}

/// Runs the chosen benchmark.
pub fn run(a: BenchArgs) -> anyhow::Result<()> {
    match a.bench {
        Bench::Edge(e) => edge(e),
    }
}

/// A server child process, killed when dropped.
struct Server {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(name: &'static str, mut cmd: Command, port: u16, log: PathBuf) -> anyhow::Result<Server> {
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

    fn cpu_s(&self) -> f64 {
        process_cpu_s(self.child.id()).unwrap_or(f64::NAN)
    }

    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }
}

/// User + system CPU time of a process (all its threads), seconds, from `/proc/PID/stat`.
fn process_cpu_s(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name.
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // /proc reports clock ticks of USER_HZ, which Linux fixes at 100 for user space.
    Some(ticks / 100.0)
}

fn own_cpu_s() -> f64 {
    process_cpu_s(std::process::id()).unwrap_or(f64::NAN)
}

/// UDP datagrams the kernel dropped because a socket's receive buffer was full, so far:
/// machine-wide (`RcvbufErrors` in `/proc/net/snmp`) and at the sockets bound to
/// `server_port` (the `drops` column of `/proc/net/udp`). Drops make QUIC's congestion
/// controller back off, so they explain HTTP/3 figures that CPU does not; the rest of the
/// machine-wide count is, during a measurement, essentially the client's socket.
fn udp_drops(server_port: u16) -> Drops {
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
struct Drops {
    all: u64,
    server: u64,
}

impl Drops {
    /// What happened between `before` and `self`: (at the server, elsewhere).
    fn since(self, before: Drops) -> (u64, u64) {
        let server = self.server.saturating_sub(before.server);
        (server, self.all.saturating_sub(before.all).saturating_sub(server))
    }
}

/// CPU time the whole machine spent busy so far (every core, every process), seconds,
/// from the first line of `/proc/stat` (user, nice, system, irq, softirq, steal).
fn machine_busy_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return f64::NAN;
    };
    let f: Vec<f64> = line.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    let busy: f64 = [0, 1, 2, 5, 6, 7].iter().filter_map(|&i| f.get(i)).sum();
    busy / 100.0
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// A loopback port free on both TCP and UDP (both servers listen on the same number for
/// h2 and h3).
fn free_port() -> anyhow::Result<u16> {
    for _ in 0..50 {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0")?;
        let port = tcp.local_addr()?.port();
        if std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    bail!("no loopback port free on both TCP and UDP")
}

/// Writes `len` bytes of xorshift noise (incompressible, so no layer can shortcut it).
fn write_noise(path: &Path, len: u64) -> anyhow::Result<()> {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
    );
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut block = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        for word in block.chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            word.copy_from_slice(&x.to_le_bytes());
        }
        let n = left.min(block.len() as u64) as usize;
        f.write_all(&block[..n])?;
        left -= n as u64;
    }
    f.flush()?;
    Ok(())
}

fn caddyfile(port: u16, cert: &Path, key: &Path, www: &Path) -> String {
    format!(
        r#"{{
	admin off
	auto_https disable_redirects
	default_sni localhost
	skip_install_trust
	log {{
		output discard
	}}
	servers {{
		protocols h1 h2 h3
	}}
}}
:{port} {{
	bind 127.0.0.1
	tls {cert} {key}
	root * {www}
	file_server
}}
"#,
        cert = cert.display(),
        key = key.display(),
        www = www.display()
    )
}

/// One measurement, with the CPU both sides spent during it.
#[derive(Debug, Clone, Copy)]
struct Sample {
    /// MB/s (bulk) or requests/s (small).
    value: f64,
    /// Client CPU, percent of one core.
    client_cpu_pct: f64,
    /// Server CPU, percent of one core.
    server_cpu_pct: f64,
    /// UDP datagrams dropped meanwhile for a full receive buffer at the server's socket.
    server_udp_drops: u64,
    /// The same elsewhere on the machine (the client's socket).
    other_udp_drops: u64,
}

impl Sample {
    /// The progress line of one repeat; `value` is formatted with its precision, `unit`
    /// follows it.
    fn log(&self, what: &str, label: &str, repeat: usize, value: &str, unit: &str) {
        eprintln!(
            "bench: {:<23} #{repeat}: {value:>8} {unit} (cpu client {:.0}%, server {:.0}%; udp drops: server {}, client {})",
            format!("{what} {label}"),
            self.client_cpu_pct,
            self.server_cpu_pct,
            self.server_udp_drops,
            self.other_udp_drops
        );
    }
}

/// What a row of the table measures.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Bulk,
    Small,
}

/// A target: a server and the paths that carry the bulk and small objects.
struct Target<'a> {
    label: &'static str,
    server: &'a Server,
    bulk_path: String,
    small_path: String,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn new_client(cert: &Path) -> anyhow::Result<Client> {
    let cfg = ClientConfig {
        trust: Trust::Roots(vec![cert.to_path_buf()]),
        request_timeout: Duration::from_secs(300),
        ..ClientConfig::default()
    };
    Ok(Client::new(cfg)?)
}

async fn get(client: &Client, url: &str, pref: TransportPref, want_bytes: u64) -> anyhow::Result<()> {
    let mut req = Request::get(url, pref);
    req.discard_body = true;
    let resp = client
        .request(req)
        .await
        .with_context(|| format!("GET {url} over {pref}"))?;
    if resp.status != 200 || resp.record.bytes != want_bytes {
        bail!(
            "GET {url} over {pref}: status {} with {} bytes, expected 200 with {want_bytes}",
            resp.status,
            resp.record.bytes
        );
    }
    Ok(())
}

/// One bulk GET on the client's (already open) connection: MB/s.
async fn bulk_once(client: &Client, t: &Target<'_>, pref: TransportPref, size: u64) -> anyhow::Result<Sample> {
    let url = t.server.url(&t.bulk_path);
    let port = t.server.port;
    let (c0, s0, d0, w0) = (own_cpu_s(), t.server.cpu_s(), udp_drops(port), Instant::now());
    get(client, &url, pref, size).await?;
    let wall = w0.elapsed().as_secs_f64();
    let (server_udp_drops, other_udp_drops) = udp_drops(port).since(d0);
    Ok(Sample {
        value: size as f64 / 1e6 / wall,
        client_cpu_pct: (own_cpu_s() - c0) / wall * 100.0,
        server_cpu_pct: (t.server.cpu_s() - s0) / wall * 100.0,
        server_udp_drops,
        other_udp_drops,
    })
}

/// Small GETs, `concurrency` in flight on one connection: requests/s counted over
/// `duration` after `warmup`.
async fn small_once(client: &Client, t: &Target<'_>, pref: TransportPref, a: &EdgeBenchArgs) -> anyhow::Result<Sample> {
    let url = Arc::new(t.server.url(&t.small_path));
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let first_error = Arc::new(std::sync::Mutex::new(None::<String>));
    let mut workers = Vec::new();
    for _ in 0..a.concurrency {
        let (client, url, done, failed, stop, first_error) = (
            client.clone(),
            url.clone(),
            done.clone(),
            failed.clone(),
            stop.clone(),
            first_error.clone(),
        );
        let want = a.small_bytes;
        workers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match get(&client, &url, pref, want).await {
                    Ok(()) => done.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        first_error
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get_or_insert(format!("{e:#}"));
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs_f64(a.warmup_s)).await;
    let (n0, c0, s0, d0, w0) = (
        done.load(Ordering::Relaxed),
        own_cpu_s(),
        t.server.cpu_s(),
        udp_drops(t.server.port),
        Instant::now(),
    );
    tokio::time::sleep(Duration::from_secs_f64(a.duration_s)).await;
    let (n1, c1, s1, d1, wall) = (
        done.load(Ordering::Relaxed),
        own_cpu_s(),
        t.server.cpu_s(),
        udp_drops(t.server.port),
        w0.elapsed().as_secs_f64(),
    );
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.await;
    }
    let failures = failed.load(Ordering::Relaxed);
    if failures > 0 {
        let first = first_error.lock().unwrap_or_else(|p| p.into_inner()).take();
        bail!(
            "{} over {pref}: {failures} small requests failed; first: {}",
            t.label,
            first.unwrap_or_default()
        );
    }
    Ok(Sample {
        value: (n1 - n0) as f64 / wall,
        client_cpu_pct: (c1 - c0) / wall * 100.0,
        server_cpu_pct: (s1 - s0) / wall * 100.0,
        server_udp_drops: d1.since(d0).0,
        other_udp_drops: d1.since(d0).1,
    })
}

/// One table row: a protocol and a kind of measurement, samples per target.
struct Row {
    name: String,
    kind: Kind,
    samples: Vec<Vec<Sample>>,
}

fn edge(a: EdgeBenchArgs) -> anyhow::Result<()> {
    if a.repeats == 0 || a.concurrency == 0 || a.size_mb == 0 || a.duration_s <= 0.0 {
        bail!("--repeats, --concurrency, --size-mb and --duration-s must be positive");
    }
    let size = a.size_mb * 1_000_000;
    // A fresh directory with an unpredictable name: a fixed /tmp path could be another
    // user's directory or a link planted there.
    let dir = tempfile::Builder::new()
        .prefix("gearbox-bench-edge-")
        .tempdir()
        .context("cannot create a temporary directory")?;
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    gearbox_dataplane::tls::write_self_signed(&["localhost".into(), "127.0.0.1".into()], &cert, &key)?;
    let www = dir.path().join("www");
    std::fs::create_dir_all(&www)?;
    eprintln!("bench: writing the {} MB file", a.size_mb);
    write_noise(&www.join("bulk.bin"), size)?;
    write_noise(&www.join("small.bin"), a.small_bytes)?;

    let exe = std::env::current_exe().context("cannot find the gearbox binary")?;
    let edge_port = free_port()?;
    let mut cmd = Command::new(&exe);
    cmd.arg("edge")
        .args(["--listen", &SocketAddr::from(([127, 0, 0, 1], edge_port)).to_string()])
        .arg("--cert")
        .arg(&cert)
        .arg("--key")
        .arg(&key)
        .arg("--static-dir")
        .arg(&www)
        .args(["--max-bytes", &size.max(a.small_bytes).to_string()])
        .env("GEARBOX_LOG", "warn");
    let gearbox = Server::start("gearbox edge", cmd, edge_port, dir.path().join("edge.log"))?;

    let caddy_port = free_port()?;
    let caddy_conf = dir.path().join("Caddyfile");
    std::fs::write(&caddy_conf, caddyfile(caddy_port, &cert, &key, &www))?;
    let mut cmd = Command::new(&a.caddy);
    cmd.args(["run", "--adapter", "caddyfile", "--config"])
        .arg(&caddy_conf)
        // Keep caddy's state (it writes some even with admin off) out of the user's home.
        .env("HOME", dir.path())
        .env("XDG_DATA_HOME", dir.path().join("caddy-data"))
        .env("XDG_CONFIG_HOME", dir.path().join("caddy-config"));
    let caddy = Server::start("caddy", cmd, caddy_port, dir.path().join("caddy.log")).map_err(|e| {
        e.context(format!(
            "caddy is needed for the comparison ({}); run scripts/setup.sh",
            a.caddy.display()
        ))
    })?;

    let targets = [
        Target {
            label: "gearbox file",
            server: &gearbox,
            bulk_path: "/bulk.bin".into(),
            small_path: "/small.bin".into(),
        },
        Target {
            label: "caddy file",
            server: &caddy,
            bulk_path: "/bulk.bin".into(),
            small_path: "/small.bin".into(),
        },
        Target {
            label: "gearbox /bytes",
            server: &gearbox,
            bulk_path: format!("/bytes/{size}"),
            small_path: format!("/bytes/{}", a.small_bytes),
        },
    ];

    // Background load: the machine's busy time less what the bench's own three
    // processes used. Our own threads count in the load average, so it cannot tell.
    let ours = || own_cpu_s() + gearbox.cpu_s() + caddy.cpu_s();
    let (busy0, ours0, wall0) = (machine_busy_s(), ours(), Instant::now());
    let load_before = load_average();
    let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let rows = rt.block_on(measure(&a, size, &cert, &targets))?;
    // The machine's and the processes' counters tick apart, so an idle machine can come out
    // a percent or so below zero: that is zero.
    let others_pct = (((machine_busy_s() - busy0) - (ours() - ours0)) / wall0.elapsed().as_secs_f64() * 100.0).max(0.0);
    drop(targets);
    drop(gearbox);
    drop(caddy);

    print_report(&a, &rows, &load_before, others_pct);
    Ok(())
}

async fn measure(a: &EdgeBenchArgs, size: u64, cert: &Path, targets: &[Target<'_>]) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for (pref, proto) in [(TransportPref::Tcp, "h2"), (TransportPref::Quic, "h3")] {
        // Bulk: one client (one connection) per target, opened and warmed with a small
        // request, then the repeats interleaved across targets.
        let mut clients = Vec::new();
        for t in targets {
            let c = new_client(cert)?;
            get(&c, &t.server.url(&t.small_path), pref, a.small_bytes).await?;
            clients.push(c);
        }
        let mut bulk = vec![Vec::new(); targets.len()];
        for r in 0..a.repeats {
            for (i, t) in targets.iter().enumerate() {
                let s = bulk_once(&clients[i], t, pref, size).await?;
                s.log(
                    &format!("{proto} bulk"),
                    t.label,
                    r + 1,
                    &format!("{:.1}", s.value),
                    "MB/s",
                );
                bulk[i].push(s);
            }
        }
        rows.push(Row {
            name: format!("{proto} bulk {} MB (MB/s)", a.size_mb),
            kind: Kind::Bulk,
            samples: bulk,
        });
        drop(clients);

        let mut small = vec![Vec::new(); targets.len()];
        for r in 0..a.repeats {
            for (i, t) in targets.iter().enumerate() {
                // A fresh connection for every run: each starts from the same state.
                let c = new_client(cert)?;
                let s = small_once(&c, t, pref, a).await?;
                s.log(
                    &format!("{proto} small"),
                    t.label,
                    r + 1,
                    &format!("{:.0}", s.value),
                    "req/s",
                );
                small[i].push(s);
            }
        }
        rows.push(Row {
            name: format!("{proto} {} B x{} (req/s)", a.small_bytes, a.concurrency),
            kind: Kind::Small,
            samples: small,
        });
    }
    Ok(rows)
}

fn print_report(a: &EdgeBenchArgs, rows: &[Row], load_before: &str, others_pct: f64) {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("gearbox bench edge: loopback, {cpus} CPUs shared by client and servers");
    println!(
        "background: load average {load_before} at the start; other processes used {others_pct:.0}% of one core on average during the run{}",
        if others_pct > 10.0 { " (NOISY: re-run when the machine is quiet)" } else { "" }
    );
    println!(
        "bulk: {} MB file, one connection, {} repeats; small: {} B, {} in flight on one connection, {} s after {} s warm-up, {} repeats",
        a.size_mb, a.repeats, a.small_bytes, a.concurrency, a.duration_s, a.warmup_s, a.repeats
    );
    if cfg!(debug_assertions) {
        println!(
            "WARNING: a debug build; build with `cargo build --release -p gearbox-cli` for figures worth recording"
        );
    }
    println!("figures: median of the repeats (best in brackets)\n");
    println!(
        "{:<24} {:>20} {:>20} {:>14} {:>20}",
        "measure", "gearbox (file)", "caddy (file)", "gearbox/caddy", "gearbox (/bytes)"
    );
    let mut client_bound = Vec::new();
    for row in rows {
        let fmt = |v: &[Sample]| {
            let vals: Vec<f64> = v.iter().map(|s| s.value).collect();
            let best = vals.iter().copied().fold(f64::NAN, f64::max);
            let prec = if row.kind == Kind::Bulk { 1 } else { 0 };
            format!("{:.prec$} ({:.prec$})", median(vals), best)
        };
        let med = |i: usize| median(row.samples[i].iter().map(|s| s.value).collect());
        println!(
            "{:<24} {:>20} {:>20} {:>14.2} {:>20}",
            row.name,
            fmt(&row.samples[0]),
            fmt(&row.samples[1]),
            med(0) / med(1),
            fmt(&row.samples[2])
        );
    }
    println!("\nCPU during each measurement, median % of one core: client / server");
    println!(
        "{:<24} {:>20} {:>20} {:>14} {:>20}",
        "measure", "gearbox (file)", "caddy (file)", "", "gearbox (/bytes)"
    );
    for row in rows {
        let cells: Vec<String> = row
            .samples
            .iter()
            .map(|v| {
                let c = median(v.iter().map(|s| s.client_cpu_pct).collect());
                let s = median(v.iter().map(|s| s.server_cpu_pct).collect());
                format!("{c:.0} / {s:.0}")
            })
            .collect();
        for (i, v) in row.samples.iter().enumerate() {
            let c = median(v.iter().map(|s| s.client_cpu_pct).collect());
            let s = median(v.iter().map(|s| s.server_cpu_pct).collect());
            if c >= s {
                client_bound.push(format!(
                    "{} against {}",
                    row.name,
                    ["gearbox (file)", "caddy (file)", "gearbox (/bytes)"][i]
                ));
            }
        }
        println!(
            "{:<24} {:>20} {:>20} {:>14} {:>20}",
            row.name, cells[0], cells[1], "", cells[2]
        );
    }
    println!("\nUDP datagrams dropped for a full socket receive buffer, median per measurement: at the server / elsewhere (client)");
    for row in rows.iter().filter(|r| r.name.starts_with("h3")) {
        let cells: Vec<String> = row
            .samples
            .iter()
            .map(|v| {
                let server = median(v.iter().map(|s| s.server_udp_drops as f64).collect());
                let other = median(v.iter().map(|s| s.other_udp_drops as f64).collect());
                format!("{server:.0} / {other:.0}")
            })
            .collect();
        println!(
            "{:<24} {:>20} {:>20} {:>14} {:>20}",
            row.name, cells[0], cells[1], "", cells[2]
        );
    }
    println!();
    if client_bound.is_empty() {
        println!("The servers used more CPU than the client in every measurement.");
    } else {
        println!(
            "CLIENT-BOUND: the client used at least as much CPU as the server in: {}.\n\
             With {cpus} cores shared, those figures are bounded by our client as much as by the server.",
            client_bound.join("; ")
        );
    }
}
