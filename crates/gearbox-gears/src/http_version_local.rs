//! The client's local trace pool and the local fine-tuning of the agent's global forest
//! (FlexHTTP §3.5.1, §3.5.2).
//!
//! **Local pool.** After each page load the client keeps one entry: the agent's network
//! measurement, the page's Table 1 features, the version used and its load time. Entries older
//! than the reservation time H are dropped (§3.5.2: "trace entries exceeding a pre-defined
//! reservation time H will not be used for the next re-training iteration").
//!
//! **Labels.** An entry takes the label of the nearest labelled cluster centre the agent
//! published with its forest (`clusters.json`, §3.5.1), computed in the agent's clustering space
//! (log of every feature, standardised, the network columns weighted; python/gearbox/flexhttp/
//! labels.py). One addition, named *local evidence*: when this client has loaded pages of one
//! cluster at least [`MIN_LOCAL_PER_VERSION`] times over each version, the cluster's label for its
//! entries is the version with the smaller local median load time — the agent's own rule (§3.3.2)
//! applied to this client's loads. Without it, local labels could only repeat the global ones and
//! a client whose path behaves unlike the pool's (its own access network, its own browser) could
//! never correct the global classifier, which is what §3.5.2's fine-tuning is for.
//!
//! **Fine-tuning a depth-4 random forest.** A forest has no gradient to continue; it is
//! fine-tuned by *adding trees*: [`LocalForest::train`] grows [`LOCAL_TREES`] trees of the same
//! depth (4, §4) on bootstrap samples of the labelled local entries (Gini splits over 3 random
//! features at each node, sqrt of the 11, scikit-learn's forest default), and the selector's P(h3)
//! is the weighted mean `(1 - w) * P_global + w * P_local` with `w = n / (n + LOCAL_HALF_WEIGHT)`
//! for `n` labelled local entries: with few entries the global forest dominates (§3.5.2: "only
//! using the local trace pool ... will make the classifier underfit"), with
//! [`LOCAL_HALF_WEIGHT`] entries both weigh the same, and the local trees never take more than
//! [`LOCAL_MAX_WEIGHT`]. This equals a forest of the global trees plus local trees whose votes are
//! scaled by `w` — the global trees are kept unchanged. Rejected: refitting the whole forest on
//! the global training rows plus the local ones (a 100-tree refit on every client, and the local
//! rows would be a few among thousands: no change where the client differs); continuing the global
//! trees' leaves with local counts (a depth-4 tree's leaves are too coarse to isolate the local
//! region, so one client's loads would move decisions everywhere in the leaf).
//!
//! Sans-IO: entries carry their wall-clock time, `now` is passed in; the files (the pool as JSON
//! lines, `clusters.json`) are read and written by the caller's shell.

use std::path::Path;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::http_version::{HttpVersion, NetworkFeatures, PageFeatures, NETWORK_FEATURES, PAGE_FEATURES};

/// Features per entry: the three network ones then Table 1's eight page ones.
pub const N_FEATURES: usize = 11;
/// Trees added by the local fine-tuning.
pub const LOCAL_TREES: usize = 25;
/// Depth of every tree, as the global forest's (§4: "the tree depth is set to 4").
pub const MAX_DEPTH: usize = 4;
/// Labelled local entries at which the local trees weigh as much as the global forest.
pub const LOCAL_HALF_WEIGHT: f64 = 20.0;
/// The local trees' largest weight.
pub const LOCAL_MAX_WEIGHT: f64 = 0.8;
/// Local loads of each version in one cluster before the client's own medians label it.
pub const MIN_LOCAL_PER_VERSION: usize = 3;
/// Default reservation time H, hours (a week, the cache's horizon, §3.4).
pub const DEFAULT_POOL_HOURS: f64 = 168.0;

