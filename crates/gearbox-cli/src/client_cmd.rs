//! `gearbox get` and `gearbox load`: the client at the command line.
//!
//! `get` fetches one URL and prints its telemetry record, so a single measurement is one
//! command and its output is what learners read. `load` replays a workload (seeded, from
//! `gearbox-workload`) against an edge at the workload's send times and summarises the
//! request completion times per protocol; the replay and its statistics are the library's
//! (`gearbox_client::replay`), this module only reads flags. Both write the same
//! `ClientRecord` lines as the library (schema: docs/telemetry.md; usage: docs/client.md).

use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use gearbox_cc::{QuicCc, TcpCcSetting};
use gearbox_client::multipath::check_local_addrs;
use gearbox_client::replay::{replay, replay_page, PathScheduling, RecordLog, RecordingGear, ReplayOptions, Summary};
use gearbox_client::{
    Bytes, Client, ClientConfig, ClientError, HedgeRule, Method, Request, StaticTransport, TransportGear,
    TransportPref, Trust,
};
use gearbox_dataplane::control::{ControlClient, ControlConfig, PolicyPoller};
use gearbox_dataplane::telemetry::TelemetrySink;
use gearbox_gears::path::{scheduler as path_scheduler, SailfishGear, SCHEDULERS};
use gearbox_gears::transport::swap::version_of;
use gearbox_gears::transport::{
    transport_gear, Mode, MonitorSlot, SwappableWiseTrans, TransportConfig, WISETRANS_GEAR,
};
use gearbox_workload::{Limit, Pattern, WorkloadSpec};

use crate::control_args::ControlArgs;
use crate::flexhttp_client::{transport_of, AgentArgs, FlexClient};

/// Where `get` looks for the system's CA bundle when neither `--ca` nor `--insecure` is given.
const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Transport on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Proto {
    /// TLS over TCP offering h2 and http/1.1 (HTTP/2 unless the server only speaks HTTP/1.1).
    Tcp,
    /// TLS over TCP offering only http/1.1.
    H1,
    /// QUIC with HTTP/3.
    Quic,
    /// Let the transport gear (`--gear`) choose TCP or QUIC per request.
    Auto,
}

impl From<Proto> for TransportPref {
    fn from(p: Proto) -> Self {
        match p {
            Proto::Tcp => TransportPref::Tcp,
            Proto::H1 => TransportPref::H1,
            Proto::Quic => TransportPref::Quic,
            Proto::Auto => TransportPref::Auto,
        }
    }
}

fn parse_quic_cc(s: &str) -> Result<QuicCc, String> {
    s.parse().map_err(|e: gearbox_cc::UnknownCc| e.to_string())
}

fn parse_tcp_cc(s: &str) -> Result<TcpCcSetting, String> {
    s.parse().map_err(|e: gearbox_cc::UnknownCc| e.to_string())
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    s.parse()
        .map_err(|e: gearbox_gears::transport::UnknownMode| e.to_string())
}

/// The transport gear of `--proto auto` requests, shared by `get` and `load`.
#[derive(Debug, clap::Args)]
pub struct GearArgs {
    /// Transport gear for `--proto auto`: tcp, quic, wisetrans-v1, wisetrans-v2, strawman,
    /// mlp (WiseTrans-v1 with Table II's MLP classifier as its monitor) or race (default
    /// wisetrans-v2; giving it implies `--proto auto`). See docs/wisetrans.md.
    #[arg(long, value_name = "MODE", value_parser = parse_mode)]
    pub gear: Option<Mode>,
    /// Directory with the gear's models: tcp.json, quic.json (+ .meta.json sidecars),
    /// mlp-tcp.json, mlp-quic.json (+ sidecars, for mlp), strawman.json. Without it
    /// WiseTrans and mlp choose TCP (and say so in each record).
    #[arg(long, value_name = "DIR")]
    pub model_dir: Option<PathBuf>,
    /// TOML file with the gear's settings (`TransportConfig`, docs/wisetrans.md), e.g.
    /// `rollback = false`; fields it leaves out keep their defaults.
    #[arg(long, value_name = "FILE")]
    pub gear_config: Option<PathBuf>,
}

/// A transport gear, and where its polled models go when it takes them from the control
/// plane.
type ResolvedGear = (TransportPref, Box<dyn TransportGear>, Option<MonitorSlot>);

