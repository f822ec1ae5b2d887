//! The client's side of FlexHTTP (§3.3-3.5) for `gearbox get --page` and `gearbox load
//! --workload page`, with `--http-version auto`:
//!
//! - **Measurement against the agent.** The client asks the agent for a session
//!   (`POST /v1/flexhttp/probe`) and runs its half of the probe exchange: it echoes the agent's
//!   UDP probes and TCP pings and drains the agent's bulk transfer; the agent measures RTT, loss and
//!   capacity on its side and keeps the client's window, which the client then reads
//!   (`GET /v1/flexhttp/network`). The client half is only an echo — every figure is computed by
//!   the agent (python/gearbox/flexhttp/probe.py) — so the Rust client speaks the probe protocol
//!   itself (~80 lines, [`run_probe`]) rather than starting Python or duplicating the measurement;
//!   the Python `run_probe` is the same echo for the lab's tools. Rejected: spawning `gearbox agent
//!   measure` from the client (a Python runtime in every client, and a second process per load).
//! - **The global forest**, versioned: the agent is a control plane, so its `flexhttp` gear is
//!   polled with the data plane's [`PolicyPoller`] (sha256 checked, `STATE/policies/flexhttp/vN`,
//!   `current` swapped atomically); the forest's folder carries the cluster centres.
//! - **Cache and local pool** in `STATE/` (`cache.json`, `local-pool.jsonl`, `network.json`):
//!   kept between runs; entries older than H dropped; labelled by the nearest centre (or the
//!   client's own evidence) and used to fine-tune the forest (gearbox_gears::http_version_local).
//! - **Uploads**: each load's entry is appended to a [`Spool`] (`STATE/spool`) and sent to
//!   `POST /v1/flexhttp/traces` with the token; an unreachable agent leaves it spooled.
//!
//! An unreachable agent costs nothing kept: the last forest on disk, the cache, the last
//! measurement (its age said) and the spool all stay, and the next run with the agent up
//! catches up.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use bytes::Bytes;
use gearbox_client::TransportPref;
use gearbox_dataplane::control::{current_version, ControlClient, ControlConfig, PolicyPoller, Spool, Uploader};
use gearbox_gears::http_version::{FlexHttp, HttpVersion, NetworkFeatures, PageFeatures};
use gearbox_gears::http_version_local::{label_entries, Clusters, LocalEntry, LocalForest, LocalPool};
use gearbox_workload::{ObjectKind, Page};

/// The gear name of the agent's forest in its registry.
pub const GEAR: &str = "flexhttp";
const MAGIC: &[u8; 4] = b"GBXP";

/// Flags of the client's FlexHTTP state and agent (shared by `get` and `load`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct AgentArgs {
    /// The FlexHTTP agent (https://HOST:PORT, `gearbox agent serve`) that `--http-version auto`
    /// measures the network against, downloads the global forest from and uploads trace entries
    /// to. Needs --agent-token, --agent-ca and --flexhttp-state.
    #[arg(long, value_name = "URL")]
    pub agent: Option<String>,
    /// The agent's bearer token (`gearbox agent token create --role client`).
    #[arg(long, value_name = "TOKEN")]
    pub agent_token: Option<String>,
    /// PEM file the agent's certificate is checked against.
    #[arg(long, value_name = "FILE")]
    pub agent_ca: Option<PathBuf>,
    /// Folder of the client's FlexHTTP state, kept between runs: the (URL, hour-of-week) cache,
    /// the local trace pool, the downloaded forests, the upload spool, the last measurement.
    #[arg(long, value_name = "DIR")]
    pub flexhttp_state: Option<PathBuf>,
    /// Reservation time H of the local trace pool, hours: older entries are dropped (§3.5.2).
    #[arg(long, value_name = "H", default_value_t = gearbox_gears::http_version_local::DEFAULT_POOL_HOURS)]
    pub pool_hours: f64,
    /// Measure against the agent again only when the last measurement is older than this,
    /// seconds (the agent keeps each client's window t, §3.5.1); 0: every run.
    #[arg(long, value_name = "S", default_value_t = 60.0)]
    pub measure_every_s: f64,
}

