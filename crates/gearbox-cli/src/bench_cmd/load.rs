//! `gearbox bench load`: many connections at once against our edge and against caddy in
//! one run on loopback. First `--idle` idle connections over TLS/TCP (HTTP/2) and as many
//! over QUIC (HTTP/3) are opened and held; with them still held, `--active` clients of a
//! click workload (`app` by default) run a closed loop over HTTP/2 and then over HTTP/3.
//! The bench reads each server's resident memory (`VmRSS`, peak `VmHWM` of
//! `/proc/PID/status`) and open file descriptors (`/proc/PID/fd`) at every step, and the
//! request rate and latency of the active clients. Servers are measured one after the
//! other (each with its own idle connections), under the same client.
//!
//! The load generator shares the machine's cores with the server it measures. Its active
//! clients run on a runtime of `--client-threads` threads (one by default) and its idle
//! connections on one thread more, which only answers and sends PINGs, so that on two
//! cores it takes little more than one from the server; its CPU and the server's are printed beside
//! each figure, as in `gearbox bench edge`, so a client-bound figure shows as such. The
//! alternative, a separate load-generating program (h2load, wrk), was rejected: none
//! speaks HTTP/3 from Debian's packages, and two tools would measure the two protocols
//! differently.
//!
//! The active clients replay the workload's requests and click structure with the gaps
//! and think times taken out (each client sends its next click when the previous one has
//! finished): a closed loop measures what the server can serve, where the workload's own
//! pacing would only measure the pacing. The clients start evenly over the warm-up, and
//! errors are counted by kind. Each request is a `GET` of the file, out of a
//! pool drawn from the workload's response sizes, closest in size to the request's
//! response: both servers serve the same files from disk (caddy's `file_server` has no
//! synthetic route, and answers no `POST`, so the workload's uploads are left out).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use gearbox_client::{Client, ClientConfig, Request, TransportPref, Trust};
use gearbox_workload::WorkloadSpec;

use super::idle::{self, IdleKind};
use super::peers::{start_caddy, write_noise};
use super::proc_stats::{load_average, own_cpu_s, udp_drops};
use super::process::{free_port, Server};

/// Arguments of `gearbox bench load`.
#[derive(clap::Args, Debug)]
pub struct LoadBenchArgs {
    /// Idle connections held per transport (TLS/TCP with HTTP/2, and QUIC with HTTP/3).
    #[arg(long, default_value_t = 10_000)]
    pub idle: usize,
    /// Active clients, each on its own connection, running the workload in a closed loop.
    #[arg(long, default_value_t = 1_000)]
    pub active: usize,
    /// Built-in workload name or workload TOML file (a click workload).
    #[arg(long, default_value = "app")]
    pub workload: String,
    /// Seed of the workload: client i replays the requests of seed + i.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Files in the pool the requests are served from (sizes drawn from the workload).
    #[arg(long, default_value_t = 256)]
    pub objects: usize,
    /// Length of each active measurement, seconds (after the warm-up).
    #[arg(long, default_value_t = 10.0)]
    pub duration_s: f64,
    /// Warm-up before each active measurement (the clients' handshakes), seconds.
    #[arg(long, default_value_t = 3.0)]
    pub warmup_s: f64,
    /// Handshakes in flight at once while the idle connections are opened.
    #[arg(long, default_value_t = 64)]
    pub open_parallel: usize,
    /// Threads of the load generator's runtime.
    #[arg(long, default_value_t = 1)]
    pub client_threads: usize,
    /// The caddy binary.
    #[arg(long, default_value = "caddy")]
    pub caddy: PathBuf,
    /// The active clients' `quic_silence_floor`, seconds: no QUIC handshake is given up
    /// and no connection declared silent sooner. The client's default (1 s, and 2 s for a
    /// first handshake) is for a host that schedules it promptly; the bench shares
    /// starved cores with the server and with 1,000 other clients, so its own stalls
    /// would count as dead paths.
    #[arg(long, default_value_t = 15.0)]
    pub quic_silence_floor_s: f64,
}