impl GearArgs {
    /// The transport of every request and the gear that decides `auto` ones; with
    /// `polled` (`--policies`), a gear whose models the control plane's registry replaces
    /// while it runs (docs/control.md, "The client's policies").
    fn resolve(&self, proto: Option<Proto>, polled: bool) -> anyhow::Result<ResolvedGear> {
        let transport = match (proto, self.gear) {
            (Some(p), Some(mode)) if p != Proto::Auto => {
                let name = TransportPref::from(p).name();
                bail!("--gear {mode} decides only `--proto auto` requests; drop --proto {name} or use --proto auto")
            }
            (Some(p), _) => TransportPref::from(p),
            (None, Some(_)) => TransportPref::Auto,
            (None, None) => TransportPref::Tcp,
        };
        let config = match &self.gear_config {
            Some(path) => TransportConfig::from_file(path)?,
            None => TransportConfig::default(),
        };
        let mode = self.gear.unwrap_or(Mode::WiseTransV2);
        if polled {
            if transport != TransportPref::Auto {
                bail!("--policies polls the transport gear's models, which decide only `--proto auto` requests; drop --policies or use --proto auto");
            }
            // Started from --model-dir (or without models); the last good copy on disk
            // replaces it at the first decision (client_poller).
            let Some((gear, slot)) = SwappableWiseTrans::new(mode, self.model_dir.as_deref(), None, config) else {
                bail!("--policies: the transport gear {mode} runs no model to poll; wisetrans-v1, wisetrans-v2 and mlp do");
            };
            return Ok((transport, Box::new(gear), Some(slot)));
        }
        let gear: Box<dyn TransportGear> = if transport == TransportPref::Auto {
            transport_gear(mode, self.model_dir.as_deref(), config)
        } else {
            Box::new(StaticTransport::new(transport))
        };
        Ok((transport, gear, None))
    }
}

/// Connection settings shared by `get` and `load`.
#[derive(Debug, clap::Args)]
pub struct ConnArgs {
    /// Trust this certificate or CA (PEM); repeat for several. Default: the system CA bundle.
    #[arg(long, value_name = "FILE", conflicts_with = "insecure")]
    pub ca: Vec<PathBuf>,
    /// Accept any server certificate (lab runs against throwaway certificates only).
    #[arg(long)]
    pub insecure: bool,
    /// Bind connections to this local address; repeat for several paths (multipath).
    #[arg(long = "local-addr", value_name = "IP")]
    pub local_addr: Vec<IpAddr>,
    /// QUIC congestion control: newreno, cubic, bbr, copa, westwood, vivace (the suite's, switchable) or quinn-newreno, quinn-cubic, quinn-bbr (quinn's built-ins).
    #[arg(long, value_name = "CC", value_parser = parse_quic_cc, default_value = "cubic")]
    pub quic_cc: QuicCc,
    /// QUIC initial window in packets of 1200 bytes (default: quinn's RFC 9002 window).
    #[arg(long, value_name = "PACKETS")]
    pub quic_iw: Option<u32>,
    /// Kernel TCP congestion control set on each socket: reno, cubic, bbr, westwood (gearbox's BPF Westwood+, registered on first use; needs root) or system (the host's default) (default: cubic, as QUIC's).
    #[arg(long, value_name = "CC", value_parser = parse_tcp_cc)]
    pub tcp_cc: Option<TcpCcSetting>,
    /// Open TCP connections over Multipath TCP (the kernel's; needs net.mptcp.enabled = 1): the kernel adds subflows over the endpoints set with `ip mptcp endpoint` and schedules packets on them.
    #[arg(long)]
    pub mptcp: bool,
    /// Bound on opening a connection (TCP+TLS or QUIC handshake), seconds.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub connect_timeout_s: f64,
    /// Bound on each request, connection setup included, seconds.
    #[arg(long, value_name = "S", default_value_t = 60.0)]
    pub timeout_s: f64,
    /// No QUIC handshake is given up and no QUIC connection declared silent sooner than
    /// this, seconds (default: the client's 1 s; for a handshake 2 s, two of QUIC's initial
    /// probe timeouts, when the request can fall back to TCP, and 10 s, Chromium's handshake
    /// limit, when it cannot: `--proto quic`, a page over HTTP/3).
    #[arg(long, value_name = "S")]
    pub quic_silence_floor_s: Option<f64>,
    /// Hedge slow QUIC requests over TCP: off, on (the delay is 2x the larger of TCP's
    /// and QUIC's recent median completion times at the origin, at least 300 ms) or a
    /// factor other than 2. Only
    /// idempotent `--proto auto` requests the gear sends over QUIC; fixed transports and
    /// the race never hedge (docs/client.md, "Hedging a slow QUIC request").
    #[arg(long, value_name = "off|on|FACTOR", value_parser = parse_hedge, default_value = "off")]
    pub hedge: HedgeSetting,
}