/// Why a local file cannot be used; names the file and field.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// The file cannot be read.
    #[error("{path}: {message}")]
    Io {
        /// The file.
        path: String,
        /// What failed.
        message: String,
    },
    /// A field is missing or wrong.
    #[error("{path}: {field}: {message}")]
    Field {
        /// The file (and line, for JSON lines).
        path: String,
        /// The field.
        field: String,
        /// What is wrong.
        message: String,
    },
}

/// One local trace entry (§3.5.1): the upload format of the agent's trace pool
/// (`POST /v1/flexhttp/traces`), with the page load time as its Speed Index proxy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalEntry {
    /// When the load happened, Unix milliseconds.
    pub time_unix_ms: f64,
    /// The version the page was loaded with.
    pub http_version: HttpVersion,
    /// The page's load time, ms (our loader's stand-in for Speed Index; the pool's field name).
    pub speed_index_ms: f64,
    /// The agent's measurement when the page was loaded.
    pub network: NetworkFeatures,
    /// The page's Table 1 features.
    pub page: PageFeatures,
}

impl LocalEntry {
    /// The feature vector in the forest's order (`NETWORK_FEATURES` then `PAGE_FEATURES`).
    pub fn features(&self) -> [f64; N_FEATURES] {
        features(&self.network, &self.page)
    }
}

/// The feature vector of a decision, in the forest's order.
pub fn features(net: &NetworkFeatures, page: &PageFeatures) -> [f64; N_FEATURES] {
    [
        net.rtt_ms,
        net.loss_rate,
        net.capacity_mbps,
        page.all_files,
        page.all_bytes,
        page.css_files,
        page.css_bytes,
        page.js_files,
        page.js_bytes,
        page.image_files,
        page.image_bytes,
    ]
}

/// The local trace pool: entries in time order.
#[derive(Debug, Clone, Default)]
pub struct LocalPool {
    /// The entries.
    pub entries: Vec<LocalEntry>,
}

impl LocalPool {
    /// Reads a pool written by [`LocalPool::save`] (JSON lines); a missing file is an empty pool.
    /// A bad line is an error naming the file, line and field.
    pub fn load(path: &Path) -> Result<LocalPool, LocalError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(LocalPool::default()),
            Err(e) => {
                return Err(LocalError::Io {
                    path: path.display().to_string(),
                    message: e.to_string(),
                })
            }
        };
        let mut entries = Vec::new();
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let e: LocalEntry = serde_json::from_str(line).map_err(|e| LocalError::Field {
                path: format!("{}:{}", path.display(), i + 1),
                field: "entry".into(),
                message: e.to_string(),
            })?;
            entries.push(e);
        }
        Ok(LocalPool { entries })
    }

    /// Writes the pool (JSON lines), through a temporary file renamed over the old one.
    pub fn save(&self, path: &Path) -> Result<(), LocalError> {
        let io = |e: std::io::Error| LocalError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        };
        let mut text = String::new();
        for e in &self.entries {
            text.push_str(&serde_json::to_string(e).expect("entries serialise"));
            text.push('\n');
        }
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// Drops entries older than `hours` before `now_unix_s` (the reservation time H); returns
    /// how many went.
    pub fn drop_older_than(&mut self, hours: f64, now_unix_s: f64) -> usize {
        let cut_ms = (now_unix_s - hours * 3600.0) * 1000.0;
        let before = self.entries.len();
        self.entries.retain(|e| e.time_unix_ms >= cut_ms);
        before - self.entries.len()
    }
}

/// The agent's k-means centres and their labels (`clusters.json` in the forest's folder).
#[derive(Debug, Clone)]
pub struct Clusters {
    mean: Vec<f64>,
    std: Vec<f64>,
    weight: Vec<f64>,
    centres: Vec<Vec<f64>>,
    labels: Vec<Option<HttpVersion>>,
}

#[derive(Deserialize)]
struct ClustersFile {
    features: Vec<String>,
    mean: Vec<f64>,
    std: Vec<f64>,
    weight: Vec<f64>,
    centres: Vec<Vec<f64>>,
    labels: Vec<Option<HttpVersion>>,
}