/// Resident memory and descriptors of a process at one moment.
#[derive(Debug, Clone, Copy, Default)]
struct ProcMem {
    rss_kb: u64,
    hwm_kb: u64,
    fds: u64,
}

fn proc_mem(pid: u32) -> ProcMem {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
    ProcMem {
        rss_kb: field("VmRSS:"),
        hwm_kb: field("VmHWM:"),
        fds,
    }
}

/// One active measurement.
#[derive(Debug, Clone, Default)]
struct Active {
    requests_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    errors: u64,
    error_kinds: Vec<(String, u64)>,
    first_error: Option<String>,
    /// UDP datagrams dropped for a full receive buffer during the measurement: (at the
    /// server's socket, elsewhere on the machine).
    udp_drops: (u64, u64),
    /// Of the drops elsewhere, those at the socket of the bench's idle QUIC connections.
    idle_socket_drops: u64,
    client_cpu_pct: f64,
    server_cpu_pct: f64,
    mem: ProcMem,
}

/// Counts by cause, as the report lists them.
type Causes = Vec<(String, u64)>;

/// Everything measured against one server.
#[derive(Debug, Default)]
struct ServerFigures {
    start: ProcMem,
    after_tcp: ProcMem,
    after_quic: ProcMem,
    tcp_opened: u64,
    tcp_failed: u64,
    tcp_open_s: f64,
    quic_opened: u64,
    quic_failed: u64,
    quic_open_s: f64,
    open_errors: Vec<String>,
    h2: Active,
    h3: Active,
    /// Idle connections still open after both active measurements: (TCP, QUIC).
    alive_after: (u64, u64),
    /// Idle connections that ended before the bench closed them, by cause: (TCP, QUIC).
    closes: (Causes, Causes),
    /// UDP datagrams dropped for a full receive buffer while the idle QUIC connections
    /// were opened: (at the server's socket, elsewhere).
    open_udp_drops: (u64, u64),
}

/// Raises this process's `RLIMIT_NOFILE` (and so its children's) to at least `want`,
/// the hard limit too when allowed (root); returns the soft limit in force.
fn raise_fd_limit(want: u64) -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the one struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        if lim.rlim_cur >= want {
            return lim.rlim_cur;
        }
        let raised = libc::rlimit {
            rlim_cur: want,
            rlim_max: lim.rlim_max.max(want),
        };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
            return want;
        }
        let soft = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &soft) == 0 {
            return lim.rlim_max;
        }
        lim.rlim_cur
    }
}