/// `--hedge`: off, or the rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HedgeSetting(pub Option<HedgeRule>);

fn parse_hedge(s: &str) -> Result<HedgeSetting, String> {
    match s {
        "off" => Ok(HedgeSetting(None)),
        "on" => Ok(HedgeSetting(Some(HedgeRule::default()))),
        _ => s
            .parse::<f64>()
            .ok()
            .and_then(HedgeRule::with_factor)
            .map(|r| HedgeSetting(Some(r)))
            .ok_or_else(|| format!("expected off, on or a positive factor, got {s:?}")),
    }
}

impl ConnArgs {
    fn trust(&self) -> anyhow::Result<Trust> {
        if self.insecure {
            return Ok(Trust::InsecureAny);
        }
        if !self.ca.is_empty() {
            return Ok(Trust::Roots(self.ca.clone()));
        }
        if Path::new(SYSTEM_CA_BUNDLE).exists() {
            return Ok(Trust::Roots(vec![PathBuf::from(SYSTEM_CA_BUNDLE)]));
        }
        bail!("no --ca given and no system CA bundle at {SYSTEM_CA_BUNDLE}; pass --ca FILE or --insecure")
    }

    fn config(&self, telemetry: TelemetrySink) -> anyhow::Result<ClientConfig> {
        Ok(ClientConfig {
            trust: self.trust()?,
            local_addrs: self.local_addr.clone(),
            quic_cc: self.quic_cc,
            quic_initial_window_packets: self.quic_iw,
            tcp_cc: self.tcp_cc.map_or(Some(gearbox_cc::DEFAULT_TCP_CC), |s| s.0),
            mptcp: self.mptcp,
            connect_timeout: seconds("--connect-timeout-s", self.connect_timeout_s)?,
            request_timeout: seconds("--timeout-s", self.timeout_s)?,
            quic_silence_floor: match self.quic_silence_floor_s {
                Some(s) => seconds("--quic-silence-floor-s", s)?,
                None => ClientConfig::default().quic_silence_floor,
            },
            hedge: self.hedge.0,
            telemetry,
            ..ClientConfig::default()
        })
    }
}

fn seconds(flag: &str, s: f64) -> anyhow::Result<Duration> {
    if !(s.is_finite() && s > 0.0) {
        bail!("{flag} must be a positive number of seconds, got {s}");
    }
    Duration::try_from_secs_f64(s).map_err(|e| anyhow!("{flag} {s}: {e}"))
}

pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

pub(crate) fn telemetry_sink(path: Option<&Path>) -> anyhow::Result<TelemetrySink> {
    match path {
        Some(p) => TelemetrySink::to_file(p).with_context(|| format!("cannot open telemetry file {}", p.display())),
        None => Ok(TelemetrySink::disabled()),
    }
}

/// The control plane settings of `get` and `load` (none without `--control`).
fn client_control(control: &ControlArgs) -> anyhow::Result<Option<ControlConfig>> {
    let c = control.apply(None, "client-spool")?;
    if let Some(c) = &c {
        if c.policies.is_none() && c.poll_interval_s.is_some() {
            bail!("--poll-s sets how often --policies DIR is kept current; give --policies DIR too");
        }
    }
    Ok(c)
}

/// The records to `path` and, with a control plane, to its upload spool
/// (docs/control.md). Inside the runtime.
fn control_sink(path: Option<&Path>, control: Option<&ControlConfig>) -> anyhow::Result<TelemetrySink> {
    match control {
        None => telemetry_sink(path),
        Some(c) => Ok(TelemetrySink::open(path, Some(c))?),
    }
}