impl Clusters {
    /// Reads `clusters.json`; its feature list must be the forest's, in order.
    pub fn load(path: &Path) -> Result<Clusters, LocalError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| LocalError::Io {
            path: p.clone(),
            message: e.to_string(),
        })?;
        let f: ClustersFile = serde_json::from_str(&text).map_err(|e| LocalError::Field {
            path: p.clone(),
            field: "clusters".into(),
            message: e.to_string(),
        })?;
        let bad = |field: &str, message: String| LocalError::Field {
            path: p.clone(),
            field: field.into(),
            message,
        };
        let want: Vec<&str> = NETWORK_FEATURES.iter().chain(PAGE_FEATURES.iter()).copied().collect();
        if f.features != want {
            return Err(bad("features", format!("expected {want:?}, found {:?}", f.features)));
        }
        for (name, v) in [("mean", &f.mean), ("std", &f.std), ("weight", &f.weight)] {
            if v.len() != N_FEATURES {
                return Err(bad(name, format!("expected {N_FEATURES} values, found {}", v.len())));
            }
        }
        if let Some((i, c)) = f.centres.iter().enumerate().find(|(_, c)| c.len() != N_FEATURES) {
            return Err(bad(
                &format!("centres[{i}]"),
                format!("expected {N_FEATURES} values, found {}", c.len()),
            ));
        }
        if f.labels.len() != f.centres.len() {
            return Err(bad(
                "labels",
                format!("{} labels for {} centres", f.labels.len(), f.centres.len()),
            ));
        }
        Ok(Clusters {
            mean: f.mean,
            std: f.std,
            weight: f.weight,
            centres: f.centres,
            labels: f.labels,
        })
    }

    /// The point in the clustering space (labels.py: `(scaled(x) - mean) / std * weight`).
    fn embed(&self, x: &[f64; N_FEATURES]) -> [f64; N_FEATURES] {
        let mut z = scaled(x);
        for (j, v) in z.iter_mut().enumerate() {
            let s = if self.std[j] == 0.0 { 1.0 } else { self.std[j] };
            *v = (*v - self.mean[j]) / s * self.weight[j];
        }
        z
    }

    /// The nearest centre (any, labelled or not) and its label.
    pub fn nearest(&self, x: &[f64; N_FEATURES]) -> Option<(usize, Option<HttpVersion>)> {
        let z = self.embed(x);
        let dist = |c: &Vec<f64>| c.iter().zip(&z).map(|(a, b)| (a - b) * (a - b)).sum::<f64>();
        (0..self.centres.len())
            .min_by(|&a, &b| dist(&self.centres[a]).total_cmp(&dist(&self.centres[b])))
            .map(|i| (i, self.labels[i]))
    }

    /// The label of the nearest *labelled* centre (§3.5.1), as the agent's `Labelling.nearest`.
    pub fn nearest_label(&self, x: &[f64; N_FEATURES]) -> Option<HttpVersion> {
        let z = self.embed(x);
        let dist = |c: &Vec<f64>| c.iter().zip(&z).map(|(a, b)| (a - b) * (a - b)).sum::<f64>();
        (0..self.centres.len())
            .filter(|&i| self.labels[i].is_some())
            .min_by(|&a, &b| dist(&self.centres[a]).total_cmp(&dist(&self.centres[b])))
            .and_then(|i| self.labels[i])
    }

    /// Number of centres.
    pub fn len(&self) -> usize {
        self.centres.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.centres.is_empty()
    }
}

/// The agent's clustering space before standardisation (python/gearbox/flexhttp/features.py,
/// `scaled`): log10 of the loss rate above 1e-5, ln of RTT and capacity above 1e-3, ln(1 + x) of
/// counts and bytes.
pub fn scaled(x: &[f64; N_FEATURES]) -> [f64; N_FEATURES] {
    let mut out = [0.0; N_FEATURES];
    for (j, v) in x.iter().enumerate() {
        out[j] = match j {
            1 => v.max(1e-5).log10(),
            0 | 2 => v.max(1e-3).ln(),
            _ => v.max(0.0).ln_1p(),
        };
    }
    out
}