/// `gearbox bench load`.
pub fn run(a: LoadBenchArgs) -> anyhow::Result<()> {
    if a.active == 0 || a.objects == 0 || a.duration_s <= 0.0 || a.open_parallel == 0 || a.client_threads == 0 {
        bail!("--active, --objects, --duration-s, --open-parallel and --client-threads must be positive");
    }
    if !(a.quic_silence_floor_s.is_finite() && a.quic_silence_floor_s > 0.0 && a.quic_silence_floor_s <= 600.0) {
        bail!("--quic-silence-floor-s must be in (0, 600] seconds");
    }
    let spec = WorkloadSpec::load(&a.workload).with_context(|| format!("--workload {}", a.workload))?;
    if spec.clicks.is_none() {
        bail!("--workload {}: not a click workload (no [clicks] section)", a.workload);
    }
    // Descriptors: the bench holds one per idle TCP connection (its idle QUIC ones share
    // one UDP socket) and two per active client (a TCP and a UDP socket); each server one
    // per TCP connection; plus slack for everything else.
    let want = (a.idle + 2 * a.active + 1024) as u64;
    let nofile = raise_fd_limit(want);
    let mut idle_n = a.idle;
    let mut limit_note = None;
    if nofile < want {
        let fit = (nofile.saturating_sub((2 * a.active + 1024) as u64)) as usize;
        limit_note = Some(format!(
            "RLIMIT_NOFILE is {nofile} here and setrlimit refused more: {fit} idle connections per transport instead of {}",
            a.idle
        ));
        idle_n = fit;
    }

    let dir = tempfile::Builder::new()
        .prefix("gearbox-bench-load-")
        .tempdir()
        .context("cannot create a temporary directory")?;
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    gearbox_dataplane::tls::write_self_signed(&["localhost".into(), "127.0.0.1".into()], &cert, &key)?;
    let www = dir.path().join("www");
    std::fs::create_dir_all(www.join("obj"))?;
    let pool = object_pool(&spec, a.seed, a.objects);
    for (i, size) in pool.iter().enumerate() {
        write_noise(&www.join("obj").join(format!("{i}.bin")), *size)?;
    }
    let pool_bytes: u64 = pool.iter().sum();

    let edge_conns = 2 * idle_n + 2 * a.active + 64;
    let edge = start_edge(dir.path(), &cert, &key, &www, edge_conns)?;
    let caddy = start_caddy(&a.caddy, dir.path(), &cert, &key, &www)?;

    let load_before = load_average();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(a.client_threads)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    // The idle connections live on a thread of their own: on the active clients' thread,
    // a busy moment left their one UDP socket undrained, the kernel dropped the servers'
    // PINGs there (counted by the report's "idle QUIC socket" rows), and idle QUIC
    // connections timed out for the bench's own stalls.
    let idle_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("bench-idle")
        .enable_all()
        .build()
        .context("cannot start the idle connections' runtime")?;
    let started = Instant::now();
    let mut figures = Vec::new();
    for (name, server) in [("gearbox", &edge), ("caddy", &caddy)] {
        let f = rt.block_on(measure_server(
            name,
            server,
            &a,
            idle_n,
            &cert,
            &spec,
            &pool,
            idle_rt.handle(),
        ))?;
        figures.push(f);
    }
    drop(idle_rt);
    let wall_s = started.elapsed().as_secs_f64();
    drop(edge);
    drop(caddy);
    print_report(
        &a,
        idle_n,
        edge_conns,
        &figures,
        &pool,
        pool_bytes,
        &load_before,
        limit_note,
        nofile,
        wall_s,
    );
    Ok(())
}

/// `objects` response sizes drawn from the workload (the first requests of `seed`),
/// ascending.
fn object_pool(spec: &WorkloadSpec, seed: u64, objects: usize) -> Vec<u64> {
    let mut sizes: Vec<u64> = spec
        .requests(seed.wrapping_add(1 << 32))
        .take(objects)
        .map(|r| r.response_bytes.max(1))
        .collect();
    sizes.sort_unstable();
    sizes
}

/// Index of the pool file closest in size to `bytes`.
fn closest(pool: &[u64], bytes: u64) -> usize {
    match pool.binary_search(&bytes) {
        Ok(i) => i,
        Err(0) => 0,
        Err(i) if i >= pool.len() => pool.len() - 1,
        Err(i) => {
            if bytes - pool[i - 1] <= pool[i] - bytes {
                i - 1
            } else {
                i
            }
        }
    }
}

/// Our edge with its limits as configured for the run: every default except the
/// connection caps (every bench connection comes from 127.0.0.1) and the idle timeout
/// (the idle connections must outlive the measurement; caddy's is 5 minutes).
fn start_edge(dir: &Path, cert: &Path, key: &Path, www: &Path, max_connections: usize) -> anyhow::Result<Server> {
    let port = free_port()?;
    let config = dir.join("edge.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{port}\"\ncert = {cert:?}\nkey = {key:?}\nstatic_dir = {www:?}\n\n\
             [limits]\nmax_connections = {max_connections}\nmax_connections_per_ip = {max_connections}\n\
             connection_idle_timeout_ms = 600000\n",
            cert = cert.display().to_string(),
            key = key.display().to_string(),
            www = www.display().to_string(),
        ),
    )?;
    let exe = std::env::current_exe().context("cannot find the gearbox binary")?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("edge").arg("--config").arg(&config).env("GEARBOX_LOG", "warn");
    Server::start("gearbox edge", cmd, port, dir.join("edge.log"))
}

