//! Per-request telemetry: one JSON line per request, written by both ends.
//!
//! docs/architecture.md principle 4: learners, reports and tests read these records and
//! nothing else. The schema is documented in `docs/telemetry.md`; a field added
//! here must be added there. Records are flat JSON objects so that DuckDB,
//! pandas and `jq` read them without a schema of their own.
//!
//! The writer is a channel to one background task that owns the file: request
//! handlers never block on disk, and [`TelemetrySink::flush`] is how graceful
//! shutdown makes sure nothing is lost.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

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

/// Where records go: a JSON-lines file (or nowhere). Cheap to clone.
#[derive(Clone)]
pub struct TelemetrySink {
    tx: Option<mpsc::UnboundedSender<Msg>>,
}

impl TelemetrySink {
    /// A sink that drops every record.
    pub fn disabled() -> Self {
        TelemetrySink { tx: None }
    }

    /// Appends records to `path` (created if missing). `-` means standard output.
    /// Must be called inside a tokio runtime.
    pub fn to_file(path: &Path) -> std::io::Result<Self> {
        let out: Box<dyn Write + Send> = if path == Path::new("-") {
            Box::new(std::io::stdout())
        } else {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)?;
            }
            Box::new(File::options().create(true).append(true).open(path)?)
        };
        let (tx, mut rx) = mpsc::unbounded_channel::<Msg>();
        let name: PathBuf = path.to_path_buf();
        tokio::task::spawn_blocking(move || {
            let mut w = BufWriter::new(out);
            while let Some(msg) = rx.blocking_recv() {
                let res = match msg {
                    // Flushed whenever the queue runs dry: a burst is written in one go,
                    // and a reader of the file (a learner, a test) sees every record
                    // as soon as the writer is idle, not at shutdown.
                    Msg::Line(l) => w
                        .write_all(l.as_bytes())
                        .and_then(|_| w.write_all(b"\n"))
                        .and_then(|_| if rx.is_empty() { w.flush() } else { Ok(()) }),
                    Msg::Flush(done) => {
                        let r = w.flush();
                        let _ = done.send(());
                        r
                    }
                };
                if let Err(e) = res {
                    tracing::error!(file = %name.display(), error = %e, "telemetry write failed");
                }
            }
            let _ = w.flush();
        });
        Ok(TelemetrySink { tx: Some(tx) })
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
