//! Sends the spool's sealed batches to `POST /v1/telemetry` (or another batch route of the same
//! shape, [`Uploader::with_path`]: the FlexHTTP agent's `/v1/flexhttp/traces`), oldest first.
//!
//! A batch leaves the spool on a final answer: 200 (stored), 400 with a count (its bad
//! records rejected and named, the good ones stored: resending would fail the same way),
//! 413 (too large to ever be taken; counted as dropped). Anything else (no answer, a cut
//! connection, 5xx) leaves it where it is, and it is sent again with the same key after a
//! backoff that doubles from 250 ms to 30 s, with jitter so that a fleet of edges does not
//! come back in step after an outage. A refused token (401, 403) is logged and retried at
//! the longest backoff: the records stay spooled until the token is fixed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;

use super::{ControlClient, ControlError, Spool};

const BACKOFF_MIN: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Counters of an uploader.
#[derive(Debug, Default)]
pub struct UploadStats {
    /// Batches the service answered for.
    pub sent_batches: AtomicU64,
    /// Records the service stored.
    pub stored_records: AtomicU64,
    /// Records the service rejected (named in its answer, logged).
    pub rejected_records: AtomicU64,
    /// Batches the service had already stored (an answer lost, the batch sent again).
    pub duplicates: AtomicU64,
    /// Failed attempts (no answer, 5xx, refused token).
    pub failures: AtomicU64,
    /// Batches refused as too large (413).
    pub too_large: AtomicU64,
}

/// Sends a spool's batches.
#[derive(Debug)]
pub struct Uploader {
    spool: Arc<Spool>,
    client: ControlClient,
    batch_interval: Duration,
    /// The route batches go to.
    path: String,
    /// One sender at a time: the background loop and a final upload at shutdown.
    sending: tokio::sync::Mutex<()>,
    /// Counters.
    pub stats: UploadStats,
}

impl Uploader {
    /// An uploader of `spool`'s batches through `client`; a batch with records is sealed
    /// at least every `batch_interval`.
    pub fn new(spool: Arc<Spool>, client: ControlClient, batch_interval: Duration) -> Uploader {
        Uploader {
            spool,
            client,
            batch_interval,
            path: "/v1/telemetry".to_string(),
            sending: tokio::sync::Mutex::new(()),
            stats: UploadStats::default(),
        }
    }

    /// Sends to `path` (a route taking `{"records": [...]}` with an `Idempotency-Key`, as
    /// `/v1/telemetry` does) instead of `/v1/telemetry`.
    pub fn with_path(mut self, path: &str) -> Uploader {
        self.path = path.to_string();
        self
    }

    /// The spool.
    pub fn spool(&self) -> &Arc<Spool> {
        &self.spool
    }