#[allow(clippy::too_many_arguments)] // the run's pieces, each used
async fn measure_server(
    name: &str,
    server: &Server,
    a: &LoadBenchArgs,
    idle_n: usize,
    cert: &Path,
    spec: &WorkloadSpec,
    pool: &[u64],
    idle_rt: &tokio::runtime::Handle,
) -> anyhow::Result<ServerFigures> {
    // Opens an idle set on the idle runtime, where its tasks and its endpoint then run.
    let open_idle = |kind: IdleKind| {
        let (cert, parallel) = (cert.to_path_buf(), a.open_parallel);
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], server.port));
        let task = idle_rt.spawn(async move { idle::open(kind, addr, &cert, idle_n, parallel).await });
        async move { task.await.context("the idle connections' task failed")? }
    };
    let pid = server.pid();
    let mut f = ServerFigures {
        start: proc_mem(pid),
        ..ServerFigures::default()
    };
    eprintln!("bench: {name}: opening {idle_n} idle TLS/TCP (h2) connections");
    let tcp = open_idle(IdleKind::TcpH2).await?;
    settle().await;
    f.after_tcp = proc_mem(pid);
    eprintln!(
        "bench: {name}: {} open, {} failed in {:.1} s; server RSS {} MB, {} fds",
        tcp.opened(),
        tcp.failed,
        tcp.open_s,
        f.after_tcp.rss_kb / 1024,
        f.after_tcp.fds
    );
    eprintln!("bench: {name}: opening {idle_n} idle QUIC (h3) connections");
    let drops0 = udp_drops(server.port);
    let quic = open_idle(IdleKind::QuicH3).await?;
    settle().await;
    f.open_udp_drops = udp_drops(server.port).since(drops0);
    f.after_quic = proc_mem(pid);
    eprintln!(
        "bench: {name}: {} open, {} failed in {:.1} s; server RSS {} MB, {} fds",
        quic.opened(),
        quic.failed,
        quic.open_s,
        f.after_quic.rss_kb / 1024,
        f.after_quic.fds
    );
    (f.tcp_opened, f.tcp_failed, f.tcp_open_s) = (tcp.opened(), tcp.failed, tcp.open_s);
    (f.quic_opened, f.quic_failed, f.quic_open_s) = (quic.opened(), quic.failed, quic.open_s);
    for (what, set) in [("TCP", &tcp), ("QUIC", &quic)] {
        if let Some(e) = &set.first_error {
            f.open_errors.push(format!("{what}: {e}"));
        }
    }
    let idle_port = quic.udp_port.unwrap_or(0);
    for (pref, slot) in [(TransportPref::Tcp, 0), (TransportPref::Quic, 1)] {
        let idle0 = udp_drops(idle_port);
        let mut r = active(server, pref, a, cert, spec, pool).await?;
        r.idle_socket_drops = udp_drops(idle_port).since(idle0).0;
        eprintln!(
            "bench: {name} {pref}: {:.0} req/s, p50 {:.1} ms, p99 {:.1} ms, {} errors {:?}, UDP drops {:?} (cpu client {:.0}%, server {:.0}%); RSS {} MB, {} fds",
            r.requests_per_s,
            r.p50_ms,
            r.p99_ms,
            r.errors,
            r.error_kinds,
            r.udp_drops,
            r.client_cpu_pct,
            r.server_cpu_pct,
            r.mem.rss_kb / 1024,
            r.mem.fds
        );
        if slot == 0 {
            f.h2 = r;
        } else {
            f.h3 = r;
        }
    }
    f.alive_after = (tcp.alive(), quic.alive());
    f.closes = (tcp.closes(), quic.closes());
    drop(tcp);
    drop(quic);
    // Let the server see the closes before the next server's turn.
    tokio::time::sleep(Duration::from_secs(2)).await;
    Ok(f)
}

