//! Per-request telemetry: one JSON line per request, written by both ends.
//!
//! docs/architecture.md principle 4: learners, reports and tests read these records and
//! nothing else. The schema is documented in `docs/telemetry.md`; a field added
//! here must be added there. Records are flat JSON objects so that DuckDB,
//! pandas and `jq` read them without a schema of their own.
//!
//! The writer is a channel to one background task that owns the file: request
//! handlers never block on disk, and [`TelemetrySink::flush`] is how graceful
//! shutdown makes sure nothing is lost. With a control plane ([`TelemetrySink::open`]),
//! the same task appends each record to the upload spool too (crate::control), and
//! [`TelemetrySink::finish`] makes a last attempt to send it at shutdown.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use crate::control::{ControlClient, ControlConfig, ControlError, Spool, Uploader};

// The records themselves belong to the gear shape (gears read them); they keep their
// path here for the writers and readers of telemetry.
pub use gearbox_gear_api::record::{ClientRecord, EdgeRecord, Protocol, Side, TransportSnapshot, SCHEMA_VERSION};
pub use gearbox_gear_api::DecisionId;

/// Milliseconds since the Unix epoch, as a float (sub-millisecond precision).
pub fn unix_ms_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1e3)
        .unwrap_or(0.0)
}

enum Msg {
    Line(String),
    Flush(oneshot::Sender<()>),
}

/// Where records go: a JSON-lines file, the control plane's upload spool, both, or
/// nowhere. Cheap to clone.
#[derive(Clone)]
pub struct TelemetrySink {
    tx: Option<mpsc::UnboundedSender<Msg>>,
    uploader: Option<Arc<Uploader>>,
    final_upload: Duration,
}

impl TelemetrySink {
    /// A sink that drops every record.
    pub fn disabled() -> Self {
        TelemetrySink {
            tx: None,
            uploader: None,
            final_upload: Duration::ZERO,
        }
    }

    /// Appends records to `path` (created if missing). `-` means standard output.
    /// Must be called inside a tokio runtime.
    pub fn to_file(path: &Path) -> std::io::Result<Self> {
        Self::start(Some(path), None)
    }

    /// Records to `file` if given and, with `control`, to its spool, from which a
    /// background task uploads them in batches (docs/control.md, "Native upload"). Must
    /// be called inside a tokio runtime.
    pub fn open(file: Option<&Path>, control: Option<&ControlConfig>) -> Result<Self, ControlError> {
        let Some(cfg) = control else {
            return match file {
                Some(p) => Self::to_file(p).map_err(|e| ControlError::io(p, e)),
                None => Ok(Self::disabled()),
            };
        };
        let client = ControlClient::new(cfg)?;
        let spool = Arc::new(Spool::open(&cfg.spool, cfg.batch_records, cfg.max_spool_bytes)?);
        let uploader = Arc::new(Uploader::new(
            spool.clone(),
            client,
            Duration::from_millis(cfg.batch_interval_ms),
        ));
        Uploader::spawn(&uploader);
        let mut sink =
            Self::start(file, Some(spool)).map_err(|e| ControlError::io(file.unwrap_or(Path::new("-")), e))?;
        sink.uploader = Some(uploader);
        sink.final_upload = Duration::from_millis(cfg.final_upload_ms);
        Ok(sink)
    }

    fn start(path: Option<&Path>, spool: Option<Arc<Spool>>) -> std::io::Result<Self> {
        let out: Option<Box<dyn Write + Send>> = match path {
            None => None,
            Some(p) if p == Path::new("-") => Some(Box::new(std::io::stdout())),
            Some(p) => {
                if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)?;
                }
                Some(Box::new(File::options().create(true).append(true).open(p)?))
            }
        };
        let (tx, mut rx) = mpsc::unbounded_channel::<Msg>();
        let name: PathBuf = path.map_or_else(|| PathBuf::from("(none)"), Path::to_path_buf);
        tokio::task::spawn_blocking(move || {
            let mut w = out.map(BufWriter::new);
            let flush = |w: &mut Option<BufWriter<Box<dyn Write + Send>>>| -> std::io::Result<()> {
                if let Some(w) = w {
                    w.flush()?;
                }
                if let Some(s) = &spool {
                    s.flush()?;
                }
                Ok(())
            };
            while let Some(msg) = rx.blocking_recv() {
                let res = match msg {
                    // Flushed whenever the queue runs dry: a burst is written in one go,
                    // and a reader of the file (a learner, a test) sees every record
                    // as soon as the writer is idle, not at shutdown.
                    Msg::Line(l) => {
                        let mut r = match &mut w {
                            Some(w) => w.write_all(l.as_bytes()).and_then(|_| w.write_all(b"\n")),
                            None => Ok(()),
                        };
                        if let Some(s) = &spool {
                            if let Err(e) = s.append(&l) {
                                tracing::error!(spool = %s.dir().display(), error = %e, "telemetry spool write failed");
                            }
                        }
                        if r.is_ok() && rx.is_empty() {
                            r = flush(&mut w);
                        }
                        r
                    }
                    Msg::Flush(done) => {
                        let r = flush(&mut w);
                        let _ = done.send(());
                        r
                    }
                };
                if let Err(e) = res {
                    tracing::error!(file = %name.display(), error = %e, "telemetry write failed");
                }
            }
            let _ = flush(&mut w);
        });
        Ok(TelemetrySink {
            tx: Some(tx),
            uploader: None,
            final_upload: Duration::ZERO,
        })
    }

    /// The control plane uploader, when records go to one.
    pub fn uploader(&self) -> Option<&Arc<Uploader>> {
        self.uploader.as_ref()
    }

    /// At shutdown: every record on disk, then (with a control plane) a last attempt,
    /// bounded by its `final_upload_ms`, to send the spool; what is left is sent by the
    /// next start.
    pub async fn finish(&self) {
        self.flush().await;
        if let Some(u) = &self.uploader {
            u.finish(self.final_upload).await;
        }
    }

    /// Queues one record.
    pub fn write<T: Serialize>(&self, record: &T) {
        if let Some(tx) = &self.tx {
            match serde_json::to_string(record) {
                Ok(line) => {
                    let _ = tx.send(Msg::Line(line));
                }
                Err(e) => tracing::error!(error = %e, "telemetry record not serialisable"),
            }
        }
    }

    /// Waits until every record queued so far is on disk.
    pub async fn flush(&self) {
        if let Some(tx) = &self.tx {
            let (done, wait) = oneshot::channel();
            if tx.send(Msg::Flush(done)).is_ok() {
                let _ = wait.await;
            }
        }
    }
}
