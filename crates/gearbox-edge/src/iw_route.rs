//! TCP WISE's initial window on kernel TCP without BPF (TCP WISE §IV-A, Connection
//! Manager; the route fallback of docs/tcpwise.md): per-prefix routes with `initcwnd`,
//! the way Riptide sets its windows (`ip route replace PREFIX ... initcwnd N` in the
//! edge's network namespace).
//!
//! A route holds one window for every connection to its prefix, so the A/B split cannot
//! be per connection: each table entry draws one IW of its set **per learning interval**
//! (each new table the learner writes, and each hour: [`RouteIw::apply`]) by the table's
//! rule (α at `chance_alpha`, the others sharing the rest), and every connection of that
//! interval gets it. The learner still sees both windows, in different intervals; an entry
//! with too few samples of one keeps collecting (Algorithm 1, §IV-C3).
//!
//! `others` is the default route's window (left alone when there is no default route). The
//! routes found at start are restored, and the routes added are removed, when the edge
//! drops its `RouteIw` (at shutdown). The kernel reads a route's `initcwnd` when a
//! passive connection is established (its SYN-ACK's route), so a connection accepted
//! while a route is being replaced gets the old window or the new one; its record says the
//! one the edge had set last, which may be the other in that instant.

use std::collections::HashMap;
use std::net::IpAddr;
use std::process::Command;
use std::sync::Mutex;

use gearbox_gear_api::IwChoice;
use gearbox_gears::tcpwise::{CwndTable, Prefix, View};

/// What one entry's route carries in this interval.
#[derive(Debug, Clone, PartialEq)]
struct Applied {
    iw_set: Vec<u32>,
    iw: u32,
}

#[derive(Debug, Default)]
struct State {
    /// (table version, hour) the routes were drawn for.
    drawn_for: Option<(u64, u8)>,
    /// Per prefix (`others`: the default route), what its route carries now.
    applied: HashMap<Prefix, Applied>,
    /// The table version and routes of the interval before: a connection established on
    /// the old route and accepted after the change carries the old window.
    previous: Option<(u64, HashMap<Prefix, Applied>)>,
    /// Per route touched, its line before the edge touched it (`None`: the edge added it).
    originals: HashMap<String, Option<String>>,
    /// Set at shutdown: no route is changed any more.
    stopped: bool,
}

/// The route fallback of one edge.
#[derive(Debug)]
pub struct RouteIw {
    seed: u64,
    state: Mutex<State>,
}

/// Keys of `ip route` lines kept when a route is rewritten with `initcwnd`.
const KEPT_KEYS: [&str; 7] = ["via", "dev", "src", "proto", "scope", "metric", "table"];

