//! TCP WISE on the edge (TCP WISE §IV-A, Connection Manager): the Cwnd Table given as
//! `--cwnd-table FILE`, reloaded when the file changes, applied to QUIC connections by
//! the initial-window gear at accept and to TCP connections by the kernel's `sock_ops`
//! program (`gearbox-bpf`), whose draw the edge reads back for each connection's
//! records.
//!
//! A reload is atomic: a file that fails to parse or validate keeps the last good table
//! and the log says why (file, line, field). The kernel's maps hold the table as it
//! stands in the current hour; they are refilled on reload and when the hour turns.
//! When the BPF program cannot be attached (or `cwnd_routes` asks for it), TCP gets the
//! table through per-prefix routes with `initcwnd`, one IW per entry per learning interval
//! ([`crate::iw_route`]), if the edge is root; otherwise TCP connections keep the kernel's
//! default window (QUIC still follows the table). The log says which.

use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use gearbox_bpf::iw::{IwEntry, IwProgram};

use crate::iw_route::RouteIw;
use gearbox_gear_api::{ClientCluster, IwChoice};
use gearbox_gears::tcpwise::{CwndTable, Prefix, SharedTable, TableError};

/// How often the table file is checked for changes.
const RELOAD_POLL: Duration = Duration::from_secs(1);

/// The table and the kernel program of one edge.
pub struct TcpWise {
    path: PathBuf,
    table: SharedTable,
    kernel: Option<IwProgram>,
    routes: Option<RouteIw>,
    /// What the kernel's maps were filled with, newest last (the last two fills): a
    /// connection the kernel drew for just before a refill is accepted just after it, so
    /// its draw is labelled with the version whose entry it matches, not the newest.
    filled: std::sync::Mutex<Vec<Fill>>,
}

/// A prefix as the kernel's maps key it (`None`: `others`).
type KernelPrefix = Option<(std::net::IpAddr, u8)>;

/// One filling of the kernel's maps: the table's version and each prefix's set.
struct Fill {
    version: u64,
    sets: Vec<(KernelPrefix, Vec<u32>)>,
}

impl std::fmt::Debug for TcpWise {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpWise")
            .field("path", &self.path)
            .field("kernel", &self.kernel.is_some())
            .field("routes", &self.routes.is_some())
            .finish()
    }
}

fn hour_now() -> u8 {
    let ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3);
    ClientCluster::of(std::net::Ipv4Addr::UNSPECIFIED.into(), ms).hour
}

impl TcpWise {
    /// Loads the table (an error names the file, line and field) and attaches the
    /// kernel program to the edge's TCP `listener` (a failure is logged: TCP keeps the
    /// kernel's default window).
    pub fn start(path: PathBuf, listener: &tokio::net::TcpListener, routes: bool) -> Result<Arc<TcpWise>, TableError> {
        let table = CwndTable::load(&path)?;
        Ok(Self::start_with(path, table, listener, routes))
    }

    /// As [`TcpWise::start`], with `table` until the file at `path` appears or changes (a
    /// policies folder with no Cwnd Table yet: crate::control).
    /// `routes`: TCP through per-prefix routes even where the BPF program would attach.
    pub fn start_with(
        path: PathBuf,
        table: CwndTable,
        listener: &tokio::net::TcpListener,
        routes: bool,
    ) -> Arc<TcpWise> {
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
        let kernel = if routes {
            None
        } else {
            match IwProgram::attach(listener, port) {
                Ok(p) => Some(p),
                Err(e) => {
                    tracing::warn!(error = %e, "TCP WISE: the kernel's initial-window program could not be attached");
                    None
                }
            }
        };
        let routes = if kernel.is_some() {
            None
        } else {
            let seed = gearbox_dataplane::telemetry::unix_ms_now().to_bits();
            match RouteIw::new(seed) {
                Ok(r) => {
                    tracing::warn!(
                        "TCP WISE: TCP takes the table through per-prefix routes with initcwnd (`ip route replace PREFIX ... initcwnd N`): one IW per entry per learning interval (each new table, each hour), not per connection; records say source \"route\""
                    );
                    Some(r)
                }
                Err(e) => {
                    tracing::warn!(
                        error = %e,
                        "TCP WISE: no route fallback either; TCP connections keep the kernel's default initial window (QUIC follows the table)"
                    );
                    None
                }
            }
        };
        let me = Arc::new(TcpWise {
            path,
            table: SharedTable::new(table),
            kernel,
            routes,
            filled: std::sync::Mutex::new(Vec::new()),
        });
        me.fill_kernel(hour_now());
        tracing::info!(table = %me.path.display(), version = me.table.get().version, "TCP WISE Cwnd Table loaded");
        me
    }