impl AgentArgs {
    /// The flags make sense together (checked before anything is sent).
    pub fn check(&self) -> anyhow::Result<()> {
        if self.agent.is_some() && self.flexhttp_state.is_none() {
            anyhow::bail!(
                "--agent needs --flexhttp-state DIR (where the forest, cache, local pool and spool are kept)"
            );
        }
        if self.agent.is_none() {
            for (flag, set) in [
                ("--agent-token", self.agent_token.is_some()),
                ("--agent-ca", self.agent_ca.is_some()),
            ] {
                anyhow::ensure!(!set, "{flag} needs --agent URL");
            }
        }
        if !(self.measure_every_s.is_finite() && self.measure_every_s >= 0.0) {
            anyhow::bail!(
                "--measure-every-s must be a number of seconds >= 0, got {}",
                self.measure_every_s
            );
        }
        if !(self.pool_hours.is_finite() && self.pool_hours > 0.0) {
            anyhow::bail!(
                "--pool-hours must be a positive number of hours, got {}",
                self.pool_hours
            );
        }
        Ok(())
    }
}

/// The network measurement kept on disk, with when it was made.
#[derive(serde::Serialize, serde::Deserialize)]
struct SavedNetwork {
    #[serde(flatten)]
    network: NetworkFeatures,
    measured_unix_s: f64,
}

fn now_unix_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Table 1's page features from a page graph (counts and bytes by kind).
pub fn page_features(page: &Page) -> PageFeatures {
    let mut f = PageFeatures {
        all_files: 0.0,
        all_bytes: 0.0,
        css_files: 0.0,
        css_bytes: 0.0,
        js_files: 0.0,
        js_bytes: 0.0,
        image_files: 0.0,
        image_bytes: 0.0,
    };
    for o in &page.objects {
        let bytes = o.size_bytes as f64;
        f.all_files += 1.0;
        f.all_bytes += bytes;
        match o.kind {
            ObjectKind::Css => (f.css_files, f.css_bytes) = (f.css_files + 1.0, f.css_bytes + bytes),
            ObjectKind::Js => (f.js_files, f.js_bytes) = (f.js_files + 1.0, f.js_bytes + bytes),
            ObjectKind::Image => (f.image_files, f.image_bytes) = (f.image_files + 1.0, f.image_bytes + bytes),
            _ => {}
        }
    }
    f
}

/// The client's FlexHTTP selector with its state: `--http-version auto`.
pub struct FlexClient {
    gear: FlexHttp,
    network: Option<NetworkFeatures>,
    state: Option<PathBuf>,
    pool: LocalPool,
    uploader: Option<Arc<Uploader>>,
    /// What the setup did, one line each (printed to stderr by the commands).
    pub notes: Vec<String>,
    /// The forest's version in use, when it came from the agent.
    pub forest_version: Option<u64>,
}