/// The poller of the client's policies (docs/control.md, "The client's policies"): the
/// registry's `wisetrans` versions go to the gear's `slot`, loaded beside the running
/// models and refused when they do not load. The last good copy on disk, if there is one,
/// is loaded into the slot now, so a client started while the control plane is down runs
/// what it ran before.
fn client_poller(control: &ControlConfig, slot: MonitorSlot) -> anyhow::Result<PolicyPoller> {
    let root = control.policies.as_deref().context("client_poller needs --policies")?;
    let mut poller = PolicyPoller::new(
        ControlClient::new(control)?,
        root,
        control.poll_interval_s.map(Duration::from_secs_f64),
    )?;
    poller.on(
        WISETRANS_GEAR,
        Box::new(move |dir: &Path| slot.load(dir, version_of(dir))),
    );
    let (loaded, failed) = poller.load_from_disk();
    for (gear, version) in loaded {
        tracing::info!(gear, version, "policy: the last good copy on disk loaded");
    }
    for f in failed {
        eprintln!("gearbox: warning: policy: the copy on disk cannot be loaded: {f}");
    }
    Ok(poller)
}

/// A hint for errors a user can fix with a flag.
fn hint(err: &ClientError, conn: &ConnArgs) -> &'static str {
    match err {
        ClientError::Tls { .. } if !conn.insecure => {
            " (is the server's certificate in --ca? --insecure skips verification in the lab)"
        }
        _ => "",
    }
}

/// Arguments of `gearbox get`.
#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// The https:// URL to fetch.
    pub url: String,
    /// Transport to use (default tcp; auto when --gear is given).
    #[arg(long, value_enum)]
    pub proto: Option<Proto>,
    #[command(flatten)]
    pub gear: GearArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Also append the record to this JSON-lines telemetry file.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Write the response body to this file (default: discard it).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// HTTP method.
    #[arg(short = 'X', long, default_value = "GET")]
    pub method: String,
    /// Send a request body of this many bytes.
    #[arg(long, value_name = "N")]
    pub body_bytes: Option<usize>,
    /// Load the URL as a web page with the page loader (every object in dependency order on
    /// one connection, RFC 9218 priorities) over the version --http-version picks; prints one
    /// JSON record of the load, and the choice and its reason on stderr.
    #[arg(long)]
    pub page: bool,
    /// The page's dependency graph (a `page.json` of `gearbox pages gen`) [default: fetched
    /// from the edge, ORIGIN/SITE.page.json for a URL ORIGIN/SITE/...].
    #[arg(long, value_name = "FILE", requires = "page")]
    pub page_graph: Option<PathBuf>,
    /// HTTP version of the page load: h2, h3, or auto (FlexHTTP's selector; docs/flexhttp.md).
    #[arg(long, value_name = "VERSION", value_parser = ["h2", "h3", "auto"], default_value = "auto", requires = "page")]
    pub http_version: String,
    /// The global forest for `--http-version auto` without --agent.
    #[arg(long, value_name = "FILE", default_value = "models/flexhttp/forest.json")]
    pub flexhttp_model: PathBuf,
    /// The network features for `--http-version auto` without --agent (`gearbox agent measure`'s JSON).
    #[arg(long, value_name = "FILE")]
    pub agent_network: Option<PathBuf>,
    #[command(flatten)]
    pub agent: AgentArgs,
    #[command(flatten)]
    pub control: ControlArgs,
}

/// `gearbox get`: one request; the record goes to stdout (also on failure, with `error`
/// set), the body to `-o`, and a failure to stderr with a nonzero exit.
pub fn run_get(a: GetArgs) -> anyhow::Result<()> {
    if a.page {
        return run_get_page(a);
    }
    let method = http_method(&a.method)?;
    let control = client_control(&a.control)?;
    let polled = control.as_ref().is_some_and(|c| c.policies.is_some());
    let (transport, gear, slot) = a.gear.resolve(a.proto, polled)?;
    let rt = runtime()?;
    rt.block_on(async {
        let sink = control_sink(a.out.as_deref(), control.as_ref())?;
        if let (Some(c), Some(slot)) = (&control, slot) {
            // One request: one poll first, so it runs the registry's active version.
            let mut poller = client_poller(c, slot)?;
            if let Err(e) = poller.poll_once().await {
                eprintln!("gearbox get: warning: policy poll failed ({e}); the request runs what is on disk");
            }
        }
        let client = Client::with_gear(a.conn.config(sink)?, gear).context("gearbox get")?;
        let mut req = Request::get(&a.url, transport);
        req.method = method;
        if let Some(n) = a.body_bytes {
            req.body = bytes_of(n);
        }
        req.discard_body = a.output.is_none();
        let (result, record) = client.request_with_record(req).await;
        client.close_connections().await;
        client.config().telemetry.finish().await;
        println!("{}", serde_json::to_string(&record).context("record to JSON")?);
        match result {
            Ok(resp) => {
                if let Some(path) = &a.output {
                    std::fs::write(path, &resp.body)
                        .with_context(|| format!("gearbox get: cannot write body to {}", path.display()))?;
                }
                Ok(())
            }
            Err(e) => Err(anyhow!("gearbox get: {e}{}", hint(&e, &a.conn))),
        }
    })
}

