//! The Cwnd Table file (docs/tcpwise.md): parsing, validation and lookup.
//!
//! Prefixes are matched by hand rather than with an IP-prefix crate: the table is
//! indexed by prefix, and a lookup masks the client's address to each prefix length the
//! table uses, longest first (a few hash lookups, whatever the table's size; TCP WISE's
//! population is thousands of /24s x 24 hours); the kernel side does its own match in a
//! BPF LPM trie. That is a few dozen lines, not a dependency.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The smallest initial window a table may set (TCP WISE §IV-C: IW ≥ 3).
pub const MIN_IW: u32 = 3;
/// The largest `cap` a table may declare, packets.
pub const MAX_CAP: u32 = 1000;
/// The most IWs one entry's set may hold (the fast start's five, TCP WISE §IV-C3, fit;
/// the kernel's map holds this many, `gearbox_bpf::iw::MAX_SET`).
pub const MAX_SET: usize = 8;

/// A client address prefix, or `others` (every client no prefix matches).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Prefix {
    /// An address and the number of leading bits that must match.
    Net(IpAddr, u8),
    /// The pool of every other client.
    Others,
}

impl Prefix {
    /// Parses `a.b.c.d/len`, `x:y::/len` (a bare address is a full-length prefix) or
    /// `others`. Host bits below the length are cleared.
    pub fn parse(s: &str) -> Result<Prefix, String> {
        if s == "others" {
            return Ok(Prefix::Others);
        }
        let (addr, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let ip: IpAddr = addr
            .parse()
            .map_err(|_| format!("{s:?} is not an IP prefix (a.b.c.0/24, x:y:z::/48 or \"others\")"))?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let len = match len {
            Some(l) => l
                .parse::<u8>()
                .ok()
                .filter(|&l| l <= max)
                .ok_or_else(|| format!("{s:?}: prefix length must be 0..={max}"))?,
            None => max,
        };
        Ok(Prefix::Net(mask(ip, len), len))
    }

    /// Whether `ip` is inside this prefix (`others` contains nothing by itself).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match *self {
            Prefix::Net(net, len) => same_family(net, ip).is_some_and(|ip| mask(ip, len) == net),
            Prefix::Others => false,
        }
    }

    /// Prefix length in bits (0 for `others`, which only matches when nothing else does).
    pub fn bits(&self) -> u8 {
        match *self {
            Prefix::Net(_, l) => l,
            Prefix::Others => 0,
        }
    }

    /// Whether this is the `others` pool.
    pub fn is_others(&self) -> bool {
        *self == Prefix::Others
    }
}

impl std::fmt::Display for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Prefix::Net(ip, len) => write!(f, "{ip}/{len}"),
            Prefix::Others => f.write_str("others"),
        }
    }
}

/// `ip` in the family of `net` (an IPv4-mapped IPv6 client matches IPv4 prefixes).
fn same_family(net: IpAddr, ip: IpAddr) -> Option<IpAddr> {
    match (net, ip) {
        (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => Some(ip),
        (IpAddr::V4(_), IpAddr::V6(v6)) => v6.to_ipv4_mapped().map(IpAddr::V4),
        (IpAddr::V6(_), IpAddr::V4(_)) => None,
    }
}

fn mask(ip: IpAddr, len: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let m = if len == 0 { 0 } else { u32::MAX << (32 - u32::from(len)) };
            IpAddr::V4((bits & m).into())
        }
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let m = if len == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(len))
            };
            IpAddr::V6((bits & m).into())
        }
    }
}

/// One `[[cluster]]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Which clients.
    pub prefix: Prefix,
    /// For which hour of day (UTC); `None`: every hour without an entry of its own.
    pub hour: Option<u8>,
    /// The set under test, packets: α first, then β (and more, e.g. the fast start's).
    pub iw: Vec<u32>,
    /// Probability a connection draws α; the others share the rest equally.
    pub chance_alpha: f64,
    /// The learner's current best, if it wrote one.
    pub best: Option<u32>,
    /// The learner's words on the last change.
    pub reason: Option<String>,
}

/// A validated Cwnd Table.
#[derive(Debug, Clone)]
pub struct CwndTable {
    /// Increases with every table the learner writes.
    pub version: u64,
    /// Largest IW allowed in the table, packets.
    pub cap: u32,
    /// Entries, longest prefix first (then hour-specific before hourless).
    entries: Vec<Entry>,
    /// Each prefix's entries (indices into `entries`, hour-specific first).
    by_prefix: HashMap<Prefix, Vec<usize>>,
    /// The prefix lengths the table uses, per family (`true`: IPv4), longest first.
    lengths: Vec<(bool, u8)>,
}

