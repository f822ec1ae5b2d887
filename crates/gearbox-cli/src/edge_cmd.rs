//! `gearbox edge`: run the edge server until SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use gearbox_cc::{QuicCc, SwitchMode, TcpCcSetting};
use gearbox_edge::floo::PeriodGear;
use gearbox_edge::{ConnectionGears, Edge, EdgeConfig};
use gearbox_gear_api::CcaPeriodGear;
use gearbox_gears::floo::{FixedCca, FlooGear, RandomCca};

/// Arguments of `gearbox edge`. Each flag overrides the same field of `--config`.
#[derive(clap::Args, Debug, Default)]
pub struct EdgeArgs {
    /// TOML file with any of the fields below (docs/edge.md); flags win over it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// TCP listen address (HTTPS with h2 and http/1.1) [default: 127.0.0.1:4433].
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// UDP listen address for QUIC (h3) [default: the TCP address and port].
    #[arg(long)]
    pub quic_listen: Option<SocketAddr>,
    /// Admin address serving /metrics (plain HTTP).
    #[arg(long)]
    pub admin: Option<SocketAddr>,
    /// Certificate chain, PEM (make one with `gearbox cert`) [default: cert.pem].
    #[arg(long)]
    pub cert: Option<PathBuf>,
    /// Private key, PEM [default: key.pem].
    #[arg(long)]
    pub key: Option<PathBuf>,
    /// QUIC congestion controller: newreno, cubic, bbr, copa, westwood, vivace (the suite's, switchable) or quinn-newreno, quinn-cubic, quinn-bbr (quinn's built-ins) [default: cubic].
    #[arg(long)]
    pub cc: Option<QuicCc>,
    /// QUIC initial congestion window, in packets of 1200 bytes [default: RFC 9002's].
    #[arg(long)]
    pub initial_window: Option<u32>,
    /// Kernel TCP congestion control per socket: reno, cubic, bbr, westwood (gearbox's BPF Westwood+, registered at start; needs root) or system (the host's default) [default: cubic, as QUIC's].
    #[arg(long, value_name = "CC")]
    pub tcp_cc: Option<TcpCcSetting>,
    /// TCP_NOTSENT_LOWAT of accepted TCP connections, bytes; 0 = the system's (unlimited) [default: 16384].
    #[arg(long, value_name = "BYTES")]
    pub tcp_notsent_lowat: Option<u32>,
    /// TCP WISE's Cwnd Table (TOML, docs/tcpwise.md): the initial window per client
    /// cluster and hour, on TCP (BPF sock_ops, needs root) and QUIC; reloaded when the
    /// file changes.
    #[arg(long, value_name = "FILE")]
    pub cwnd_table: Option<PathBuf>,
    /// With --cwnd-table: apply the table to TCP with per-prefix routes (`ip route replace
    /// PREFIX ... initcwnd N`, one IW per entry per learning interval) instead of the BPF
    /// program; the edge falls back to them by itself when BPF is unavailable. Needs root.
    #[arg(long)]
    pub cwnd_routes: bool,
    /// Gear that re-chooses each QUIC connection's congestion controller every selection
    /// period (docs/floo.md): `floo` (the trained policy in --model-dir), `random`, or a
    /// controller name (a static baseline that switches every connection to it)
    /// [default: none; each connection keeps --cc].
    #[arg(long, value_name = "GEAR")]
    pub gear: Option<String>,
    /// Floo's model directory (policy.json and its sidecar) [default: models/floo].
    #[arg(long, value_name = "DIR")]
    pub model_dir: Option<PathBuf>,
    /// The selection period of --gear, seconds [default: 12, Floo's].
    #[arg(long, value_name = "S")]
    pub period_s: Option<f64>,
    /// How --gear switches: full (state migration, Floo) or part (P-Floo) [default: full].
    #[arg(long, value_name = "MODE")]
    pub switch: Option<String>,
    /// Largest n served by /bytes/{n} [default: 1073741824].
    #[arg(long)]
    pub max_bytes: Option<u64>,
    /// Directory whose files are served.
    #[arg(long)]
    pub static_dir: Option<PathBuf>,
    /// Origin (http://host:port) that gets every request no other route takes.
    #[arg(long)]
    pub upstream: Option<String>,
    /// Per-request telemetry file (JSON lines; `-` for stdout).
    #[arg(long)]
    pub telemetry: Option<PathBuf>,
    /// Do not send Alt-Svc for h3.
    #[arg(long)]
    pub no_alt_svc: bool,
    /// Listen for TCP over Multipath TCP (the kernel's; needs net.mptcp.enabled = 1): MPTCP clients get a subflow per path, others plain TCP.
    #[arg(long)]
    pub mptcp: bool,
    /// Added processing time of every request served over TCP, ms (a deliberately changed
    /// server, for generalisation experiments) [default: 0].
    #[arg(long, value_name = "MS")]
    pub tcp_processing_ms: Option<u64>,
    /// Added processing time of every request served over QUIC, ms [default: 0].
    #[arg(long, value_name = "MS")]
    pub quic_processing_ms: Option<u64>,
    #[command(flatten)]
    pub control: crate::control_args::ControlArgs,
}

