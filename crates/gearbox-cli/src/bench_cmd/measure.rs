//! The measurements: bulk throughput on one warm connection and the small-request rate
//! with many requests in flight, each with the CPU and UDP drops of both sides meanwhile,
//! repeats interleaved across the servers so that background load hits them alike.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use gearbox_client::{Client, ClientConfig, Request, TransportPref, Trust};

use super::proc_stats::{own_cpu_s, udp_drops};
use super::process::Server;
use super::EdgeBenchArgs;

/// One measurement, with the CPU both sides spent during it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sample {
    /// MB/s (bulk) or requests/s (small).
    pub(super) value: f64,
    /// Client CPU, percent of one core.
    pub(super) client_cpu_pct: f64,
    /// Server CPU, percent of one core.
    pub(super) server_cpu_pct: f64,
    /// UDP datagrams dropped meanwhile for a full receive buffer at the server's socket.
    pub(super) server_udp_drops: u64,
    /// The same elsewhere on the machine (the client's socket).
    pub(super) other_udp_drops: u64,
}

impl Sample {
    /// The progress line of one repeat; `value` is formatted with its precision, `unit`
    /// follows it.
    pub(super) fn log(&self, what: &str, label: &str, repeat: usize, value: &str, unit: &str) {
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
pub(super) enum Kind {
    Bulk,
    Small,
}

/// A target: a server and the paths that carry the bulk and small objects.
pub(super) struct Target<'a> {
    pub(super) label: &'static str,
    pub(super) server: &'a Server,
    pub(super) bulk_path: String,
    pub(super) small_path: String,
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
pub(super) struct Row {
    pub(super) name: String,
    pub(super) kind: Kind,
    pub(super) samples: Vec<Vec<Sample>>,
}

pub(super) async fn measure(
    a: &EdgeBenchArgs,
    size: u64,
    cert: &Path,
    targets: &[Target<'_>],
) -> anyhow::Result<Vec<Row>> {
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