impl PartialEq for CwndTable {
    fn eq(&self, other: &Self) -> bool {
        // The index follows from the entries.
        (self.version, self.cap, &self.entries) == (other.version, other.cap, &other.entries)
    }
}

/// What a client gets in a given hour.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    /// The entry's prefix that matched (`Others` when none did).
    pub prefix: Prefix,
    /// The set, α first.
    pub iw: Vec<u32>,
    /// Probability of α.
    pub chance_alpha: f64,
}

impl View {
    /// The IW a connection draws for `u`, uniform in [0, 1): α when `u < chance_alpha`,
    /// else one of the others, each with an equal share of `1 - chance_alpha` (for two
    /// IWs: β). The BPF program draws the same way (`bpf/iw.bpf.c`).
    pub fn draw(&self, u: f64) -> (usize, u32) {
        let n = self.iw.len();
        if n < 2 || u < self.chance_alpha {
            return (0, self.iw[0]);
        }
        let rest = ((u - self.chance_alpha) / (1.0 - self.chance_alpha) * (n - 1) as f64) as usize;
        let k = 1 + rest.min(n - 2);
        (k, self.iw[k])
    }
}

/// A table file that cannot be used; the message names the file, line and field.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct TableError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong and where.
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTable {
    version: u64,
    cap: u32,
    #[serde(default)]
    #[allow(dead_code)]
    created_unix_ms: Option<f64>,
    #[serde(default)]
    cluster: Vec<toml::Spanned<RawEntry>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    prefix: String,
    hour: Option<u8>,
    iw: Vec<u32>,
    chance_alpha: Option<f64>,
    best: Option<u32>,
    reason: Option<String>,
}

impl CwndTable {
    /// Reads and validates a table file.
    pub fn load(path: &Path) -> Result<CwndTable, TableError> {
        let text = std::fs::read_to_string(path).map_err(|e| TableError {
            path: path.to_path_buf(),
            message: format!("cannot read: {e}"),
        })?;
        CwndTable::parse(&text).map_err(|message| TableError {
            path: path.to_path_buf(),
            message,
        })
    }