/// Where a local entry's label came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelSource {
    /// The nearest labelled global centre (§3.5.1).
    Centre,
    /// This client's own medians in the entry's cluster (module doc, "local evidence").
    LocalEvidence,
}

/// The labelled local entries: (features, label, source); entries without any label are left out.
pub fn label_entries(pool: &LocalPool, clusters: &Clusters) -> Vec<([f64; N_FEATURES], HttpVersion, LabelSource)> {
    let assigned: Vec<(usize, [f64; N_FEATURES])> = pool
        .entries
        .iter()
        .filter_map(|e| {
            let x = e.features();
            clusters.nearest(&x).map(|(c, _)| (c, x))
        })
        .collect();
    // Per cluster, the client's own median load time of each version.
    let mut local: std::collections::HashMap<usize, HttpVersion> = std::collections::HashMap::new();
    let mut clusters_seen: Vec<usize> = assigned.iter().map(|(c, _)| *c).collect();
    clusters_seen.sort_unstable();
    clusters_seen.dedup();
    for c in clusters_seen {
        let times = |v: HttpVersion| -> Vec<f64> {
            pool.entries
                .iter()
                .zip(&assigned)
                .filter(|(e, (ci, _))| *ci == c && e.http_version == v)
                .map(|(e, _)| e.speed_index_ms)
                .collect()
        };
        let (h2, h3) = (times(HttpVersion::H2), times(HttpVersion::H3));
        if h2.len() >= MIN_LOCAL_PER_VERSION && h3.len() >= MIN_LOCAL_PER_VERSION {
            let v = if crate::median(&h3) < crate::median(&h2) {
                HttpVersion::H3
            } else {
                HttpVersion::H2
            };
            local.insert(c, v);
        }
    }
    assigned
        .into_iter()
        .filter_map(|(c, x)| match local.get(&c) {
            Some(v) => Some((x, *v, LabelSource::LocalEvidence)),
            None => clusters.nearest_label(&x).map(|v| (x, v, LabelSource::Centre)),
        })
        .collect()
}

/// One tree node: a split or a leaf with P(h3).
#[derive(Debug, Clone)]
enum Node {
    Leaf(f64),
    Split {
        feature: usize,
        threshold: f64,
        left: Box<Node>,
        right: Box<Node>,
    },
}

impl Node {
    fn predict(&self, x: &[f64; N_FEATURES]) -> f64 {
        match self {
            Node::Leaf(p) => *p,
            Node::Split {
                feature,
                threshold,
                left,
                right,
            } => {
                if x[*feature] <= *threshold {
                    left.predict(x)
                } else {
                    right.predict(x)
                }
            }
        }
    }
}

/// The trees the local fine-tuning adds (module doc), and their weight.
#[derive(Debug, Clone)]
pub struct LocalForest {
    trees: Vec<Node>,
    /// Labelled local entries they were grown on.
    pub entries: usize,
    /// Entries labelled by the client's own medians rather than a centre.
    pub by_local_evidence: usize,
    /// `w` of `(1 - w) * P_global + w * P_local`.
    pub weight: f64,
}