impl FlexClient {
    /// Sets the selector up: with `--agent`, a poll for the forest and a measurement (each
    /// falling back to what is on disk), else the forest file and the network file given.
    pub async fn open(
        args: &AgentArgs,
        model: &Path,
        network_file: Option<&Path>,
        seed: u64,
    ) -> anyhow::Result<FlexClient> {
        let mut notes = Vec::new();
        args.check()?;
        let state = args.flexhttp_state.clone();
        if let Some(dir) = &state {
            std::fs::create_dir_all(dir).with_context(|| format!("--flexhttp-state {}", dir.display()))?;
        }
        let mut network = match network_file {
            None => None,
            Some(path) => {
                let text =
                    std::fs::read_to_string(path).with_context(|| format!("--agent-network {}", path.display()))?;
                Some(serde_json::from_str(&text).with_context(|| {
                    format!(
                        "--agent-network {}: expected the JSON of `gearbox agent measure` (rtt_ms, loss_rate, capacity_mbps)",
                        path.display()
                    )
                })?)
            }
        };
        let mut model_path = model.to_path_buf();
        let mut forest_version = None;
        let mut uploader = None;
        if let (Some(url), Some(dir)) = (&args.agent, &state) {
            let config = ControlConfig {
                url: url.clone(),
                token: args.agent_token.clone().unwrap_or_default(),
                ca: args.agent_ca.clone().unwrap_or_default(),
                spool: dir.join("spool"),
                policies: Some(dir.join("policies")),
                timeout_ms: 10_000,
                ..ControlConfig::default()
            };
            config
                .validate()
                .map_err(|e| anyhow!("{e} (flags: --agent URL --agent-token T --agent-ca FILE)"))?;
            // The forest: one poll, else the last good copy on disk.
            let mut poller = PolicyPoller::new(ControlClient::new(&config)?, &dir.join("policies"), None)?;
            poller.on(
                GEAR,
                Box::new(|folder: &Path| {
                    if FlexHttp::load(folder.join("forest.json"), 0).has_model() {
                        Ok(())
                    } else {
                        Err("forest.json is not a usable forest".to_string())
                    }
                }),
            );
            // The last good copy first, so that the poll only fetches a newer version.
            let (_, failed) = poller.load_from_disk();
            for f in failed {
                notes.push(format!("the forest on disk cannot be used: {f}"));
            }
            match poller.poll_once().await {
                Ok(o) => {
                    for (_, v) in &o.swapped {
                        notes.push(format!("downloaded the global forest v{v} from the agent"));
                    }
                    for r in &o.refused {
                        notes.push(format!("refused a forest from the agent: {r}"));
                    }
                }
                Err(e) => notes.push(format!(
                    "agent unreachable for the forest ({e}); using the last one on disk"
                )),
            }
            if let Some((v, folder)) = current_version(&dir.join("policies"), GEAR) {
                model_path = folder.join("forest.json");
                forest_version = Some(v);
                notes.push(format!("forest v{v} ({})", model_path.display()));
            } else {
                notes.push(format!(
                    "no forest from the agent yet; {} is used if it exists",
                    model_path.display()
                ));
            }
            // The network: the last measurement while it is recent, else a new one, else the last one.
            let saved: Option<SavedNetwork> = std::fs::read_to_string(dir.join("network.json"))
                .ok()
                .and_then(|t| serde_json::from_str(&t).ok());
            let recent = saved
                .as_ref()
                .filter(|s| network.is_none() && now_unix_s() - s.measured_unix_s < args.measure_every_s);
            let client = ControlClient::new(&config)?;
            let measured = match recent {
                Some(s) => {
                    notes.push(format!(
                        "network measured {:.0} s ago (rtt {:.0} ms, loss {:.2}%, capacity {:.2} Mbit/s), kept",
                        now_unix_s() - s.measured_unix_s,
                        s.network.rtt_ms,
                        s.network.loss_rate * 100.0,
                        s.network.capacity_mbps
                    ));
                    network = Some(s.network);
                    None
                }
                None => Some(measure(&client, url).await),
            };
            match measured {
                None => {}
                Some(Ok(n)) => {
                    notes.push(format!(
                        "measured against the agent: rtt {:.0} ms, loss {:.2}%, capacity {:.2} Mbit/s",
                        n.rtt_ms,
                        n.loss_rate * 100.0,
                        n.capacity_mbps
                    ));
                    let saved = SavedNetwork {
                        network: n,
                        measured_unix_s: now_unix_s(),
                    };
                    std::fs::write(dir.join("network.json"), serde_json::to_string(&saved)?)?;
                    network = Some(n);
                }
                Some(Err(e)) => match saved {
                    Some(s) if network.is_none() => {
                        notes.push(format!(
                            "measurement failed ({e}); using the last one, {:.0} s old",
                            now_unix_s() - s.measured_unix_s
                        ));
                        network = Some(s.network);
                    }
                    _ => notes.push(format!("measurement failed ({e})")),
                },
            }
            let spool = Arc::new(Spool::open(&dir.join("spool"), 1000, 64 << 20)?);
            let up = Uploader::new(spool, ControlClient::new(&config)?, Duration::from_secs(1))
                .with_path("/v1/flexhttp/traces");
            uploader = Some(Arc::new(up));
        }
        let mut gear = FlexHttp::load(&model_path, seed);
        let mut pool = LocalPool::default();
        if let Some(dir) = &state {
            let n = gear.load_cache(&dir.join("cache.json")).map_err(|e| anyhow!(e))?;
            if n > 0 {
                notes.push(format!("cache: {n} entries kept"));
            }
            pool = LocalPool::load(&dir.join("local-pool.jsonl"))?;
            let dropped = pool.drop_older_than(args.pool_hours, now_unix_s());
            if dropped > 0 {
                notes.push(format!(
                    "local pool: {dropped} entries older than {} h dropped",
                    args.pool_hours
                ));
            }
            let clusters_path = model_path.with_file_name("clusters.json");
            if !pool.entries.is_empty() && clusters_path.is_file() {
                let clusters = Clusters::load(&clusters_path)?;
                let labelled = label_entries(&pool, &clusters);
                if let Some(local) = LocalForest::train(&labelled, seed) {
                    notes.push(format!(
                        "fine-tuned the forest with {} labelled local entries ({} by local evidence; weight {:.2})",
                        local.entries, local.by_local_evidence, local.weight
                    ));
                    gear.set_local(Some(local));
                }
            }
        }
        Ok(FlexClient {
            gear,
            network,
            state,
            pool,
            uploader,
            notes,
            forest_version,
        })
    }