/// `gearbox get --page URL`: one page load by the page loader, its version chosen by
/// `--http-version` (FlexHTTP's selector for `auto`); one JSON line on stdout, the choice, its
/// reason and the load time on stderr.
fn run_get_page(a: GetArgs) -> anyhow::Result<()> {
    use gearbox_client::PageLoadOptions;
    use gearbox_gears::http_version::HttpVersion;

    if a.proto.is_some() || a.body_bytes.is_some() || a.output.is_some() || a.method != "GET" {
        bail!("--page loads a page with GETs over the version --http-version picks; leave --proto, --body-bytes, -o and -X out");
    }
    let uri: http::Uri = a.url.parse().map_err(|e| anyhow!("{:?}: not a URL ({e})", a.url))?;
    let (Some("https"), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        bail!("--page needs an https:// URL, got {:?}", a.url);
    };
    let origin = format!("https://{authority}");
    let path = uri.path().to_string();
    if a.http_version == "auto" {
        a.agent.check()?;
    }
    let control = client_control(&a.control)?;
    let rt = runtime()?;
    rt.block_on(async {
        let sink = control_sink(a.out.as_deref(), control.as_ref())?;
        let client = Client::with_gear(a.conn.config(sink)?, Box::new(StaticTransport::new(TransportPref::Tcp)))
            .context("gearbox get")?;
        let page: gearbox_workload::Page = match &a.page_graph {
            Some(file) => {
                let text = std::fs::read_to_string(file).with_context(|| format!("--page-graph {}", file.display()))?;
                serde_json::from_str(&text)
                    .with_context(|| format!("--page-graph {}: not a page graph", file.display()))?
            }
            None => {
                let site = path.trim_start_matches('/').split('/').next().unwrap_or("");
                if site.is_empty() {
                    bail!(
                        "{}: no site folder in the path to find SITE.page.json by; give --page-graph FILE",
                        a.url
                    );
                }
                let graph_url = format!("{origin}/{site}.page.json");
                let mut req = Request::get(&graph_url, TransportPref::Tcp);
                req.discard_body = false;
                let resp = client
                    .request(req)
                    .await
                    .map_err(|e| anyhow!("{graph_url}: {e}{}", hint(&e, &a.conn)))?;
                if resp.status != 200 {
                    bail!("{graph_url}: status {} (give --page-graph FILE)", resp.status);
                }
                serde_json::from_slice(&resp.body).with_context(|| format!("{graph_url}: not a page graph"))?
            }
        };
        match page.objects.first() {
            Some(root) if root.path == path => {}
            Some(root) => bail!("the page graph's root is {}, the URL's path is {path}", root.path),
            None => bail!("the page graph has no objects"),
        }
        // The selector's state is kept for `auto`, and for fixed versions too when there is an
        // agent or a state folder: those loads are local entries like any other.
        let mut flex = if a.http_version == "auto" || a.agent.agent.is_some() || a.agent.flexhttp_state.is_some() {
            // One load per process: its random choice on a miss is seeded by the clock, so that
            // successive runs do not all draw the same version.
            let seed = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64);
            let f = FlexClient::open(&a.agent, &a.flexhttp_model, a.agent_network.as_deref(), seed).await?;
            for n in &f.notes {
                eprintln!("gearbox get: flexhttp: {n}");
            }
            Some(f)
        } else {
            None
        };
        let (version, reason) = match (a.http_version.as_str(), flex.as_mut()) {
            ("h2", _) => (HttpVersion::H2, "flexhttp: fixed h2".to_string()),
            ("h3", _) => (HttpVersion::H3, "flexhttp: fixed h3".to_string()),
            (_, Some(f)) => f.choose(&format!("{origin}{path}"), &page),
            (_, None) => unreachable!("auto opens the selector"),
        };
        eprintln!("gearbox get: {origin}{path}: {} ({reason})", version.name());
        let options = PageLoadOptions {
            transport: crate::flexhttp_client::transport_of(version),
            reason: Some(reason.clone()),
            ..PageLoadOptions::default()
        };
        let load = client.load_page_with(&origin, &page, &options).await;
        client.close_connections().await;
        client.config().telemetry.finish().await;
        let mut record = serde_json::json!({
            "url": format!("{origin}{path}"),
            "http_version": version.name(),
            "reason": reason,
            "objects": page.objects.len(),
            "bytes": page.objects.iter().map(|o| o.size_bytes).sum::<u64>(),
        });
        let result = match &load {
            Ok(l) => {
                record["page_load_ms"] = serde_json::json!(l.page_load_ms);
                record["load_event_ms"] = serde_json::json!(l.load_event_ms);
                record["protocol"] = serde_json::to_value(l.protocol)?;
                if let Some(f) = flex.as_mut() {
                    f.observe(&page, version, l.page_load_ms);
                }
                eprintln!(
                    "gearbox get: page load {:.0} ms (load event {:.0} ms), {} objects over {}",
                    l.page_load_ms,
                    l.load_event_ms,
                    l.objects.len(),
                    record["protocol"].as_str().unwrap_or("?")
                );
                Ok(())
            }
            Err(e) => {
                record["error"] = serde_json::json!(e.to_string());
                Err(anyhow!("gearbox get --page: {e}{}", hint(e, &a.conn)))
            }
        };
        if let Some(mut f) = flex {
            if let Some(v) = f.forest_version {
                record["forest_version"] = serde_json::json!(v);
            }
            if let Some(line) = f.close(Duration::from_secs(5)).await? {
                eprintln!("gearbox get: flexhttp: {line}");
            }
        }
        println!("{record}");
        result
    })
}