    /// Sends the sealed batches in order; stops at the first without a final answer.
    pub async fn send_all(&self) -> Result<(), ControlError> {
        let _one = self.sending.lock().await;
        for batch in self.spool.batches() {
            let (body, n) = match batch.body() {
                Ok(b) => b,
                // Dropped by the bound meanwhile.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(ControlError::io(&batch.path, e)),
            };
            let reply = self
                .client
                .request(
                    http::Method::POST,
                    &self.path,
                    &[
                        ("idempotency-key", batch.key.clone()),
                        ("content-type", "application/json".into()),
                    ],
                    Bytes::from(body),
                )
                .await;
            let reply = match reply {
                Ok(r) => r,
                Err(e) => {
                    self.stats.failures.fetch_add(1, Ordering::Relaxed);
                    return Err(e);
                }
            };
            match reply.status {
                200 | 400 | 413 => {
                    let answer: serde_json::Value = serde_json::from_slice(&reply.body).unwrap_or_default();
                    let count = |k: &str| answer.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
                    self.stats.sent_batches.fetch_add(1, Ordering::Relaxed);
                    self.stats.stored_records.fetch_add(count("stored"), Ordering::Relaxed);
                    self.stats
                        .rejected_records
                        .fetch_add(count("rejected"), Ordering::Relaxed);
                    if answer.get("duplicate").and_then(serde_json::Value::as_bool) == Some(true) {
                        self.stats.duplicates.fetch_add(1, Ordering::Relaxed);
                    }
                    if reply.status == 413 {
                        self.stats.too_large.fetch_add(1, Ordering::Relaxed);
                        tracing::error!(batch = batch.seq, records = n, answer = %reply.text(), "control plane: batch too large, dropped");
                    } else if reply.status == 400 {
                        tracing::warn!(batch = batch.seq, answer = %reply.text(), "control plane rejected records of a batch");
                    }
                    if let Err(e) = std::fs::remove_file(&batch.path) {
                        if e.kind() != std::io::ErrorKind::NotFound {
                            return Err(ControlError::io(&batch.path, e));
                        }
                    }
                }
                401 | 403 => {
                    self.stats.failures.fetch_add(1, Ordering::Relaxed);
                    return Err(ControlError::Refused {
                        status: reply.status,
                        body: reply.text(),
                    });
                }
                status => {
                    self.stats.failures.fetch_add(1, Ordering::Relaxed);
                    return Err(ControlError::Status {
                        status,
                        body: reply.text(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Seals the open batch and tries to send everything for up to `grace`; true when the
    /// spool is empty. What is left stays for the next start.
    pub async fn finish(&self, grace: Duration) -> bool {
        if let Err(e) = self.spool.seal() {
            tracing::error!(error = %e, "spool: cannot seal the last batch");
        }
        let sent = tokio::time::timeout(grace, async {
            loop {
                match self.send_all().await {
                    Ok(()) => return true,
                    Err(ControlError::Refused { .. }) => return false,
                    Err(_) => tokio::time::sleep(BACKOFF_MIN).await,
                }
            }
        })
        .await
        .unwrap_or(false);
        if !sent {
            tracing::warn!(
                batches = self.spool.batches().len(),
                spool = %self.spool.dir().display(),
                "control plane: batches left in the spool for the next start"
            );
        }
        sent
    }

    /// Seals and sends in the background until the uploader is dropped.
    pub fn spawn(me: &Arc<Uploader>) -> tokio::task::JoinHandle<()> {
        let weak: Weak<Uploader> = Arc::downgrade(me);
        let interval = me.batch_interval;
        tokio::spawn(async move {
            let mut backoff = Duration::ZERO;
            loop {
                // Only the spool is held while waiting: a dropped uploader ends the task.
                let Some(spool) = weak.upgrade().map(|me| me.spool.clone()) else {
                    break;
                };
                // Woken early by a sealed batch unless backing off.
                if backoff.is_zero() {
                    let _ = tokio::time::timeout(interval, spool.sealed()).await;
                } else {
                    tokio::time::sleep(backoff).await;
                }
                let Some(me) = weak.upgrade() else { break };
                if let Err(e) = me.spool.seal_if_older(me.batch_interval) {
                    tracing::error!(error = %e, "spool: cannot seal a batch");
                }
                match me.send_all().await {
                    Ok(()) => backoff = Duration::ZERO,
                    Err(e) => {
                        backoff = match e {
                            ControlError::Refused { .. } => BACKOFF_MAX,
                            _ => (backoff * 2).clamp(BACKOFF_MIN, BACKOFF_MAX),
                        };
                        let jittered = jitter(backoff);
                        tracing::warn!(error = %e, retry_in = ?jittered, "control plane: upload failed; batches stay spooled");
                        backoff = jittered;
                    }
                }
            }
        })
    }
}

/// `d` times a factor in [0.75, 1.25).
fn jitter(d: Duration) -> Duration {
    let r = u64::from_str_radix(&super::random_hex()[..8], 16).unwrap_or(0) as f64 / f64::from(u32::MAX);
    d.mul_f64(0.75 + 0.5 * r).min(BACKOFF_MAX)
}