    /// Swaps in a new table now (a policy pulled from the control plane), the kernel's
    /// maps included.
    pub fn swap(&self, table: CwndTable) {
        tracing::info!(version = table.version, "TCP WISE Cwnd Table swapped");
        self.table.set(table);
        self.fill_kernel(hour_now());
    }

    /// Puts the routes the route fallback changed back as they were found (at shutdown).
    pub fn restore_routes(&self) {
        if let Some(r) = &self.routes {
            r.restore_all();
        }
    }

    /// The table the QUIC gear draws from.
    pub fn table(&self) -> SharedTable {
        self.table.clone()
    }

    fn fill_kernel(&self, hour: u8) {
        if let Some(routes) = &self.routes {
            let table = self.table.get();
            let said = routes.apply(&table, hour);
            if !said.is_empty() {
                tracing::info!(
                    version = table.version,
                    hour,
                    routes = %said.join("; "),
                    "TCP WISE: routes set for this learning interval"
                );
            }
        }
        let Some(kernel) = &self.kernel else { return };
        let table = self.table.get();
        let entries: Vec<IwEntry> = table
            .for_hour(hour)
            .into_iter()
            .map(|v| IwEntry {
                prefix: match v.prefix {
                    Prefix::Net(ip, len) => Some((ip, len)),
                    Prefix::Others => None,
                },
                iw: v.iw,
                chance_alpha: v.chance_alpha,
            })
            .collect();
        if let Err(e) = kernel.fill(&entries) {
            tracing::warn!(error = %e, "TCP WISE: cannot update the kernel's table");
            return;
        }
        let mut filled = self.filled.lock().unwrap_or_else(|p| p.into_inner());
        filled.push(Fill {
            version: table.version,
            sets: entries.into_iter().map(|e| (e.prefix, e.iw)).collect(),
        });
        let excess = filled.len().saturating_sub(2);
        filled.drain(..excess);
    }

    /// The version of the table whose kernel entry gave this draw: the newest fill that
    /// holds the draw's prefix with the draw's set (the one before, for a connection drawn
    /// just before a refill), else the newest.
    fn version_of(&self, prefix: KernelPrefix, iw_set: &[u32]) -> u64 {
        let filled = self.filled.lock().unwrap_or_else(|p| p.into_inner());
        filled
            .iter()
            .rev()
            .find(|f| f.sets.iter().any(|(p, set)| *p == prefix && set.as_slice() == iw_set))
            .or(filled.last())
            .map_or_else(|| self.table.get().version, |f| f.version)
    }

    /// The initial window the kernel drew for the TCP connection on `socket`.
    pub fn tcp_draw(&self, socket: &socket2::SockRef<'_>, hour: u8) -> Option<IwChoice> {
        if let Some(routes) = &self.routes {
            let peer = socket.peer_addr().ok()?.as_socket()?.ip();
            // Accepted, nothing sent yet: the window is still the route's initcwnd.
            let initial = gearbox_dataplane::transport::tcp_info(&**socket)
                .ok()
                .map(|i| i.tcpi_snd_cwnd);
            return routes.choice(&self.table.get(), peer, hour, initial);
        }
        let d = self.kernel.as_ref()?.take_draw(&**socket)?;
        if !d.applied {
            tracing::warn!(iw = d.iw, "TCP WISE: the kernel refused TCP_BPF_IW for a connection");
            return None;
        }
        Some(IwChoice {
            cluster: Some(d.prefix.map_or("others".to_string(), |(ip, len)| format!("{ip}/{len}"))),
            hour: Some(hour),
            // The kernel's maps are refilled from the table at every swap and hour.
            table_version: Some(self.version_of(d.prefix, &d.iw_set)),
            iw_set: Some(d.iw_set),
            iw: d.iw,
            source: "kernel".into(),
        })
    }

    /// Watches the file and the clock until the edge drops its `TcpWise`.
    pub fn spawn_reloader(me: &Arc<TcpWise>) {
        let weak: Weak<TcpWise> = Arc::downgrade(me);
        let mut stamp = file_stamp(&me.path);
        let mut hour = hour_now();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(RELOAD_POLL).await;
                let Some(me) = weak.upgrade() else { break };
                let now_stamp = file_stamp(&me.path);
                let now_hour = hour_now();
                if now_stamp != stamp {
                    stamp = now_stamp;
                    match CwndTable::load(&me.path) {
                        Ok(t) => {
                            tracing::info!(version = t.version, "TCP WISE Cwnd Table reloaded");
                            me.table.set(t);
                            me.fill_kernel(now_hour);
                        }
                        Err(e) => {
                            tracing::error!(error = %e, kept = me.table.get().version, "TCP WISE: new Cwnd Table refused; keeping the last good one");
                        }
                    }
                } else if now_hour != hour {
                    me.fill_kernel(now_hour);
                }
                hour = now_hour;
            }
        });
    }
}

/// What tells a changed file: modification time and length.
fn file_stamp(path: &std::path::Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}