fn ip(args: &[&str]) -> Result<String, String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("running `ip {}`: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "`ip {}`: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ip route` arguments of a route line without its destination: the kept key-value pairs
/// (flags such as `linkdown` and the old `initcwnd` dropped).
fn route_args(line: &str) -> Vec<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut out = Vec::new();
    let mut i = 1;
    while i < words.len() {
        if KEPT_KEYS.contains(&words[i]) && i + 1 < words.len() {
            out.push(words[i].to_string());
            out.push(words[i + 1].to_string());
            i += 2;
        } else {
            i += 1;
        }
    }
    out
}

/// A uniform number in [0, 1) from `x` (splitmix64): the draw of an entry in an interval.
fn uniform(mut x: u64) -> f64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

fn prefix_hash(p: &Prefix) -> u64 {
    let s = p.to_string();
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl RouteIw {
    /// The fallback, if this process may change routes: root, and `ip` runs. `seed` makes
    /// the intervals' draws (the same seed, table and hour draw the same IWs).
    pub fn new(seed: u64) -> Result<RouteIw, String> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let uid = unsafe { libc::geteuid() };
        if uid != 0 {
            return Err(format!("changing routes needs root (running as uid {uid})"));
        }
        ip(&["-o", "route", "show"])?;
        Ok(RouteIw {
            seed,
            state: Mutex::new(State::default()),
        })
    }

    /// Sets the routes for `table` in `hour`, drawing each entry's IW for this interval,
    /// unless they were already drawn for this table version and hour. Returns what it did,
    /// one line per entry, for the log.
    pub fn apply(&self, table: &CwndTable, hour: u8) -> Vec<String> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.stopped || st.drawn_for == Some((table.version, hour)) {
            return Vec::new();
        }
        st.previous = st.drawn_for.map(|(v, _)| (v, st.applied.clone()));
        st.drawn_for = Some((table.version, hour));
        let views = table.for_hour(hour);
        let mut said = Vec::new();
        let mut keep = std::collections::HashSet::new();
        for v in &views {
            let u = uniform(self.seed ^ table.version.rotate_left(17) ^ u64::from(hour) ^ prefix_hash(&v.prefix));
            let (_, iw) = v.draw(u);
            match self.set_route(&mut st, v, iw) {
                Ok(dest) => {
                    keep.insert(dest.clone());
                    st.applied.insert(
                        v.prefix,
                        Applied {
                            iw_set: v.iw.clone(),
                            iw,
                        },
                    );
                    said.push(format!("{} ({dest}): initcwnd {iw} of {:?}", v.prefix, v.iw));
                }
                Err(e) => {
                    st.applied.remove(&v.prefix);
                    said.push(format!("{}: not applied: {e}", v.prefix));
                }
            }
        }
        // Entries gone from the table: their routes back as they were.
        let stale: Vec<String> = st.originals.keys().filter(|d| !keep.contains(*d)).cloned().collect();
        for dest in stale {
            if let Some(original) = st.originals.remove(&dest) {
                restore(&dest, original.as_deref());
            }
        }
        st.applied.retain(|p, _| views.iter().any(|v| v.prefix == *p));
        said
    }

    /// `ip route replace DEST ... initcwnd IW`; the route's destination.
    fn set_route(&self, st: &mut State, v: &View, iw: u32) -> Result<String, String> {
        let dest = match v.prefix {
            Prefix::Net(ip, len) => format!("{ip}/{len}"),
            Prefix::Others => "default".to_string(),
        };
        if !st.originals.contains_key(&dest) {
            let shown = ip(&["-o", "route", "show", "exact", &dest])?;
            let original = shown.lines().next().map(str::to_string);
            if original.is_none() && v.prefix == Prefix::Others {
                return Err("no default route: clients no prefix matches keep the kernel's window".into());
            }
            st.originals.insert(dest.clone(), original);
        }
        let base = match (&st.originals[&dest], v.prefix) {
            (Some(line), _) => route_args(line),
            (None, Prefix::Net(addr, _)) => route_to(addr)?,
            (None, Prefix::Others) => unreachable!("refused above"),
        };
        let iw_text = iw.to_string();
        let mut args: Vec<&str> = vec!["route", "replace", &dest];
        args.extend(base.iter().map(String::as_str));
        args.extend(["initcwnd", &iw_text]);
        ip(&args)?;
        Ok(dest)
    }

    /// The IW in force for a TCP client at `peer` (its entry's route), for its records.
    /// `initial_cwnd`: the connection's congestion window before it sent anything
    /// (`TCP_INFO`), which is the route's `initcwnd` when it was established; one that
    /// matches the interval before and not this one was established before the change.
    pub fn choice(&self, table: &CwndTable, peer: IpAddr, hour: u8, initial_cwnd: Option<u32>) -> Option<IwChoice> {
        let view = table.lookup(peer, hour)?;
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = st.applied.get(&view.prefix)?;
        let before = st
            .previous
            .as_ref()
            .and_then(|(v, prev)| Some((*v, prev.get(&view.prefix)?)));
        let (version, a) = match (initial_cwnd, before) {
            (Some(w), Some((v, old))) if w != now.iw && w == old.iw => (Some(v), old),
            _ => (st.drawn_for.map(|(v, _)| v), now),
        };
        Some(IwChoice {
            cluster: Some(view.prefix.to_string()),
            hour: Some(hour),
            iw_set: Some(a.iw_set.clone()),
            iw: a.iw,
            table_version: version,
            source: "route".into(),
        })
    }
}

/// The route the kernel takes to `addr` now (`ip route get`), as arguments.
fn route_to(addr: IpAddr) -> Result<Vec<String>, String> {
    let text = ip(&["-o", "route", "get", &addr.to_string()])?;
    let line = text.lines().next().ok_or_else(|| format!("no route to {addr}"))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut out = Vec::new();
    for key in ["via", "dev"] {
        if let Some(i) = words.iter().position(|w| *w == key) {
            if let Some(v) = words.get(i + 1) {
                out.push(key.to_string());
                out.push(v.to_string());
            }
        }
    }
    if !out.iter().any(|w| w == "dev") {
        return Err(format!("the route to {addr} names no device: {line}"));
    }
    Ok(out)
}

/// A route back as it was found (`None`: the edge added it; deleted).
fn restore(dest: &str, original: Option<&str>) {
    let result = match original {
        Some(line) => {
            let args = route_args(line);
            let mut a: Vec<&str> = vec!["route", "replace", dest];
            a.extend(args.iter().map(String::as_str));
            ip(&a)
        }
        None => ip(&["route", "del", dest]),
    };
    if let Err(e) = result {
        tracing::warn!(route = dest, error = %e, "TCP WISE: a route could not be restored");
    }
}

impl RouteIw {
    /// Every route touched back as it was found, and none changed after (shutdown).
    pub fn restore_all(&self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.stopped = true;
        for (dest, original) in st.originals.drain() {
            restore(&dest, original.as_deref());
        }
        st.applied.clear();
        st.previous = None;
        st.drawn_for = None;
    }
}

impl Drop for RouteIw {
    fn drop(&mut self) {
        self.restore_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_lines_keep_their_key_values_and_drop_flags_and_the_old_window() {
        let line =
            "10.1.2.0/24 via 10.0.0.2 dev eth0 proto static scope link src 10.0.0.1 metric 5 initcwnd 20 linkdown";
        assert_eq!(
            route_args(line).join(" "),
            "via 10.0.0.2 dev eth0 proto static scope link src 10.0.0.1 metric 5"
        );
    }

    #[test]
    fn interval_draws_are_uniform_and_follow_the_tables_rule() {
        let view = View {
            prefix: Prefix::Others,
            iw: vec![10, 15],
            chance_alpha: 0.5,
        };
        let n = 4000;
        let alphas = (0..n).filter(|&i| view.draw(uniform(i)).1 == 10).count();
        assert!((1800..=2200).contains(&alphas), "{alphas} of {n}");
        assert!((0..n).all(|i| (0.0..1.0).contains(&uniform(i))));
    }
}