    /// Parses and validates a table's text; the error names the line and field.
    pub fn parse(text: &str) -> Result<CwndTable, String> {
        let raw: RawTable = toml::from_str(text).map_err(|e| e.to_string().trim_end().replace('\n', " "))?;
        if raw.cap < MIN_IW || raw.cap > MAX_CAP {
            return Err(format!("cap: must be in [{MIN_IW}, {MAX_CAP}], got {}", raw.cap));
        }
        let mut entries: Vec<Entry> = Vec::with_capacity(raw.cluster.len());
        let mut seen: HashSet<(Prefix, Option<u8>)> = HashSet::with_capacity(raw.cluster.len());
        // Where each line starts, once: an entry's line is a binary search, not a count
        // from the top of the file (tables run to tens of thousands of entries).
        let line_starts: Vec<usize> = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        for (i, spanned) in raw.cluster.iter().enumerate() {
            let line = line_starts.partition_point(|&start| start <= spanned.span().start);
            let at = |field: &str, msg: String| format!("line {line}: cluster[{i}].{field}: {msg}");
            let e = spanned.get_ref();
            let prefix = Prefix::parse(&e.prefix).map_err(|m| at("prefix", m))?;
            if let Some(h) = e.hour.filter(|&h| h > 23) {
                return Err(at("hour", format!("must be 0..=23, got {h}")));
            }
            if e.iw.len() < 2 || e.iw.len() > MAX_SET {
                return Err(at(
                    "iw",
                    format!(
                        "must hold 2 to {MAX_SET} IWs (α, β, ...; [n, n] for one), got {}",
                        e.iw.len()
                    ),
                ));
            }
            for (k, &w) in e.iw.iter().enumerate() {
                if w < MIN_IW || w > raw.cap {
                    return Err(at(
                        &format!("iw[{k}]"),
                        format!("must be in [{MIN_IW}, cap = {}], got {w}", raw.cap),
                    ));
                }
            }
            let chance_alpha = e.chance_alpha.unwrap_or(0.5);
            if !(0.0..=1.0).contains(&chance_alpha) {
                return Err(at("chance_alpha", format!("must be in [0, 1], got {chance_alpha}")));
            }
            if !seen.insert((prefix, e.hour)) {
                return Err(at(
                    "prefix",
                    format!(
                        "a second entry for {prefix}{}",
                        e.hour.map_or(String::new(), |h| format!(" at hour {h}"))
                    ),
                ));
            }
            entries.push(Entry {
                prefix,
                hour: e.hour,
                iw: e.iw.clone(),
                chance_alpha,
                best: e.best,
                reason: e.reason.clone(),
            });
        }
        entries.sort_by(|a, b| {
            b.prefix
                .bits()
                .cmp(&a.prefix.bits())
                .then(a.prefix.is_others().cmp(&b.prefix.is_others()))
                .then(b.hour.is_some().cmp(&a.hour.is_some()))
        });
        let mut by_prefix: HashMap<Prefix, Vec<usize>> = HashMap::new();
        let mut lengths: Vec<(bool, u8)> = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            by_prefix.entry(e.prefix).or_default().push(i);
            if let Prefix::Net(net, len) = e.prefix {
                let key = (net.is_ipv4(), len);
                if !lengths.contains(&key) {
                    lengths.push(key);
                }
            }
        }
        Ok(CwndTable {
            version: raw.version,
            cap: raw.cap,
            entries,
            by_prefix,
            lengths,
        })
    }

    /// Every entry, longest prefix first.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The entry a client at `ip` gets in `hour`: the longest prefix that contains it
    /// and has an entry for that hour or for every hour (the hour's own first), else
    /// `others`; `None` when nothing applies (the stack's default window).
    pub fn lookup(&self, ip: IpAddr, hour: u8) -> Option<View> {
        let in_hour = |prefix: &Prefix| {
            self.by_prefix.get(prefix).and_then(|idx| {
                idx.iter()
                    .map(|&i| &self.entries[i])
                    .find(|e| e.hour.is_none_or(|h| h == hour))
            })
        };
        let v4 = same_family(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), ip);
        self.lengths
            .iter()
            .find_map(|&(is_v4, len)| {
                let ip = if is_v4 { v4? } else { ip.is_ipv6().then_some(ip)? };
                in_hour(&Prefix::Net(mask(ip, len), len))
            })
            .or_else(|| in_hour(&Prefix::Others))
            .map(|e| View {
                prefix: e.prefix,
                iw: e.iw.clone(),
                chance_alpha: e.chance_alpha,
            })
    }

    /// The table as it stands in `hour`: for every prefix, the entry that applies then
    /// (what the kernel's map holds for that hour).
    pub fn for_hour(&self, hour: u8) -> Vec<View> {
        let mut out: Vec<View> = Vec::new();
        let mut kept: HashSet<Prefix> = HashSet::new();
        for e in self.entries.iter().filter(|e| e.hour.is_none_or(|h| h == hour)) {
            // Entries are sorted hour-specific first within a prefix: keep the first.
            if kept.insert(e.prefix) {
                out.push(View {
                    prefix: e.prefix,
                    iw: e.iw.clone(),
                    chance_alpha: e.chance_alpha,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = r#"
version = 3
cap = 100

[[cluster]]
prefix = "10.1.0.0/16"
iw = [10, 15]

[[cluster]]
prefix = "10.1.2.0/24"
iw = [20, 25]
chance_alpha = 0.25

[[cluster]]
prefix = "10.1.2.0/24"
hour = 13
iw = [30, 35]

[[cluster]]
prefix = "others"
iw = [10, 10]

[[cluster]]
prefix = "2001:db8:1::/48"
iw = [40, 45]
"#;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_longest_prefix_and_the_hours_own_entry_win() {
        let t = CwndTable::parse(TABLE).unwrap();
        assert_eq!(t.version, 3);
        let v = t.lookup(ip("10.1.2.7"), 5).unwrap();
        assert_eq!(
            (v.prefix.to_string(), v.iw.as_slice(), v.chance_alpha),
            ("10.1.2.0/24".into(), &[20, 25][..], 0.25)
        );
        assert_eq!(t.lookup(ip("10.1.2.7"), 13).unwrap().iw, [30, 35]);
        assert_eq!(t.lookup(ip("10.1.9.7"), 13).unwrap().iw, [10, 15]);
        let o = t.lookup(ip("192.0.2.1"), 13).unwrap();
        assert_eq!((o.prefix, o.iw), (Prefix::Others, vec![10, 10]));
        assert_eq!(t.lookup(ip("2001:db8:1:5::1"), 0).unwrap().iw, [40, 45]);
        // An IPv4-mapped IPv6 client matches IPv4 prefixes.
        assert_eq!(t.lookup(ip("::ffff:10.1.2.7"), 5).unwrap().iw, [20, 25]);
        let hour13: Vec<_> = t
            .for_hour(13)
            .into_iter()
            .map(|v| (v.prefix.to_string(), v.iw))
            .collect();
        assert!(hour13.contains(&("10.1.2.0/24".into(), vec![30, 35])));
        assert_eq!(hour13.len(), 4, "{hour13:?}");
    }

    #[test]
    fn the_fast_start_set_is_accepted_and_drawn_alpha_at_its_chance_the_rest_equally() {
        let t = CwndTable::parse(
            "version = 1\ncap = 100\n[[cluster]]\nprefix = \"others\"\niw = [10, 15, 20, 25, 30]\nchance_alpha = 0.2\n",
        )
        .unwrap();
        let v = t.lookup(ip("192.0.2.1"), 3).unwrap();
        assert_eq!(v.iw, vec![10, 15, 20, 25, 30]);
        // u in [0, 1): α below 0.2, then four equal parts of 0.2 each.
        let at = |u: f64| v.draw(u).1;
        assert_eq!(
            [
                at(0.0),
                at(0.19),
                at(0.21),
                at(0.39),
                at(0.41),
                at(0.61),
                at(0.81),
                at(0.999_999)
            ],
            [10, 10, 15, 15, 20, 25, 30, 30]
        );
        // Two IWs: β is the rest; chance 1: always α.
        let two = View {
            prefix: Prefix::Others,
            iw: vec![10, 15],
            chance_alpha: 0.5,
        };
        assert_eq!((two.draw(0.49).1, two.draw(0.5).1, two.draw(0.999).1), (10, 15, 15));
        let one = View {
            prefix: Prefix::Others,
            iw: vec![10, 15, 20],
            chance_alpha: 1.0,
        };
        assert_eq!(one.draw(0.999_999).1, 10);
    }

    #[test]
    fn no_entry_and_no_others_leaves_the_default() {
        let t = CwndTable::parse("version = 1\ncap = 50\n[[cluster]]\nprefix = \"10.0.0.0/8\"\niw = [5, 6]\n").unwrap();
        assert_eq!(t.lookup(ip("192.0.2.1"), 0), None);
    }

    #[test]
    fn bad_tables_name_the_line_and_field() {
        let bad = |text: &str| CwndTable::parse(text).unwrap_err();
        let e = bad("version = 1\ncap = 50\n\n[[cluster]]\nprefix = \"10.0.0.0/8\"\niw = [2, 6]\n");
        assert!(e.contains("line 4: cluster[0].iw[0]") && e.contains("got 2"), "{e}");
        let e = bad("version = 1\ncap = 50\n[[cluster]]\nprefix = \"10.0.0.0/8\"\niw = [5, 60]\n");
        assert!(e.contains("cluster[0].iw[1]") && e.contains("cap = 50"), "{e}");
        let e = bad("version = 1\ncap = 5000\n");
        assert!(e.starts_with("cap:"), "{e}");
        let e = bad("version = 1\ncap = 50\n[[cluster]]\nprefix = \"10.0.0.0/33\"\niw = [5, 6]\n");
        assert!(e.contains("cluster[0].prefix"), "{e}");
        let e = bad("version = 1\ncap = 50\n[[cluster]]\nprefix = \"10.0.0.0/8\"\niw = [5, 6]\nchance_alpha = 2.0\n");
        assert!(e.contains("cluster[0].chance_alpha"), "{e}");
        let e = bad("version = 1\ncap = 50\n[[cluster]]\nprefix = \"10.0.0.0/8\"\nhour = 24\niw = [5, 6]\n");
        assert!(e.contains("cluster[0].hour"), "{e}");
        let dup = "version = 1\ncap = 50\n[[cluster]]\nprefix = \"10.0.0.0/8\"\niw = [5, 6]\n[[cluster]]\nprefix = \"10.0.0.1/8\"\niw = [5, 6]\n";
        assert!(
            bad(dup).contains("line 6: cluster[1].prefix: a second entry for 10.0.0.0/8"),
            "{}",
            bad(dup)
        );
        let e = bad("version = 1\ncap = 50\n[[cluster]]\nprefix = \"others\"\niw = [5, 6, 7, 8, 9, 10, 11, 12, 13]\n");
        assert!(
            e.contains("line 3: cluster[0].iw: must hold 2 to 8 IWs") && e.contains("got 9"),
            "{e}"
        );
        let e = bad("version = 1\ncap = 50\n[[cluster]]\nprefix = \"others\"\niw = [5]\n");
        assert!(e.contains("cluster[0].iw: must hold 2 to 8"), "{e}");
        let e = bad("version = 1\ncap = 50\n[[cluster]]\nprefix = \"others\"\niw = [5, 6, 7, 80]\n");
        assert!(e.contains("cluster[0].iw[3]") && e.contains("got 80"), "{e}");
        let e = bad("version = 1\ncap = 50\nwindow = 3\n");
        assert!(e.contains("window"), "{e}");
    }
}