/// A moment for the server to finish the work of the last handshakes before it is read.
async fn settle() {
    tokio::time::sleep(Duration::from_secs(2)).await;
}

/// Latencies and counts of the active clients.
#[derive(Default)]
struct Tally {
    latencies_ms: Vec<f64>,
    errors: u64,
    /// Errors by kind (the client error's variant).
    kinds: std::collections::BTreeMap<String, u64>,
    first_error: Option<String>,
}

/// The kind of a client error, for the report: its variant's name, with what timed out
/// for a timeout.
fn error_kind(e: &gearbox_client::ClientError) -> String {
    if let gearbox_client::ClientError::Timeout { what, after, .. } = e {
        return format!("Timeout ({what}, {} s)", after.as_secs_f64());
    }
    let debug = format!("{e:?}");
    debug
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .next()
        .unwrap_or("error")
        .to_string()
}

/// `--active` clients, each with its own connection, replaying the workload's clicks
/// back to back for the warm-up and the measurement.
async fn active(
    server: &Server,
    pref: TransportPref,
    a: &LoadBenchArgs,
    cert: &Path,
    spec: &WorkloadSpec,
    pool: &[u64],
) -> anyhow::Result<Active> {
    let stop = Arc::new(AtomicBool::new(false));
    let counting = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let pool: Arc<Vec<u64>> = Arc::new(pool.to_vec());
    let spec = Arc::new(spec.clone());
    let base = Arc::new(server.url("/obj/"));
    let mut tasks = Vec::new();
    for i in 0..a.active {
        let client = Client::new(ClientConfig {
            trust: Trust::Roots(vec![cert.to_path_buf()]),
            request_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(30),
            quic_silence_floor: Duration::from_secs_f64(a.quic_silence_floor_s),
            ..ClientConfig::default()
        })?;
        let (stop, counting, done, tally, pool, spec, base) = (
            stop.clone(),
            counting.clone(),
            done.clone(),
            tally.clone(),
            pool.clone(),
            spec.clone(),
            base.clone(),
        );
        let seed = a.seed.wrapping_add(i as u64);
        // The clients start evenly over the warm-up: a thousand handshakes at one instant
        // would measure the burst, not the load.
        let start_after = Duration::from_secs_f64(a.warmup_s * i as f64 / a.active as f64);
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(start_after).await;
            let mut requests = spec.requests(seed).peekable();
            let mut mine = Tally::default();
            while !stop.load(Ordering::Relaxed) {
                let Some(first) = requests.next() else { break };
                let mut click = vec![first];
                while let Some(r) = requests.next_if(|r| r.click == click[0].click) {
                    click.push(r);
                }
                let gets = click.iter().map(|r| {
                    let i = closest(&pool, r.response_bytes);
                    let (url, want) = (format!("{base}{i}.bin"), pool[i]);
                    let client = &client;
                    async move {
                        let t0 = Instant::now();
                        let mut req = Request::get(url.clone(), pref);
                        req.discard_body = true;
                        let r = match client.request(req).await {
                            Ok(resp) if resp.status == 200 && resp.record.bytes == want => Ok(()),
                            Ok(resp) => Err((
                                "wrong response".to_string(),
                                format!(
                                    "GET {url}: status {} with {} bytes, expected 200 with {want}",
                                    resp.status, resp.record.bytes
                                ),
                            )),
                            Err(e) => Err((error_kind(&e), format!("GET {url}: {e}"))),
                        };
                        (r, t0.elapsed().as_secs_f64() * 1e3)
                    }
                });
                for (r, ms) in futures::future::join_all(gets).await {
                    let counted = counting.load(Ordering::Relaxed) && !stop.load(Ordering::Relaxed);
                    match r {
                        Ok(()) if counted => {
                            mine.latencies_ms.push(ms);
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(()) => {}
                        Err((kind, e)) => {
                            mine.errors += 1;
                            *mine.kinds.entry(kind).or_insert(0) += 1;
                            mine.first_error.get_or_insert(e);
                        }
                    }
                }
            }
            let mut t = tally.lock().unwrap_or_else(|p| p.into_inner());
            t.latencies_ms.append(&mut mine.latencies_ms);
            t.errors += mine.errors;
            for (k, n) in mine.kinds {
                *t.kinds.entry(k).or_insert(0) += n;
            }
            if t.first_error.is_none() {
                t.first_error = mine.first_error;
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs_f64(a.warmup_s)).await;
    let (c0, s0, d0) = (own_cpu_s(), server.cpu_s(), udp_drops(server.port));
    let (n0, w0) = (done.load(Ordering::Relaxed), Instant::now());
    counting.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs_f64(a.duration_s)).await;
    stop.store(true, Ordering::Relaxed);
    let (n1, wall) = (done.load(Ordering::Relaxed), w0.elapsed().as_secs_f64());
    let (c1, s1, udp) = (own_cpu_s(), server.cpu_s(), udp_drops(server.port).since(d0));
    let mem = proc_mem(server.pid());
    for t in tasks {
        let _ = t.await;
    }
    let mut t = std::mem::take(&mut *tally.lock().unwrap_or_else(|p| p.into_inner()));
    t.latencies_ms.sort_by(f64::total_cmp);
    let pct = |p| gearbox_dataplane::stats::percentile(&t.latencies_ms, p).unwrap_or(f64::NAN);
    Ok(Active {
        requests_per_s: (n1 - n0) as f64 / wall,
        p50_ms: pct(50.0),
        p99_ms: pct(99.0),
        errors: t.errors,
        error_kinds: std::mem::take(&mut t.kinds).into_iter().collect(),
        first_error: t.first_error.take(),
        udp_drops: udp,
        idle_socket_drops: 0,
        client_cpu_pct: (c1 - c0) / wall * 100.0,
        server_cpu_pct: (s1 - s0) / wall * 100.0,
        mem,
    })
}

fn mb(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

/// KiB per connection of the growth from `before` to `after`.
fn per_conn_kb(before: u64, after: u64, n: u64) -> f64 {
    if n == 0 {
        return f64::NAN;
    }
    after.saturating_sub(before) as f64 / n as f64
}

#[allow(clippy::too_many_arguments)]
fn print_report(
    a: &LoadBenchArgs,
    idle_n: usize,
    edge_conns: usize,
    figs: &[ServerFigures],
    pool: &[u64],
    pool_bytes: u64,
    load_before: &str,
    limit_note: Option<String>,
    nofile: u64,
    wall_s: f64,
) {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let (g, c) = (&figs[0], &figs[1]);
    println!("gearbox bench load: loopback, {cpus} CPUs shared by the load generator and the server under test");
    println!(
        "load average {load_before} at the start; run took {wall_s:.0} s; RLIMIT_NOFILE {nofile}; load generator: {} runtime thread(s)",
        a.client_threads
    );
    if let Some(n) = limit_note {
        println!("NOTE: {n}");
    }
    if cfg!(debug_assertions) {
        println!(
            "WARNING: a debug build; build with `cargo build --release -p gearbox-cli` for figures worth recording"
        );
    }
    println!(
        "idle: {idle_n} TLS/TCP (h2) + {idle_n} QUIC (h3) connections held; active: {} clients of `{}` (closed loop, no think time), \
         {} s after {} s warm-up (the clients start evenly over it), over h2 then h3, with the idle ones held; \
         the active clients give up a QUIC handshake or declare a path silent after {} s at the earliest",
        a.active, a.workload, a.duration_s, a.warmup_s, a.quic_silence_floor_s
    );
    println!(
        "objects: {} files, {} to {} bytes, {:.1} kB mean; gearbox edge limits: defaults but max_connections = max_connections_per_ip = {edge_conns}, connection_idle_timeout_ms = 600000\n",
        pool.len(),
        pool.first().copied().unwrap_or(0),
        pool.last().copied().unwrap_or(0),
        pool_bytes as f64 / pool.len().max(1) as f64 / 1e3
    );
    println!("{:<44} {:>14} {:>14} {:>14}", "", "gearbox", "caddy", "gearbox/caddy");
    let row = |name: &str, gv: f64, cv: f64, prec: usize| {
        println!("{name:<44} {gv:>14.prec$} {cv:>14.prec$} {:>14.2}", gv / cv);
    };
    let count = |name: &str, gv: u64, cv: u64| println!("{name:<44} {gv:>14} {cv:>14}");
    count("idle TCP connections opened", g.tcp_opened, c.tcp_opened);
    count("idle TCP connections failed", g.tcp_failed, c.tcp_failed);
    count("idle QUIC connections opened", g.quic_opened, c.quic_opened);
    count("idle QUIC connections failed", g.quic_failed, c.quic_failed);
    row("open time, TCP (s)", g.tcp_open_s, c.tcp_open_s, 1);
    row("open time, QUIC (s)", g.quic_open_s, c.quic_open_s, 1);
    row("RSS at start (MB)", mb(g.start.rss_kb), mb(c.start.rss_kb), 1);
    row(
        "RSS with idle TCP (MB)",
        mb(g.after_tcp.rss_kb),
        mb(c.after_tcp.rss_kb),
        1,
    );
    row(
        "RSS with idle TCP + QUIC (MB)",
        mb(g.after_quic.rss_kb),
        mb(c.after_quic.rss_kb),
        1,
    );
    row(
        "RSS per idle TCP connection (KiB)",
        per_conn_kb(g.start.rss_kb, g.after_tcp.rss_kb, g.tcp_opened),
        per_conn_kb(c.start.rss_kb, c.after_tcp.rss_kb, c.tcp_opened),
        1,
    );
    row(
        "RSS per idle QUIC connection (KiB)",
        per_conn_kb(g.after_tcp.rss_kb, g.after_quic.rss_kb, g.quic_opened),
        per_conn_kb(c.after_tcp.rss_kb, c.after_quic.rss_kb, c.quic_opened),
        1,
    );
    row(
        "fds with idle TCP + QUIC",
        g.after_quic.fds as f64,
        c.after_quic.fds as f64,
        0,
    );
    for (label, gx, cx) in [("h2", &g.h2, &c.h2), ("h3", &g.h3, &c.h3)] {
        row(
            &format!("{label} active: requests/s"),
            gx.requests_per_s,
            cx.requests_per_s,
            0,
        );
        row(&format!("{label} active: p50 latency (ms)"), gx.p50_ms, cx.p50_ms, 1);
        row(&format!("{label} active: p99 latency (ms)"), gx.p99_ms, cx.p99_ms, 1);
        count(&format!("{label} active: errors"), gx.errors, cx.errors);
        row(
            &format!("{label} active: server CPU (% of a core)"),
            gx.server_cpu_pct,
            cx.server_cpu_pct,
            0,
        );
        row(
            &format!("{label} active: client CPU (% of a core)"),
            gx.client_cpu_pct,
            cx.client_cpu_pct,
            0,
        );
        row(
            &format!("{label} active: RSS at the end (MB)"),
            mb(gx.mem.rss_kb),
            mb(cx.mem.rss_kb),
            1,
        );
        row(
            &format!("{label} active: fds at the end"),
            gx.mem.fds as f64,
            cx.mem.fds as f64,
            0,
        );
    }
    row("peak RSS, whole run (MB)", mb(g.h3.mem.hwm_kb), mb(c.h3.mem.hwm_kb), 1);
    count("idle TCP still open at the end", g.alive_after.0, c.alive_after.0);
    count("idle QUIC still open at the end", g.alive_after.1, c.alive_after.1);
    count(
        "UDP drops at the server, idle QUIC opening",
        g.open_udp_drops.0,
        c.open_udp_drops.0,
    );
    count(
        "UDP drops elsewhere, idle QUIC opening",
        g.open_udp_drops.1,
        c.open_udp_drops.1,
    );
    for (label, gx, cx) in [("h2", &g.h2, &c.h2), ("h3", &g.h3, &c.h3)] {
        count(
            &format!("UDP drops at the server, {label} active"),
            gx.udp_drops.0,
            cx.udp_drops.0,
        );
        count(
            &format!("UDP drops at the idle QUIC socket, {label} active"),
            gx.idle_socket_drops,
            cx.idle_socket_drops,
        );
        count(
            &format!("UDP drops elsewhere (idle incl.), {label} active"),
            gx.udp_drops.1,
            cx.udp_drops.1,
        );
    }
    println!();
    for (name, f) in [("gearbox", g), ("caddy", c)] {
        for e in &f.open_errors {
            println!("{name}: first idle-connection failure, {e}");
        }
        for (what, closes) in [("TCP", &f.closes.0), ("QUIC", &f.closes.1)] {
            if !closes.is_empty() {
                let by: Vec<String> = closes.iter().map(|(k, n)| format!("{n} {k}")).collect();
                println!("{name}: idle {what} connections lost before the end: {}", by.join("; "));
            }
        }
        for (label, x) in [("h2", &f.h2), ("h3", &f.h3)] {
            if let Some(e) = &x.first_error {
                let kinds: Vec<String> = x.error_kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
                println!("{name} {label}: errors by kind: {}; the first: {e}", kinds.join(", "));
            }
        }
    }
    let client_bound: Vec<String> = [
        ("gearbox h2", &g.h2),
        ("gearbox h3", &g.h3),
        ("caddy h2", &c.h2),
        ("caddy h3", &c.h3),
    ]
    .iter()
    .filter(|(_, x)| x.client_cpu_pct >= x.server_cpu_pct)
    .map(|(n, _)| n.to_string())
    .collect();
    if client_bound.is_empty() {
        println!("The server used more CPU than the load generator in every active measurement.");
    } else {
        println!(
            "CLIENT-BOUND: the load generator used at least as much CPU as the server in: {}.",
            client_bound.join(", ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_size_maps_to_the_closest_file_of_the_pool() {
        let pool = [100, 1000, 5000];
        assert_eq!(closest(&pool, 1), 0);
        assert_eq!(closest(&pool, 540), 0);
        assert_eq!(closest(&pool, 560), 1);
        assert_eq!(closest(&pool, 5000), 2);
        assert_eq!(closest(&pool, 9_000_000), 2);
    }

    #[test]
    fn the_pool_follows_the_workload_sizes() {
        let spec = WorkloadSpec::builtin("app").unwrap();
        let pool = object_pool(&spec, 1, 200);
        assert_eq!(pool.len(), 200);
        assert!(pool.windows(2).all(|w| w[0] <= w[1]));
        // Fig. 5b of the app workload: 70% of responses under 10 kB.
        let small = pool.iter().filter(|&&b| b < 10_000).count();
        assert!((100..180).contains(&small), "{small} of 200 under 10 kB");
    }

    #[test]
    fn an_error_is_counted_by_its_kind() {
        let e = gearbox_client::ClientError::Timeout {
            what: "QUIC handshake",
            addr: "127.0.0.1:1".into(),
            after: Duration::from_secs(2),
        };
        assert_eq!(error_kind(&e), "Timeout (QUIC handshake, 2 s)");
        let e = gearbox_client::ClientError::QuicSilent {
            addr: "127.0.0.1:1".into(),
            silent_ms: 1000,
        };
        assert_eq!(error_kind(&e), "QuicSilent");
    }

    #[test]
    fn proc_mem_reads_this_process() {
        let m = proc_mem(std::process::id());
        assert!(m.rss_kb > 0 && m.hwm_kb >= m.rss_kb && m.fds >= 3, "{m:?}");
    }
}