fn http_method(m: &str) -> anyhow::Result<Method> {
    Method::from_bytes(m.to_ascii_uppercase().as_bytes()).map_err(|_| anyhow!("--method {m:?} is not an HTTP method"))
}

/// The name `--scheduler` takes for the learned SAILfish policy.
const SAILFISH: &str = "sailfish";

/// What makes each page load's scheduler: a heuristic by name, or SAILfish's policy in
/// `model_dir`, checked once here (refused when it was trained for another number of
/// paths, then MinRTT with a warning: docs/client.md "Multipath").
fn path_scheduling(name: &str, model_dir: &Path, paths: usize) -> anyhow::Result<PathScheduling> {
    if name == SAILFISH {
        match SailfishGear::load(model_dir, paths) {
            Ok(_) => {
                let dir = model_dir.to_path_buf();
                return Ok(PathScheduling {
                    name: name.to_string(),
                    make: Arc::new(move || SailfishGear::load_or_minrtt(&dir, paths).0),
                });
            }
            Err(e) => {
                eprintln!("gearbox load: warning: --scheduler sailfish: {e}; scheduling by minrtt instead");
                return path_scheduling("minrtt", model_dir, paths);
            }
        }
    }
    // Checked here so that a bad name fails before anything is sent.
    path_scheduler(name)?;
    let owned = name.to_string();
    Ok(PathScheduling {
        name: name.to_string(),
        make: Arc::new(move || path_scheduler(&owned).expect("checked above")),
    })
}

/// `n` bytes of request body (contents do not matter to `/bytes/{n}`).
fn bytes_of(n: usize) -> Bytes {
    Bytes::from(vec![b'x'; n])
}

