//! Keeps a process's policies on the registry's active versions (docs/control.md, "Policy
//! registry").
//!
//! Each poll sends `If-None-Match` with the last answer's tag (304: nothing changed) and
//! `X-Gearbox-Policies` with the versions running (the dashboard shows them). For a gear
//! this process runs (one with a [`Loader`]) whose version changed: download the artifact,
//! check its sha256 against the poll's, unpack it into `ROOT/GEAR/vN` beside the running
//! version, hand the folder to the loader (it parses the files and swaps the running
//! policy, or refuses), and only then point `ROOT/GEAR/current` at it (a symlink replaced
//! by rename, atomic). A corrupt artifact or a loader's refusal deletes `vN`, keeps the
//! running policy and `current`, and is counted; the next poll asks again. At start,
//! [`PolicyPoller::load_from_disk`] loads each gear's `current`: the last good copy, which
//! is all a restarted process has while the control plane is down. Two versions are kept
//! per gear.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::{ControlClient, ControlError};

/// Loads a gear's policy folder and swaps it in, or says why not (the old one stays).
pub type Loader = Box<dyn FnMut(&Path) -> Result<(), String> + Send>;

/// What one poll did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PollOutcome {
    /// Gears swapped to a new version: (gear, version).
    pub swapped: Vec<(String, u64)>,
    /// Versions refused, with why.
    pub refused: Vec<String>,
    /// The answer was 304.
    pub unchanged: bool,
}

/// The version `ROOT/GEAR/current` points at, and its folder.
pub fn current_version(root: &Path, gear: &str) -> Option<(u64, PathBuf)> {
    let dir = root.join(gear);
    let target = std::fs::read_link(dir.join("current")).ok()?;
    let name = target.to_str()?;
    let v = name.strip_prefix('v')?.parse().ok()?;
    let path = dir.join(name);
    path.is_dir().then_some((v, path))
}

/// The poller of one process.
pub struct PolicyPoller {
    client: ControlClient,
    root: PathBuf,
    loaders: BTreeMap<String, Loader>,
    running: BTreeMap<String, u64>,
    etag: Option<String>,
    fixed_interval: Option<Duration>,
    service_interval: Option<Duration>,
    keep: usize,
    refusals: u64,
}

impl std::fmt::Debug for PolicyPoller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyPoller")
            .field("root", &self.root)
            .field("gears", &self.loaders.keys().collect::<Vec<_>>())
            .field("running", &self.running)
            .finish_non_exhaustive()
    }
}

impl PolicyPoller {
    /// A poller keeping `root` (created if missing); `interval` overrides the service's.
    pub fn new(client: ControlClient, root: &Path, interval: Option<Duration>) -> Result<Self, ControlError> {
        std::fs::create_dir_all(root).map_err(|e| ControlError::io(root, e))?;
        Ok(PolicyPoller {
            client,
            root: root.to_path_buf(),
            loaders: BTreeMap::new(),
            running: BTreeMap::new(),
            etag: None,
            fixed_interval: interval,
            service_interval: None,
            keep: 2,
            refusals: 0,
        })
    }

    /// Runs `gear`'s policies through `loader`.
    pub fn on(&mut self, gear: &str, loader: Loader) {
        self.loaders.insert(gear.to_string(), loader);
    }

    /// The versions running now, per gear.
    pub fn running(&self) -> &BTreeMap<String, u64> {
        &self.running
    }

    /// Versions refused so far.
    pub fn refusals(&self) -> u64 {
        self.refusals
    }

    /// Loads the last good copy (`current`) of each gear not running yet, if there is one;
    /// returns the gears and versions loaded, and what could not be.
    pub fn load_from_disk(&mut self) -> (Vec<(String, u64)>, Vec<String>) {
        let mut loaded = Vec::new();
        let mut failed = Vec::new();
        for (gear, loader) in &mut self.loaders {
            if self.running.contains_key(gear) {
                continue;
            }
            let Some((v, path)) = current_version(&self.root, gear) else {
                continue;
            };
            match loader(&path) {
                Ok(()) => {
                    self.running.insert(gear.clone(), v);
                    loaded.push((gear.clone(), v));
                }
                Err(e) => failed.push(format!("{gear} v{v} ({}): {e}", path.display())),
            }
        }
        (loaded, failed)
    }