    /// The version of this load and why (§3.4).
    pub fn choose(&mut self, url: &str, page: &Page) -> (HttpVersion, String) {
        let f = page_features(page);
        let c = self
            .gear
            .choose(url, now_unix_s(), self.network.as_ref().map(|n| (n, &f)));
        let reason = match self.forest_version {
            Some(v) => format!("{} [forest v{v}]", c.reason),
            None => c.reason,
        };
        (c.version, reason)
    }

    /// A finished load: a local entry (kept, and spooled for the agent when there is one).
    pub fn observe(&mut self, page: &Page, version: HttpVersion, load_ms: f64) {
        let Some(network) = self.network else {
            return;
        };
        let entry = LocalEntry {
            time_unix_ms: now_unix_s() * 1000.0,
            http_version: version,
            speed_index_ms: load_ms,
            network,
            page: page_features(page),
        };
        if let Some(up) = &self.uploader {
            let line = serde_json::to_string(&entry).expect("entries serialise");
            if let Err(e) = up.spool().append(&line) {
                tracing::warn!(error = %e, "flexhttp: cannot spool a trace entry");
            }
        }
        self.pool.entries.push(entry);
    }

    /// Sends spooled entries in the background every second while a long run goes on (`gearbox
    /// load`); call inside the runtime, abort the handle before [`FlexClient::close`].
    pub fn spawn_uploads(&self) -> Option<tokio::task::JoinHandle<()>> {
        self.uploader.as_ref().map(Uploader::spawn)
    }

    /// Saves the cache and the local pool and sends what is spooled (for up to `grace`);
    /// returns a line saying what was uploaded or left spooled.
    pub async fn close(&mut self, grace: Duration) -> anyhow::Result<Option<String>> {
        if let Some(dir) = &self.state {
            self.gear
                .save_cache(&dir.join("cache.json"))
                .with_context(|| format!("{}", dir.join("cache.json").display()))?;
            self.pool.save(&dir.join("local-pool.jsonl"))?;
        }
        let Some(up) = self.uploader.take() else {
            return Ok(None);
        };
        let sent = up.finish(grace).await;
        let stored = up.stats.stored_records.load(std::sync::atomic::Ordering::Relaxed);
        Ok(Some(if sent {
            format!("uploaded {stored} trace entries to the agent")
        } else {
            format!(
                "agent unreachable: {} batches kept in the spool for the next run ({stored} uploaded)",
                up.spool().batches().len()
            )
        }))
    }

    /// The selector as the page replay's chooser (`gearbox load`), sharing this client.
    pub fn chooser(me: Arc<Mutex<FlexClient>>) -> gearbox_client::replay::PageVersionChooser {
        let observer = me.clone();
        gearbox_client::replay::PageVersionChooser {
            name: "flexhttp".to_string(),
            choose: Arc::new(move |url, page| {
                let (v, reason) = me.lock().unwrap_or_else(|p| p.into_inner()).choose(url, page);
                (transport_of(v), reason)
            }),
            observe: Some(Arc::new(move |_url, page, transport, ms| {
                let v = if transport == TransportPref::Quic {
                    HttpVersion::H3
                } else {
                    HttpVersion::H2
                };
                observer.lock().unwrap_or_else(|p| p.into_inner()).observe(page, v, ms);
            })),
        }
    }
}

/// h2 travels over TCP (ALPN h2), h3 over QUIC.
pub fn transport_of(v: HttpVersion) -> TransportPref {
    match v {
        HttpVersion::H2 => TransportPref::Tcp,
        HttpVersion::H3 => TransportPref::Quic,
    }
}

/// The host of an `https://HOST:PORT` URL (brackets of an IPv6 literal removed).
fn url_host(url: &str) -> anyhow::Result<String> {
    let uri: http::Uri = url.parse().map_err(|e| anyhow!("--agent {url:?}: not a URL ({e})"))?;
    Ok(uri
        .host()
        .ok_or_else(|| anyhow!("--agent {url:?}: no host"))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string())
}