/// Arguments of `gearbox load`.
#[derive(Debug, clap::Args)]
pub struct LoadArgs {
    /// Built-in workload name (feed, app, search, bulk, page) or path of a workload TOML file.
    #[arg(long, value_name = "NAME|PATH")]
    pub workload: String,
    /// The edge to load, https://host:port.
    #[arg(long, value_name = "URL")]
    pub target: String,
    /// Transport of every request (default tcp; auto when --gear is given).
    #[arg(long, value_enum)]
    pub proto: Option<Proto>,
    #[command(flatten)]
    pub gear: GearArgs,
    /// Workload seed: the same seed replays the same requests.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Replay the requests sent in the first S seconds of the workload (default 30).
    #[arg(long, value_name = "S", conflicts_with = "requests")]
    pub duration_s: Option<f64>,
    /// Replay the first N requests of the workload.
    #[arg(long, value_name = "N")]
    pub requests: Option<usize>,
    /// Page workloads: load one page, the page of this seed (`WorkloadSpec::generate_page`),
    /// at once on fresh connections, and exit; instead of one page per click of the workload.
    /// The emulator half of `gearbox lab sailfish evaluate` loads its test pages this way.
    #[arg(long, value_name = "SEED", conflicts_with_all = ["requests", "duration_s"])]
    pub page_seed: Option<u64>,
    /// Append one client record per request to this JSON-lines file.
    #[arg(long, value_name = "FILE")]
    pub telemetry: Option<PathBuf>,
    /// Multiply the workload's send times by this factor (0.5: twice as fast).
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    pub time_scale: f64,
    /// Print the summary as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Local addresses of a multipath client, one per path, comma-separated (the same as
    /// repeating --local-addr). Each must be an address of this host.
    #[arg(long, value_name = "ADDR,ADDR", value_delimiter = ',', conflicts_with = "local_addr")]
    pub paths: Vec<IpAddr>,
    /// Path scheduler: every page load of a page workload goes over HTTP/3 on all the
    /// paths, each request on the path this scheduler picks; another workload's requests go
    /// over HTTP/3, each on the path it picks (docs/client.md, "Multipath").
    /// `sailfish` is the learned policy in --sailfish-model (MinRTT, with a warning, when
    /// that policy cannot be used on this many paths).
    #[arg(long, value_name = "NAME", value_parser = clap::builder::PossibleValuesParser::new(SCHEDULERS.iter().copied().chain([SAILFISH])))]
    pub scheduler: Option<String>,
    /// Model directory of `--scheduler sailfish` (policy.json and its sidecar, from `gearbox learn sailfish`).
    #[arg(long, value_name = "DIR", default_value = "models/sailfish")]
    pub sailfish_model: PathBuf,
    /// HTTP version of each page load of a page workload: h2, h3, or auto (FlexHTTP's selector:
    /// the (URL, hour-of-week) cache, a random version on a miss, the forest in
    /// --flexhttp-model filling the cache; docs/flexhttp.md). The choice and its reason go into
    /// every object's telemetry record (`decision`).
    #[arg(long, value_name = "VERSION", value_parser = ["h2", "h3", "auto"])]
    pub http_version: Option<String>,
    /// The agent's global forest for `--http-version auto` (`gearbox agent classifier --out DIR`).
    #[arg(long, value_name = "FILE", default_value = "models/flexhttp/forest.json")]
    pub flexhttp_model: PathBuf,
    /// The network features for `--http-version auto`: the JSON `gearbox agent measure` prints
    /// (rtt_ms, loss_rate, capacity_mbps). Without it every miss stays random.
    #[arg(long, value_name = "FILE")]
    pub agent_network: Option<PathBuf>,
    #[command(flatten)]
    pub agent: AgentArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(flatten)]
    pub control: ControlArgs,
}