    /// One poll.
    pub async fn poll_once(&mut self) -> Result<PollOutcome, ControlError> {
        let mut headers = vec![(
            "x-gearbox-policies",
            self.running
                .iter()
                .map(|(g, v)| format!("{g}={v}"))
                .collect::<Vec<_>>()
                .join(","),
        )];
        if let Some(tag) = &self.etag {
            headers.push(("if-none-match", tag.clone()));
        }
        let reply = self
            .client
            .request(http::Method::GET, "/v1/policies", &headers, Bytes::new())
            .await?;
        match reply.status {
            304 => {
                return Ok(PollOutcome {
                    unchanged: true,
                    ..PollOutcome::default()
                })
            }
            200 => {}
            401 | 403 => {
                return Err(ControlError::Refused {
                    status: reply.status,
                    body: reply.text(),
                })
            }
            s => {
                return Err(ControlError::Status {
                    status: s,
                    body: reply.text(),
                })
            }
        }
        let answer: serde_json::Value = serde_json::from_slice(&reply.body).map_err(|e| ControlError::Status {
            status: 200,
            body: format!("the poll's answer is not JSON: {e}"),
        })?;
        if let Some(s) = answer.get("poll_interval_s").and_then(serde_json::Value::as_f64) {
            if s.is_finite() && s > 0.0 {
                self.service_interval = Some(Duration::from_secs_f64(s));
            }
        }
        let mut out = PollOutcome::default();
        let policies = answer
            .get("policies")
            .and_then(serde_json::Value::as_object)
            .cloned()
            .unwrap_or_default();
        for (gear, want) in policies {
            if !self.loaders.contains_key(&gear) {
                continue;
            }
            let version = want.get("version").and_then(serde_json::Value::as_u64);
            let sha = want.get("sha256").and_then(serde_json::Value::as_str);
            let url = want.get("url").and_then(serde_json::Value::as_str);
            let (Some(version), Some(sha), Some(url)) = (version, sha, url) else {
                out.refused
                    .push(format!("{gear}: the poll's answer lacks version, sha256 or url"));
                continue;
            };
            if self.running.get(&gear) == Some(&version) {
                continue;
            }
            match self.take(&gear, version, sha, url).await {
                Ok(()) => {
                    tracing::info!(gear, version, "policy swapped");
                    self.running.insert(gear.clone(), version);
                    out.swapped.push((gear, version));
                }
                Err(e) => {
                    tracing::error!(gear, version, error = %e, kept = ?self.running.get(&gear), "policy refused; the running one stays");
                    out.refused.push(format!("{gear} v{version}: {e}"));
                }
            }
        }
        self.refusals += out.refused.len() as u64;
        // After a refusal, ask again next time rather than trusting the tag.
        self.etag = if out.refused.is_empty() {
            reply.header("etag").map(str::to_string)
        } else {
            None
        };
        Ok(out)
    }

    async fn take(&mut self, gear: &str, version: u64, sha: &str, url: &str) -> Result<(), ControlError> {
        let reply = self.client.request(http::Method::GET, url, &[], Bytes::new()).await?;
        if reply.status != 200 {
            return Err(ControlError::Status {
                status: reply.status,
                body: reply.text(),
            });
        }
        let digest: String = Sha256::digest(&reply.body).iter().map(|b| format!("{b:02x}")).collect();
        if digest != sha {
            return Err(ControlError::Policy(format!(
                "sha256 mismatch: the registry says {sha}, the download hashes to {digest}"
            )));
        }
        let files = super::tar::unpack(&reply.body).map_err(ControlError::Policy)?;
        let gear_dir = self.root.join(gear);
        let name = format!("v{version}");
        let target = gear_dir.join(&name);
        let partial = gear_dir.join(format!("{name}.partial"));
        let io = |p: &Path, e| ControlError::io(p, e);
        let _ = std::fs::remove_dir_all(&partial);
        for (rel, content) in &files {
            let path = partial.join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
            }
            std::fs::write(&path, content).map_err(|e| io(&path, e))?;
        }
        if target.exists() && current_version(&self.root, gear).map(|c| c.0) != Some(version) {
            let _ = std::fs::remove_dir_all(&target);
        }
        std::fs::rename(&partial, &target).map_err(|e| io(&target, e))?;
        let loader = self.loaders.get_mut(gear).expect("only gears with a loader are taken");
        if let Err(e) = loader(&target) {
            let _ = std::fs::remove_dir_all(&target);
            return Err(ControlError::Policy(format!("refused by the loader: {e}")));
        }
        let tmp = gear_dir.join("current.tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&name, &tmp).map_err(|e| io(&tmp, e))?;
        std::fs::rename(&tmp, gear_dir.join("current")).map_err(|e| io(&gear_dir, e))?;
        self.prune(&gear_dir, version);
        Ok(())
    }

    fn prune(&self, gear_dir: &Path, current: u64) {
        let mut versions: Vec<u64> = std::fs::read_dir(gear_dir)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.path().is_dir())
                    .filter_map(|e| e.file_name().to_str()?.strip_prefix('v')?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        versions.sort_unstable();
        let excess = versions.len().saturating_sub(self.keep);
        for v in versions.into_iter().filter(|&v| v != current).take(excess) {
            let _ = std::fs::remove_dir_all(gear_dir.join(format!("v{v}")));
        }
    }

    /// How long until the next poll.
    pub fn interval(&self) -> Duration {
        self.fixed_interval
            .or(self.service_interval)
            .unwrap_or(Duration::from_secs(30))
    }

    /// Polls until the returned handle is aborted (or the runtime ends). A failed poll is
    /// logged and retried at the next interval.
    pub fn spawn(mut self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                if let Err(e) = self.poll_once().await {
                    tracing::warn!(error = %e, running = ?self.running, "policy poll failed; running policies stay");
                }
                tokio::time::sleep(self.interval()).await;
            }
        })
    }
}