/// One measurement against the agent; its window's features once the agent has this one.
pub async fn measure(client: &ControlClient, url: &str) -> anyhow::Result<NetworkFeatures> {
    let reply = client
        .request(http::Method::POST, "/v1/flexhttp/probe", &[], Bytes::new())
        .await?;
    if reply.status != 200 {
        anyhow::bail!("POST /v1/flexhttp/probe: {} {}", reply.status, reply.text());
    }
    let s: serde_json::Value = serde_json::from_slice(&reply.body).context("the probe session's answer")?;
    let session = s["session"]
        .as_str()
        .ok_or_else(|| anyhow!("the probe session's answer lacks session"))?
        .to_string();
    let port = s["port"]
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .ok_or_else(|| anyhow!("the probe session's answer lacks port"))?;
    let host = url_host(url)?;
    let sid = session.clone();
    tokio::task::spawn_blocking(move || run_probe(&host, port, &sid, Duration::from_secs(30)))
        .await
        .map_err(|e| anyhow!("probe task: {e}"))??;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let r = client
            .request(http::Method::GET, "/v1/flexhttp/network", &[], Bytes::new())
            .await?;
        if r.status == 200 {
            let w: serde_json::Value = serde_json::from_slice(&r.body).context("the network's answer")?;
            if w["latest"]["session"].as_str() == Some(session.as_str()) {
                return serde_json::from_value(w)
                    .context("the network's answer lacks rtt_ms, loss_rate or capacity_mbps");
            }
        } else if r.status != 404 {
            anyhow::bail!("GET /v1/flexhttp/network: {} {}", r.status, r.text());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("measurement {session} did not finish in 60 s")
}

/// The client's half of one probe exchange (python/gearbox/flexhttp/probe.py's protocol): the
/// UDP part (hello, then echo each probe of the session until a second passes without one),
/// then the TCP part (session, echo each ping, drain the bulk transfer to its end).
pub fn run_probe(host: &str, port: u16, session_hex: &str, timeout: Duration) -> anyhow::Result<()> {
    let sid: Vec<u8> = (0..session_hex.len() / 2)
        .map(|i| u8::from_str_radix(&session_hex[2 * i..2 * i + 2], 16))
        .collect::<Result<_, _>>()
        .map_err(|_| anyhow!("probe session {session_hex:?} is not hex"))?;
    anyhow::ensure!(sid.len() == 16, "probe session {session_hex:?} is not 16 bytes");
    let addr = (host, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| anyhow!("{host}:{port}: no address"))?;
    let packet = |kind: u8, seq: u32| {
        let mut p = Vec::with_capacity(25);
        p.extend_from_slice(MAGIC);
        p.extend_from_slice(&sid);
        p.push(kind);
        p.extend_from_slice(&seq.to_be_bytes());
        p
    };
    // UDP: hello until the first probe comes (a lost hello is sent again), then echo.
    let bind = if addr.is_ipv6() { "[::]:0" } else { "0.0.0.0:0" };
    let udp = UdpSocket::bind(bind)?;
    udp.set_read_timeout(Some(Duration::from_millis(200)))?;
    let deadline = Instant::now() + timeout;
    let mut last_probe: Option<Instant> = None;
    let mut next_hello = Instant::now();
    let mut buf = [0u8; 2048];
    while Instant::now() < deadline {
        if last_probe.is_none() && Instant::now() >= next_hello {
            udp.send_to(&packet(b'H', 0), addr)?;
            next_hello = Instant::now() + Duration::from_millis(500);
        }
        match udp.recv_from(&mut buf) {
            Ok((n, _)) => {
                if n >= 25 && &buf[..4] == MAGIC && buf[4..20] == sid[..] && buf[20] == b'P' {
                    last_probe = Some(Instant::now());
                    let seq = u32::from_be_bytes([buf[21], buf[22], buf[23], buf[24]]);
                    udp.send_to(&packet(b'E', seq), addr)?;
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                if last_probe.is_some_and(|t| t.elapsed() > Duration::from_secs(1)) {
                    break;
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    // TCP: the session, then echo pings until the bulk data starts, then drain it.
    let mut tcp = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| anyhow!("probe TCP exchange with {host}:{port} failed: {e}"))?;
    tcp.set_nodelay(true)?;
    tcp.set_read_timeout(Some(timeout))?;
    tcp.write_all(MAGIC)?;
    tcp.write_all(&sid)?;
    let mut kind = [0u8; 1];
    loop {
        if tcp.read(&mut kind)? == 0 {
            return Ok(());
        }
        if kind[0] == b'P' {
            let mut seq = [0u8; 4];
            tcp.read_exact(&mut seq)?;
            tcp.write_all(&[b'P', seq[0], seq[1], seq[2], seq[3]])?;
        } else {
            let mut sink = vec![0u8; 1 << 16];
            while tcp.read(&mut sink)? > 0 {}
            return Ok(());
        }
    }
}