impl LocalForest {
    /// Grows [`LOCAL_TREES`] depth-4 trees on bootstrap samples of `labelled`; none when it is
    /// empty. `seed` seeds the bootstrap and the feature draws.
    pub fn train(labelled: &[([f64; N_FEATURES], HttpVersion, LabelSource)], seed: u64) -> Option<LocalForest> {
        if labelled.is_empty() {
            return None;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let xs: Vec<[f64; N_FEATURES]> = labelled.iter().map(|l| l.0).collect();
        let ys: Vec<f64> = labelled.iter().map(|l| f64::from(l.1 == HttpVersion::H3)).collect();
        let n = xs.len();
        let trees = (0..LOCAL_TREES)
            .map(|_| {
                let sample: Vec<usize> = (0..n).map(|_| rng.random_range(0..n)).collect();
                grow(&xs, &ys, &sample, 0, &mut rng)
            })
            .collect();
        let entries = labelled.len();
        Some(LocalForest {
            trees,
            entries,
            by_local_evidence: labelled.iter().filter(|l| l.2 == LabelSource::LocalEvidence).count(),
            weight: (entries as f64 / (entries as f64 + LOCAL_HALF_WEIGHT)).min(LOCAL_MAX_WEIGHT),
        })
    }

    /// The local trees' mean P(h3).
    pub fn predict(&self, x: &[f64; N_FEATURES]) -> f64 {
        self.trees.iter().map(|t| t.predict(x)).sum::<f64>() / self.trees.len() as f64
    }

    /// `(1 - w) * p_global + w * P_local`.
    pub fn blend(&self, p_global: f64, x: &[f64; N_FEATURES]) -> f64 {
        (1.0 - self.weight) * p_global + self.weight * self.predict(x)
    }
}

/// Features tried at each split: sqrt(11) rounded down, scikit-learn's forest default.
const MAX_FEATURES: usize = N_FEATURES / 3;

fn grow(xs: &[[f64; N_FEATURES]], ys: &[f64], idx: &[usize], depth: usize, rng: &mut ChaCha8Rng) -> Node {
    let n = idx.len() as f64;
    let pos: f64 = idx.iter().map(|&i| ys[i]).sum();
    let p = pos / n;
    if depth >= MAX_DEPTH || idx.len() < 2 || pos == 0.0 || pos == n {
        return Node::Leaf(p);
    }
    // The features in random order; the first MAX_FEATURES that can split the node are tried
    // (a constant one does not count, as in scikit-learn's search).
    let mut order: Vec<usize> = (0..N_FEATURES).collect();
    for i in 0..N_FEATURES - 1 {
        let j = rng.random_range(i..N_FEATURES);
        order.swap(i, j);
    }
    let mut tried = 0;
    let gini = |pos: f64, n: f64| {
        let q = pos / n;
        2.0 * q * (1.0 - q)
    };
    let mut best: Option<(f64, usize, f64)> = None;
    for &f in &order {
        if tried == MAX_FEATURES {
            break;
        }
        let mut sorted: Vec<usize> = idx.to_vec();
        sorted.sort_by(|&a, &b| xs[a][f].total_cmp(&xs[b][f]));
        if xs[sorted[0]][f] == xs[sorted[sorted.len() - 1]][f] {
            continue;
        }
        tried += 1;
        let mut left_pos = 0.0;
        for k in 1..sorted.len() {
            left_pos += ys[sorted[k - 1]];
            let (a, b) = (xs[sorted[k - 1]][f], xs[sorted[k]][f]);
            if a == b {
                continue;
            }
            let (nl, nr) = (k as f64, n - k as f64);
            let score = nl * gini(left_pos, nl) + nr * gini(pos - left_pos, nr);
            if best.is_none_or(|(s, _, _)| score < s) {
                best = Some((score, f, a + (b - a) / 2.0));
            }
        }
    }
    let Some((score, feature, threshold)) = best else {
        return Node::Leaf(p);
    };
    if score >= n * gini(pos, n) {
        return Node::Leaf(p);
    }
    let (l, r): (Vec<usize>, Vec<usize>) = idx.iter().partition(|&&i| xs[i][feature] <= threshold);
    Node::Split {
        feature,
        threshold,
        left: Box::new(grow(xs, ys, &l, depth + 1, rng)),
        right: Box::new(grow(xs, ys, &r, depth + 1, rng)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(rtt_ms: f64, loss_rate: f64, capacity_mbps: f64) -> NetworkFeatures {
        NetworkFeatures {
            rtt_ms,
            loss_rate,
            capacity_mbps,
        }
    }

    fn page() -> PageFeatures {
        PageFeatures {
            all_files: 30.0,
            all_bytes: 8e5,
            css_files: 2.0,
            css_bytes: 4e4,
            js_files: 5.0,
            js_bytes: 1.8e5,
            image_files: 20.0,
            image_bytes: 5e5,
        }
    }

    fn entry(t_s: f64, v: HttpVersion, ms: f64, n: NetworkFeatures) -> LocalEntry {
        LocalEntry {
            time_unix_ms: t_s * 1000.0,
            http_version: v,
            speed_index_ms: ms,
            network: n,
            page: page(),
        }
    }

    #[test]
    fn entries_older_than_h_are_dropped() {
        let mut pool = LocalPool {
            entries: vec![
                entry(1000.0, HttpVersion::H2, 500.0, net(30.0, 0.0, 10.0)),
                entry(1000.0 + 7200.0, HttpVersion::H3, 500.0, net(30.0, 0.0, 10.0)),
            ],
        };
        assert_eq!(pool.drop_older_than(1.5, 1000.0 + 7200.0 + 60.0), 1);
        assert_eq!(pool.entries.len(), 1);
        assert_eq!(pool.entries[0].http_version, HttpVersion::H3);
    }

    #[test]
    fn the_pool_survives_a_save_and_a_bad_line_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pool.jsonl");
        let pool = LocalPool {
            entries: vec![entry(5.0, HttpVersion::H3, 420.0, net(80.0, 0.005, 7.0))],
        };
        pool.save(&path).unwrap();
        assert_eq!(LocalPool::load(&path).unwrap().entries, pool.entries);
        std::fs::write(&path, "{\"time_unix_ms\": 1}\n").unwrap();
        let err = LocalPool::load(&path).unwrap_err().to_string();
        assert!(err.contains("pool.jsonl:1") && err.contains("missing field"), "{err}");
    }

    #[test]
    fn a_tree_learns_a_threshold() {
        // h3 above 150 ms, h2 below: every local tree should find it, whatever else varies.
        let labelled: Vec<_> = (0..40)
            .map(|i| {
                let rtt = 20.0 + 10.0 * i as f64;
                let x = features(&net(rtt, 0.001 * (i % 5) as f64, 5.0 + (i % 3) as f64), &page());
                let v = if rtt > 150.0 { HttpVersion::H3 } else { HttpVersion::H2 };
                (x, v, LabelSource::Centre)
            })
            .collect();
        let f = LocalForest::train(&labelled, 3).unwrap();
        let low = features(&net(40.0, 0.002, 6.0), &page());
        let high = features(&net(400.0, 0.002, 6.0), &page());
        assert!(f.predict(&low) < 0.3, "{}", f.predict(&low));
        assert!(f.predict(&high) > 0.7, "{}", f.predict(&high));
        assert!((f.weight - 40.0 / 60.0).abs() < 1e-12);
    }

    #[test]
    fn the_nearest_centre_is_the_one_the_agents_python_labelling_picks() {
        // Rows and labels written by scripts/flexhttp-test-forest.py (`Labelling.nearest`) from the
        // test forest's clusters.json.
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/flexhttp");
        let clusters = Clusters::load(&dir.join("clusters.json")).unwrap();
        let want: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("nearest.json")).unwrap()).unwrap();
        let rows = want["rows"].as_array().unwrap();
        let labels = want["labels"].as_array().unwrap();
        assert_eq!(rows.len(), 64);
        let mut both = std::collections::HashSet::new();
        for (row, label) in rows.iter().zip(labels) {
            let v: Vec<f64> = row.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
            let x: [f64; N_FEATURES] = v.try_into().unwrap();
            let got = clusters.nearest_label(&x).map(HttpVersion::name);
            assert_eq!(got, label.as_str(), "{x:?}");
            both.insert(got);
        }
        assert_eq!(both.len(), 2, "the rows reach centres of both labels");
    }
}
