//! `gearbox get` and `gearbox load`: the client at the command line.
//!
//! `get` fetches one URL and prints its telemetry record, so a single measurement is one
//! command and its output is what learners read. `load` replays a workload (seeded, from
//! `gearbox-workload`) against an edge at the workload's send times and summarises the
//! request completion times per protocol. Both write the same `ClientRecord` lines as the
//! library (schema: docs/telemetry.md; usage: docs/client.md).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use gearbox_cc::{QuicCc, TcpCc};
use gearbox_client::{
    Bytes, Client, ClientConfig, ClientError, ClientRecord, Decision, Method, PageLoadOptions, Request,
    StaticTransport, TransportChoice, TransportGear, TransportPref, Trust,
};
use gearbox_dataplane::telemetry::TelemetrySink;
use gearbox_gears::transport::{transport_gear, Mode, TransportConfig};
use gearbox_workload::{Limit, Pattern, WorkloadSpec};

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

fn parse_tcp_cc(s: &str) -> Result<TcpCc, String> {
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

impl GearArgs {
    /// The transport of every request and the gear that decides `auto` ones.
    fn resolve(&self, proto: Option<Proto>) -> anyhow::Result<(TransportPref, Box<dyn TransportGear>)> {
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
        let gear: Box<dyn TransportGear> = if transport == TransportPref::Auto {
            let mode = self.gear.unwrap_or(Mode::WiseTransV2);
            transport_gear(mode, self.model_dir.as_deref(), config)
        } else {
            Box::new(StaticTransport::new(transport))
        };
        Ok((transport, gear))
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
    /// QUIC congestion control: newreno, cubic or bbr.
    #[arg(long, value_name = "CC", value_parser = parse_quic_cc, default_value = "cubic")]
    pub quic_cc: QuicCc,
    /// QUIC initial window in packets of 1200 bytes (default: quinn's RFC 9002 window).
    #[arg(long, value_name = "PACKETS")]
    pub quic_iw: Option<u32>,
    /// Kernel TCP congestion control set on each socket: reno, cubic or bbr (default: the system's).
    #[arg(long, value_name = "CC", value_parser = parse_tcp_cc)]
    pub tcp_cc: Option<TcpCc>,
    /// Bound on opening a connection (TCP+TLS or QUIC handshake), seconds.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub connect_timeout_s: f64,
    /// Bound on each request, connection setup included, seconds.
    #[arg(long, value_name = "S", default_value_t = 60.0)]
    pub timeout_s: f64,
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
            tcp_cc: self.tcp_cc,
            connect_timeout: seconds("--connect-timeout-s", self.connect_timeout_s)?,
            request_timeout: seconds("--timeout-s", self.timeout_s)?,
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
}

/// `gearbox get`: one request; the record goes to stdout (also on failure, with `error`
/// set), the body to `-o`, and a failure to stderr with a nonzero exit.
pub fn run_get(a: GetArgs) -> anyhow::Result<()> {
    let method = http_method(&a.method)?;
    let (transport, gear) = a.gear.resolve(a.proto)?;
    let rt = runtime()?;
    rt.block_on(async {
        let sink = telemetry_sink(a.out.as_deref())?;
        let client = Client::with_gear(a.conn.config(sink)?, gear).context("gearbox get")?;
        let mut req = Request::get(&a.url, transport);
        req.method = method;
        if let Some(n) = a.body_bytes {
            req.body = bytes_of(n);
        }
        req.discard_body = a.output.is_none();
        let (result, record) = client.request_with_record(req).await;
        client.flush_telemetry().await;
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

fn http_method(m: &str) -> anyhow::Result<Method> {
    Method::from_bytes(m.to_ascii_uppercase().as_bytes()).map_err(|_| anyhow!("--method {m:?} is not an HTTP method"))
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
    /// Append one client record per request to this JSON-lines file.
    #[arg(long, value_name = "FILE")]
    pub telemetry: Option<PathBuf>,
    /// Multiply the workload's send times by this factor (0.5: twice as fast).
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    pub time_scale: f64,
    /// Print the summary as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Passes choices to a gear and keeps every observed record for the summary.
/// The client calls `observe` for every request, page objects included, so this sees
/// exactly what went to telemetry (and the gear learns from the same records).
pub(crate) struct Collect<G = StaticTransport> {
    pub(crate) inner: G,
    pub(crate) records: Arc<Mutex<Vec<ClientRecord>>>,
}

impl<G: TransportGear> TransportGear for Collect<G> {
    fn choose(&mut self, origin: &str, now: Instant) -> Decision<TransportChoice> {
        self.inner.choose(origin, now)
    }

    fn observe(&mut self, record: &ClientRecord, now: Instant) {
        self.inner.observe(record, now);
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(record.clone());
    }
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
    let (transport, gear) = a.gear.resolve(a.proto)?;
    let requests = spec.generate(a.seed, limit);
    if requests.is_empty() {
        bail!("workload {} gives no requests for this limit", spec.name);
    }
    let rt = runtime()?;
    let started = Instant::now();
    let (records, page_loads) = rt.block_on(async {
        let sink = telemetry_sink(a.telemetry.as_deref())?;
        let records = Arc::new(Mutex::new(Vec::new()));
        let gear = Collect {
            inner: gear,
            records: records.clone(),
        };
        let client = Client::with_gear(a.conn.config(sink)?, Box::new(gear)).context("gearbox load")?;
        let paths = a.conn.local_addr.len().max(1);
        let page_loads = if matches!(spec.pattern(), Some(Pattern::Page(_))) {
            replay_pages(
                &client,
                &spec,
                a.seed,
                &requests,
                &target,
                transport,
                a.time_scale,
                paths,
            )
            .await?
        } else {
            replay_requests(&client, &requests, &target, transport, a.time_scale, paths).await;
            Vec::new()
        };
        client.flush_telemetry().await;
        let records = std::mem::take(&mut *records.lock().unwrap_or_else(|p| p.into_inner()));
        Ok::<_, anyhow::Error>((records, page_loads))
    })?;
    let summary = Summary::new(&spec.name, a.seed, started.elapsed(), &records, &page_loads);
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(
            out,
            "{}",
            serde_json::to_string(&summary.to_json()).context("summary to JSON")?
        )?;
    } else {
        summary.print(&mut out, a.telemetry.as_deref())?;
    }
    Ok(())
}

/// Sends each request at its (scaled) send time, concurrently with those still running.
pub(crate) async fn replay_requests(
    client: &Client,
    requests: &[gearbox_workload::Request],
    target: &str,
    transport: TransportPref,
    time_scale: f64,
    paths: usize,
) {
    let start = tokio::time::Instant::now();
    let mut running = tokio::task::JoinSet::new();
    for r in requests {
        tokio::time::sleep_until(start + Duration::from_secs_f64((r.send_at_ms * time_scale).max(0.0) / 1e3)).await;
        let url = format!("{target}{}", r.path);
        let mut req = if r.request_bytes > 0 {
            Request::post(
                url,
                bytes_of(usize::try_from(r.request_bytes).unwrap_or(usize::MAX)),
                transport,
            )
        } else {
            Request::get(url, transport)
        };
        req.click = Some(r.click);
        req.force_new_connection = r.new_connection;
        req.path_index = r.client_index as usize % paths;
        req.discard_body = true;
        let client = client.clone();
        running.spawn(async move {
            // The record is in telemetry and in the collector; errors are counted there.
            let _ = client.request(req).await;
        });
    }
    while running.join_next().await.is_some() {}
}

/// Page workloads: one page load per click, started at the click's send time.
///
/// The workload's request stream lists a page's objects but not their dependencies, so
/// each click's page graph comes from `WorkloadSpec::generate_page` with a seed derived
/// from the run's seed and the click (same seed, same pages).
#[allow(clippy::too_many_arguments)]
async fn replay_pages(
    client: &Client,
    spec: &WorkloadSpec,
    seed: u64,
    requests: &[gearbox_workload::Request],
    target: &str,
    transport: TransportPref,
    time_scale: f64,
    paths: usize,
) -> anyhow::Result<Vec<f64>> {
    let mut clicks: Vec<&gearbox_workload::Request> = Vec::new();
    for r in requests {
        if clicks.last().is_none_or(|last| last.click != r.click) {
            clicks.push(r);
        }
    }
    let start = tokio::time::Instant::now();
    let mut running = tokio::task::JoinSet::new();
    for first in clicks {
        let page_seed = seed
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(u64::from(first.click));
        let page = spec.generate_page(page_seed).context("page workload")?;
        tokio::time::sleep_until(start + Duration::from_secs_f64((first.send_at_ms * time_scale).max(0.0) / 1e3)).await;
        let options = PageLoadOptions {
            transport,
            path_index: first.client_index as usize % paths,
            click: Some(first.click),
            fresh_connection: first.new_connection,
        };
        let client = client.clone();
        let origin = target.to_string();
        running.spawn(async move {
            client
                .load_page_with(&origin, &page, &options)
                .await
                .ok()
                .map(|p| p.page_load_ms)
        });
    }
    let mut loads = Vec::new();
    while let Some(done) = running.join_next().await {
        if let Ok(Some(ms)) = done {
            loads.push(ms);
        }
    }
    Ok(loads)
}

/// RCT statistics of one protocol.
struct ProtoStats {
    requests: usize,
    errors: usize,
    rct_ms: Vec<f64>,
}

pub(crate) struct Summary {
    workload: String,
    seed: u64,
    elapsed: Duration,
    requests: usize,
    errors: BTreeMap<String, usize>,
    by_protocol: BTreeMap<String, ProtoStats>,
    page_load_ms: Vec<f64>,
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted.get(rank.min(sorted.len()) - 1).copied()
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

impl Summary {
    pub(crate) fn new(
        workload: &str,
        seed: u64,
        elapsed: Duration,
        records: &[ClientRecord],
        page_loads: &[f64],
    ) -> Self {
        let mut errors = BTreeMap::new();
        let mut by_protocol: BTreeMap<String, ProtoStats> = BTreeMap::new();
        for r in records {
            let s = by_protocol.entry(r.protocol.to_string()).or_insert(ProtoStats {
                requests: 0,
                errors: 0,
                rct_ms: Vec::new(),
            });
            s.requests += 1;
            match (&r.error, r.rct_ms) {
                (Some(kind), _) => {
                    s.errors += 1;
                    *errors.entry(kind.clone()).or_insert(0) += 1;
                }
                (None, Some(rct)) => s.rct_ms.push(rct),
                (None, None) => {}
            }
        }
        for s in by_protocol.values_mut() {
            s.rct_ms.sort_by(f64::total_cmp);
        }
        let mut page_load_ms = page_loads.to_vec();
        page_load_ms.sort_by(f64::total_cmp);
        Summary {
            workload: workload.to_string(),
            seed,
            elapsed,
            requests: records.len(),
            errors,
            by_protocol,
            page_load_ms,
        }
    }

    fn to_json(&self) -> serde_json::Value {
        let stats = |v: &[f64]| {
            serde_json::json!({
                "mean_ms": mean(v), "median_ms": percentile(v, 50.0),
                "p90_ms": percentile(v, 90.0), "p99_ms": percentile(v, 99.0),
            })
        };
        let protocols: HashMap<&String, serde_json::Value> = self
            .by_protocol
            .iter()
            .map(|(p, s)| {
                let mut v = stats(&s.rct_ms);
                v["requests"] = s.requests.into();
                v["errors"] = s.errors.into();
                (p, v)
            })
            .collect();
        let mut pages = stats(&self.page_load_ms);
        pages["loads"] = self.page_load_ms.len().into();
        serde_json::json!({
            "workload": self.workload, "seed": self.seed, "elapsed_s": self.elapsed.as_secs_f64(),
            "requests": self.requests, "errors": self.errors, "rct": protocols, "page_load": pages,
        })
    }

    pub(crate) fn print(&self, out: &mut impl Write, telemetry: Option<&Path>) -> std::io::Result<()> {
        let f = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |x| format!("{x:.1}"));
        let error_count: usize = self.errors.values().sum();
        writeln!(
            out,
            "workload {} (seed {}): {} requests in {:.1} s, {} errors{}",
            self.workload,
            self.seed,
            self.requests,
            self.elapsed.as_secs_f64(),
            error_count,
            if self.errors.is_empty() {
                String::new()
            } else {
                format!(
                    " ({})",
                    self.errors
                        .iter()
                        .map(|(k, n)| format!("{k}: {n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        )?;
        writeln!(
            out,
            "{:<9}{:>9}{:>8}{:>11}{:>11}{:>11}{:>11}",
            "protocol", "requests", "errors", "mean_ms", "median_ms", "p90_ms", "p99_ms"
        )?;
        for (p, s) in &self.by_protocol {
            writeln!(
                out,
                "{:<9}{:>9}{:>8}{:>11}{:>11}{:>11}{:>11}",
                p,
                s.requests,
                s.errors,
                f(mean(&s.rct_ms)),
                f(percentile(&s.rct_ms, 50.0)),
                f(percentile(&s.rct_ms, 90.0)),
                f(percentile(&s.rct_ms, 99.0)),
            )?;
        }
        if !self.page_load_ms.is_empty() {
            let v = &self.page_load_ms;
            writeln!(
                out,
                "page loads: {} complete, mean {} ms, median {} ms, p90 {} ms",
                v.len(),
                f(mean(v)),
                f(percentile(v, 50.0)),
                f(percentile(v, 90.0))
            )?;
        }
        if let Some(t) = telemetry {
            writeln!(out, "records: {}", t.display())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 90.0), Some(90.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