impl EdgeArgs {
    /// The configuration: the file's (or the defaults), then the flags.
    pub fn config(&self) -> anyhow::Result<EdgeConfig> {
        let mut c = match &self.config {
            Some(p) => EdgeConfig::from_file(p)?,
            None => EdgeConfig::default(),
        };
        macro_rules! set {
            ($($f:ident => $g:ident),*) => {$( if let Some(v) = &self.$f { c.$g = v.clone().into(); } )*};
        }
        set!(listen => listen, cert => cert, key => key, cc => cc, max_bytes => max_bytes,
             tcp_processing_ms => tcp_processing_ms, quic_processing_ms => quic_processing_ms);
        if self.quic_listen.is_some() {
            c.quic_listen = self.quic_listen;
        }
        if self.admin.is_some() {
            c.admin_listen = self.admin;
        }
        if self.initial_window.is_some() {
            c.initial_window = self.initial_window;
        }
        if let Some(setting) = self.tcp_cc {
            c.tcp_cc = setting.0;
        }
        if self.tcp_notsent_lowat.is_some() {
            c.tcp_notsent_lowat_bytes = self.tcp_notsent_lowat;
        }
        if self.cwnd_table.is_some() {
            c.cwnd_table = self.cwnd_table.clone();
        }
        if self.cwnd_routes {
            c.cwnd_routes = true;
        }
        if self.static_dir.is_some() {
            c.static_dir = self.static_dir.clone();
        }
        if self.upstream.is_some() {
            c.upstream = self.upstream.clone();
        }
        if self.telemetry.is_some() {
            c.telemetry = self.telemetry.clone();
        }
        if self.no_alt_svc {
            c.alt_svc = false;
        }
        if self.mptcp {
            c.mptcp = true;
        }
        c.control = self.control.apply(c.control.take(), "edge-spool")?;
        Ok(c)
    }
}

/// The static per-connection gears the flags describe.
pub fn static_gears(c: &EdgeConfig) -> ConnectionGears {
    ConnectionGears::from_config(c)
}