/// `gearbox load`: replays a workload and prints a summary.
pub fn run_load(a: LoadArgs) -> anyhow::Result<()> {
    let spec = WorkloadSpec::load(&a.workload).with_context(|| format!("--workload {}", a.workload))?;
    if !(a.time_scale.is_finite() && a.time_scale > 0.0) {
        bail!("--time-scale must be a positive number, got {}", a.time_scale);
    }
    let limit = match (a.requests, a.duration_s) {
        (Some(0), _) => bail!("--requests must be at least 1"),
        (Some(n), _) => Limit::Requests(n),
        (None, Some(s)) => Limit::DurationMs(seconds("--duration-s", s)?.as_secs_f64() * 1e3),
        (None, None) => Limit::DurationMs(30_000.0),
    };
    let target = a.target.trim_end_matches('/').to_string();
    if !target.starts_with("https://") {
        bail!("--target must be an https:// URL of the edge, got {:?}", a.target);
    }
    let mut conn = a.conn;
    if !a.paths.is_empty() {
        conn.local_addr = a.paths.clone();
    }
    check_local_addrs(&conn.local_addr).map_err(|e| anyhow!("--paths: {e}"))?;
    let path_scheduler = match &a.scheduler {
        None => None,
        Some(name) => {
            if !matches!(a.proto, None | Some(Proto::Quic)) || a.gear.gear.is_some() {
                bail!("--scheduler sends every request over HTTP/3 on the path it picks; leave --proto and --gear out or set --proto quic");
            }
            let paths = conn.local_addr.len().max(1);
            Some(path_scheduling(name, &a.sailfish_model, paths)?)
        }
    };
    if a.page_seed.is_some() && !matches!(spec.pattern(), Some(Pattern::Page(_))) {
        bail!(
            "--page-seed loads a page of a page workload; workload {} has no pages (use --workload page)",
            spec.name
        );
    }
    let page_version = match &a.http_version {
        None => None,
        Some(version) => {
            if !matches!(spec.pattern(), Some(Pattern::Page(_))) {
                bail!(
                    "--http-version chooses per page load; workload {} has no pages (use --workload page)",
                    spec.name
                );
            }
            if a.proto.is_some() || a.scheduler.is_some() {
                bail!("--http-version decides the transport of each page load; leave --proto and --scheduler out");
            }
            Some(version.clone())
        }
    };
    let rt = runtime()?;
    let flex = match page_version.as_deref() {
        Some("auto") => {
            let f = rt.block_on(FlexClient::open(
                &a.agent,
                &a.flexhttp_model,
                a.agent_network.as_deref(),
                a.seed,
            ))?;
            for n in &f.notes {
                eprintln!("gearbox load: flexhttp: {n}");
            }
            Some(Arc::new(std::sync::Mutex::new(f)))
        }
        _ => None,
    };
    let page_version = match (&page_version, &flex) {
        (_, Some(f)) => Some(FlexClient::chooser(f.clone())),
        (Some(v), None) => Some(fixed_version_chooser(v)?),
        (None, None) => None,
    };
    let control = client_control(&a.control)?;
    let polled = control.as_ref().is_some_and(|c| c.policies.is_some());
    // A scheduled replay sends every request over HTTP/3 (checked above).
    let proto = a.proto.or(path_scheduler.as_ref().map(|_| Proto::Quic));
    let (transport, gear, slot) = a.gear.resolve(proto, polled)?;
    let requests = spec.generate(a.seed, limit);
    if requests.is_empty() {
        bail!("workload {} gives no requests for this limit", spec.name);
    }
    let started = Instant::now();
    let (records, page_loads) = rt.block_on(async {
        let sink = control_sink(a.telemetry.as_deref(), control.as_ref())?;
        // Polls while the workload runs; each new version is taken by the gear's next call.
        let polling = match (&control, slot) {
            (Some(c), Some(slot)) => Some(client_poller(c, slot)?.spawn()),
            _ => None,
        };
        let uploading = flex
            .as_ref()
            .and_then(|f| f.lock().unwrap_or_else(|p| p.into_inner()).spawn_uploads());
        let log = RecordLog::new();
        let gear = RecordingGear::new(gear, log.clone());
        let client = Client::with_gear(conn.config(sink)?, Box::new(gear)).context("gearbox load")?;
        let options = ReplayOptions {
            target,
            transport,
            time_scale: a.time_scale,
            paths: conn.local_addr.len().max(1),
            path_scheduler,
            page_version,
        };
        let page_loads = match a.page_seed {
            Some(page) => replay_page(&client, &spec, page, &options).await,
            None => replay(&client, &spec, a.seed, &requests, &options).await,
        };
        if let Some(p) = polling {
            p.abort();
        }
        if let Some(u) = uploading {
            u.abort();
        }
        let page_loads = page_loads?;
        client.close_connections().await;
        client.config().telemetry.finish().await;
        Ok::<_, anyhow::Error>((log.take(), page_loads))
    })?;
    if let Some(f) = flex {
        let mut f = f.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(line) = rt.block_on(f.close(Duration::from_secs(5)))? {
            eprintln!("gearbox load: flexhttp: {line}");
        }
    }
    let summary = Summary::new(&spec.name, a.seed, started.elapsed(), &records, &page_loads);
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(
            out,
            "{}",
            serde_json::to_string(&summary.to_json()).context("summary to JSON")?
        )?;
    } else {
        summary.write_table(&mut out, a.telemetry.as_deref())?;
    }
    Ok(())
}

/// The static baselines of `--http-version`: every page load over h2 (TCP, ALPN h2) or h3 (QUIC).
fn fixed_version_chooser(version: &str) -> anyhow::Result<gearbox_client::replay::PageVersionChooser> {
    use gearbox_gears::http_version::HttpVersion;
    let v = match version {
        "h2" => HttpVersion::H2,
        "h3" => HttpVersion::H3,
        other => bail!("--http-version {other:?}: expected h2, h3 or auto"),
    };
    let reason = format!("flexhttp: fixed {}", v.name());
    Ok(gearbox_client::replay::PageVersionChooser {
        name: v.name().to_string(),
        choose: Arc::new(move |_, _| (transport_of(v), reason.clone())),
        observe: None,
    })
}