/// The period gear `--gear` asks for. A Floo model that cannot be used is a warning and
/// no gear (every connection keeps the configured controller), never a failed start;
/// a bad flag is an error.
pub fn period_gear(a: &EdgeArgs, c: &EdgeConfig) -> anyhow::Result<Option<PeriodGear>> {
    let Some(name) = a.gear.as_deref() else {
        for (flag, set) in [
            ("--model-dir", a.model_dir.is_some()),
            ("--period-s", a.period_s.is_some()),
            ("--switch", a.switch.is_some()),
        ] {
            anyhow::ensure!(!set, "{flag} needs --gear");
        }
        return Ok(None);
    };
    let period_s = a.period_s.unwrap_or(12.0);
    anyhow::ensure!(
        period_s.is_finite() && period_s >= 0.01,
        "--period-s {period_s}: give a number of seconds >= 0.01"
    );
    let mode = match a.switch.as_deref().unwrap_or("full") {
        "full" => SwitchMode::Full,
        "part" => SwitchMode::Part,
        other => anyhow::bail!("--switch {other:?}: valid: full, part"),
    };
    anyhow::ensure!(
        matches!(c.cc, QuicCc::Suite(_)),
        "--gear {name} switches controllers, which quinn's built-in {} cannot; use one of the suite's (--cc cubic, bbr, copa, westwood, newreno, vivace)",
        c.cc.name()
    );
    let gear: Box<dyn CcaPeriodGear> = match name {
        "floo" => {
            // --model-dir, else the last good copy polled from the control plane, else the
            // shipped model.
            let dir = a
                .model_dir
                .clone()
                .or_else(|| gearbox_edge::control::polled_copy(c, gearbox_edge::control::FLOO_GEAR))
                .unwrap_or_else(|| PathBuf::from("models/floo"));
            match FlooGear::load(&dir) {
                Ok(g) => Box::new(g),
                Err(e) => {
                    tracing::warn!(error = %e, "floo: no usable model; every connection keeps {}", c.cc.name());
                    eprintln!(
                        "gearbox edge: warning: floo: {e}; every connection keeps {}",
                        c.cc.name()
                    );
                    return Ok(None);
                }
            }
        }
        "random" => Box::new(RandomCca::new(gearbox_dataplane::telemetry::unix_ms_now().to_bits())),
        other => match gearbox_cc::Cca::from_name(other) {
            Some(cca) => Box::new(FixedCca(cca)),
            None => anyhow::bail!(
                "--gear {other:?}: valid: floo, random, {}",
                gearbox_cc::Cca::ALL.map(gearbox_cc::Cca::name).join(", ")
            ),
        },
    };
    Ok(Some(PeriodGear {
        gear,
        period: std::time::Duration::from_secs_f64(period_s),
        mode,
    }))
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, as Go's runtime does for every
/// Go server (caddy included): many systems start processes at 1,024 descriptors, and
/// the edge holds one per TCP connection (QUIC connections share one UDP socket), so
/// `limits.max_connections` = 10,000 needs more than 10,000. Warns when even the hard
/// limit is short of that: connections past it are refused by the kernel (`EMFILE` at
/// accept) rather than by the edge's own cap.
fn raise_fd_limit(max_connections: u32) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the one struct passed.
    let soft = unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
        lim.rlim_cur
    };
    let need = u64::from(max_connections) + 256;
    if soft < need {
        tracing::warn!(
            nofile = soft,
            need,
            "RLIMIT_NOFILE is below what limits.max_connections needs (a descriptor per TCP connection); \
             raise it (ulimit -n, LimitNOFILE=) or lower limits.max_connections"
        );
    }
}

/// Runs the edge until SIGINT/SIGTERM, then shuts down gracefully.
pub fn run(a: EdgeArgs) -> anyhow::Result<()> {
    let config = a.config()?;
    let mut period = period_gear(&a, &config)?;
    // Floo with polled policies: its model is swapped while the edge runs
    // (gearbox_edge::control).
    let floo_slot = match &mut period {
        Some(pg)
            if a.gear.as_deref() == Some("floo") && config.control.as_ref().is_some_and(|c| c.policies.is_some()) =>
        {
            let gear = std::mem::replace(&mut pg.gear, Box::new(FixedCca(gearbox_cc::Cca::Cubic)));
            let (swappable, slot) = gearbox_edge::control::SwappablePeriodGear::new(gear);
            pg.gear = Box::new(swappable);
            Some(slot)
        }
        _ => None,
    };
    raise_fd_limit(config.limits.max_connections);
    let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    rt.block_on(async move {
        let mut gears = static_gears(&config);
        if let Some(pg) = period {
            gears.set_period_gear(pg);
        }
        let mut edge = Edge::bind(config, gears).await?;
        if let (Some(slot), Some(poller)) = (floo_slot, edge.policies()) {
            poller.on(
                gearbox_edge::control::FLOO_GEAR,
                gearbox_edge::control::floo_loader(slot),
            );
            // The copy on disk is what period_gear loaded; this marks it as running.
            let (_, failed) = poller.load_from_disk();
            for f in failed {
                tracing::error!(policy = f, "policy: the copy on disk cannot be loaded");
            }
        }
        eprintln!(
            "gearbox edge: https://{} (h2, http/1.1) and h3 on udp {}{}",
            edge.tcp_addr(),
            edge.quic_addr(),
            edge.admin_addr()
                .map(|a| format!("; metrics on http://{a}/metrics"))
                .unwrap_or_default()
        );
        edge.serve(gearbox_edge::shutdown_signal()).await;
        eprintln!("gearbox edge: stopped");
        Ok(())
    })
}
