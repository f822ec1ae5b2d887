//! The bounded on-disk spool of telemetry batches.
//!
//! Layout of the folder: `open.jsonl`, the batch being filled (one record per line,
//! appended as records come); `NNNNNNNNNNNN-KEY.batch.jsonl`, sealed batches in order, the
//! idempotency key in the name. Sealing fsyncs the batch and renames it, so a sealed
//! batch is whole or absent. A record reaches the kernel (a write) as soon as the
//! telemetry writer is idle, so a crash of the process loses none; a crash of the machine
//! can lose what the kernel had not yet written of `open.jsonl`. At start a torn last line
//! of `open.jsonl` (a crash mid-write) is cut and the rest sealed as a batch of its own.
//!
//! When full (sealed batches and the open one above `max_bytes`), the oldest sealed
//! batches are deleted and counted (`dropped_batches`): in a long outage the newest
//! telemetry is the more useful, and a bound is what keeps an edge's disk from filling.
//! Rejected alternative: refusing new records when full, which would lose the present to
//! keep the past.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{random_hex, ControlError};

const OPEN: &str = "open.jsonl";
const SEALED_SUFFIX: &str = ".batch.jsonl";

/// A sealed batch in the spool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// Its file.
    pub path: PathBuf,
    /// Its order.
    pub seq: u64,
    /// Its idempotency key.
    pub key: String,
}

impl Batch {
    fn of(path: PathBuf) -> Option<Batch> {
        let name = path.file_name()?.to_str()?.strip_suffix(SEALED_SUFFIX)?;
        let (seq, key) = name.split_once('-')?;
        Some(Batch {
            seq: seq.parse().ok()?,
            key: key.to_string(),
            path,
        })
    }

    /// The batch as the service takes it: `{"records": [...]}` (the lines are JSON
    /// objects already; they are joined, not parsed again).
    pub fn body(&self) -> std::io::Result<(Vec<u8>, usize)> {
        let text = std::fs::read(&self.path)?;
        let mut body = Vec::with_capacity(text.len() + 16);
        body.extend_from_slice(b"{\"records\":[");
        let mut n = 0;
        for line in text
            .split(|&b| b == b'\n')
            .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        {
            if n > 0 {
                body.push(b',');
            }
            body.extend_from_slice(line);
            n += 1;
        }
        body.extend_from_slice(b"]}");
        Ok((body, n))
    }
}

struct Open {
    file: Option<BufWriter<File>>,
    records: usize,
    bytes: u64,
    first_at: Option<Instant>,
    seq: u64,
}

/// The spool of one process (one folder per process).
pub struct Spool {
    dir: PathBuf,
    batch_records: usize,
    max_bytes: u64,
    open: Mutex<Open>,
    dropped_batches: AtomicU64,
    sealed: tokio::sync::Notify,
}

impl std::fmt::Debug for Spool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spool").field("dir", &self.dir).finish_non_exhaustive()
    }
}

impl Spool {
    /// Opens (or creates) the spool in `dir`, sealing what a previous run left in
    /// `open.jsonl`.
    pub fn open(dir: &Path, batch_records: usize, max_bytes: u64) -> Result<Spool, ControlError> {
        std::fs::create_dir_all(dir).map_err(|e| ControlError::io(dir, e))?;
        let spool = Spool {
            dir: dir.to_path_buf(),
            batch_records: batch_records.max(1),
            max_bytes,
            open: Mutex::new(Open {
                file: None,
                records: 0,
                bytes: 0,
                first_at: None,
                seq: 0,
            }),
            dropped_batches: AtomicU64::new(0),
            sealed: tokio::sync::Notify::new(),
        };
        for entry in std::fs::read_dir(dir).map_err(|e| ControlError::io(dir, e))?.flatten() {
            if entry.file_name().to_string_lossy().ends_with(".tmp") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        let seq = spool.batches().last().map_or(0, |b| b.seq);
        let open_path = dir.join(OPEN);
        let mut open = spool.lock();
        open.seq = seq;
        if let Ok(text) = std::fs::read(&open_path) {
            // Whole lines only: a line without its newline was torn by a crash mid-write.
            let whole = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            let records = text[..whole].split(|&b| b == b'\n').filter(|l| !l.is_empty()).count();
            if whole < text.len() {
                tracing::warn!(spool = %dir.display(), bytes = text.len() - whole, "spool: a torn last record (a crash mid-write) cut");
                let f = File::options()
                    .write(true)
                    .open(&open_path)
                    .map_err(|e| ControlError::io(&open_path, e))?;
                f.set_len(whole as u64).map_err(|e| ControlError::io(&open_path, e))?;
            }
            if records > 0 {
                open.records = records;
                open.bytes = whole as u64;
                spool
                    .seal_locked(&mut open)
                    .map_err(|e| ControlError::io(&open_path, e))?;
            } else {
                let _ = std::fs::remove_file(&open_path);
            }
        }
        drop(open);
        Ok(spool)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends one record (a JSON object on one line); a full batch is sealed.
    pub fn append(&self, line: &str) -> std::io::Result<()> {
        let mut open = self.lock();
        if open.file.is_none() {
            let f = File::options().create(true).append(true).open(self.dir.join(OPEN))?;
            open.file = Some(BufWriter::with_capacity(64 << 10, f));
        }
        if let Some(f) = open.file.as_mut() {
            f.write_all(line.as_bytes())?;
            f.write_all(b"\n")?;
        }
        open.records += 1;
        open.bytes += line.len() as u64 + 1;
        open.first_at.get_or_insert_with(Instant::now);
        if open.records >= self.batch_records {
            self.seal_locked(&mut open)?;
        }
        Ok(())
    }

    /// Hands what was appended to the kernel (no fsync: see the module's words).
    pub fn flush(&self) -> std::io::Result<()> {
        match self.lock().file.as_mut() {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }

    /// Seals the open batch if it has records; true if one was sealed.
    pub fn seal(&self) -> std::io::Result<bool> {
        let mut open = self.lock();
        self.seal_locked(&mut open)
    }

    /// Seals the open batch if its first record is older than `age`.
    pub fn seal_if_older(&self, age: Duration) -> std::io::Result<bool> {
        let mut open = self.lock();
        match open.first_at {
            Some(t) if t.elapsed() >= age => self.seal_locked(&mut open),
            _ => Ok(false),
        }
    }

    fn seal_locked(&self, open: &mut Open) -> std::io::Result<bool> {
        if open.records == 0 {
            return Ok(false);
        }
        let path = self.dir.join(OPEN);
        if let Some(mut f) = open.file.take() {
            f.flush()?;
            f.get_ref().sync_all()?;
        } else {
            File::open(&path)?.sync_all()?;
        }
        open.seq += 1;
        let sealed = self
            .dir
            .join(format!("{:012}-{}{SEALED_SUFFIX}", open.seq, random_hex()));
        std::fs::rename(&path, &sealed)?;
        File::open(&self.dir)?.sync_all()?;
        open.records = 0;
        open.bytes = 0;
        open.first_at = None;
        self.bound(open.bytes);
        self.sealed.notify_one();
        Ok(true)
    }

    /// Deletes the oldest sealed batches while the spool is above its bound.
    fn bound(&self, open_bytes: u64) {
        let batches: Vec<(Batch, u64)> = self
            .batches()
            .into_iter()
            .map(|b| {
                let size = std::fs::metadata(&b.path).map_or(0, |m| m.len());
                (b, size)
            })
            .collect();
        let mut total = open_bytes + batches.iter().map(|(_, s)| s).sum::<u64>();
        // The newest batch always stays: a single batch above the bound is still sent.
        for (b, size) in batches.iter().take(batches.len().saturating_sub(1)) {
            if total <= self.max_bytes {
                break;
            }
            if std::fs::remove_file(&b.path).is_ok() {
                self.dropped_batches.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(spool = %self.dir.display(), batch = b.seq, "spool full: the oldest batch dropped");
            }
            total -= size;
        }
    }

    /// The sealed batches, oldest first.
    pub fn batches(&self) -> Vec<Batch> {
        let mut out: Vec<Batch> = std::fs::read_dir(&self.dir)
            .map(|rd| rd.flatten().filter_map(|e| Batch::of(e.path())).collect())
            .unwrap_or_default();
        out.sort_by_key(|b| b.seq);
        out
    }

    /// Records waiting in the open batch.
    pub fn open_records(&self) -> usize {
        self.lock().records
    }

    /// Bytes of the sealed batches and the open one.
    pub fn bytes(&self) -> u64 {
        let open = self.lock().bytes;
        open + self
            .batches()
            .iter()
            .map(|b| std::fs::metadata(&b.path).map_or(0, |m| m.len()))
            .sum::<u64>()
    }

    /// Sealed batches deleted because the spool was full.
    pub fn dropped_batches(&self) -> u64 {
        self.dropped_batches.load(Ordering::Relaxed)
    }

    /// Resolves when a batch is sealed (or at once if one was sealed since the last wait).
    pub async fn sealed(&self) {
        self.sealed.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(i: usize) -> String {
        format!("{{\"i\":{i},\"pad\":\"{}\"}}", "x".repeat(100))
    }

    #[test]
    fn records_are_batched_in_order_and_a_batch_is_the_services_json() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path(), 3, 1 << 30).unwrap();
        for i in 0..7 {
            spool.append(&line(i)).unwrap();
        }
        let batches = spool.batches();
        assert_eq!(batches.len(), 2);
        assert_eq!(spool.open_records(), 1);
        assert_ne!(batches[0].key, batches[1].key);
        let (body, n) = batches[1].body().unwrap();
        assert_eq!(n, 3);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let is: Vec<u64> = v["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["i"].as_u64().unwrap())
            .collect();
        assert_eq!(is, vec![3, 4, 5]);
    }

    #[test]
    fn a_restart_seals_what_was_left_open_and_cuts_a_torn_record() {
        let dir = tempfile::tempdir().unwrap();
        {
            let spool = Spool::open(dir.path(), 100, 1 << 30).unwrap();
            spool.append(&line(0)).unwrap();
            spool.append(&line(1)).unwrap();
            spool.seal().unwrap();
            spool.append(&line(2)).unwrap();
            spool.flush().unwrap();
        }
        // A crash in the middle of writing a record.
        let mut f = File::options().append(true).open(dir.path().join(OPEN)).unwrap();
        f.write_all(b"{\"i\":3,\"pa").unwrap();
        drop(f);
        let spool = Spool::open(dir.path(), 100, 1 << 30).unwrap();
        let batches = spool.batches();
        assert_eq!(batches.len(), 2);
        assert!(batches[0].seq < batches[1].seq);
        let (body, n) = batches[1].body().unwrap();
        assert_eq!(n, 1);
        assert!(serde_json::from_slice::<serde_json::Value>(&body).is_ok());
        assert_eq!(spool.open_records(), 0);
        // New batches continue the order.
        spool.append(&line(4)).unwrap();
        spool.seal().unwrap();
        assert_eq!(spool.batches().last().unwrap().seq, 3);
    }

    #[test]
    fn a_full_spool_drops_its_oldest_batches_and_counts_them() {
        let dir = tempfile::tempdir().unwrap();
        // Each batch: 10 records of ~112 bytes; bound about 3 batches.
        let spool = Spool::open(dir.path(), 10, 3 * 1130).unwrap();
        for i in 0..100 {
            spool.append(&line(i)).unwrap();
        }
        let batches = spool.batches();
        assert!(spool.bytes() <= 3 * 1130, "{} bytes", spool.bytes());
        assert_eq!(spool.dropped_batches() as usize + batches.len(), 10);
        assert!(spool.dropped_batches() >= 7);
        // The newest are kept.
        assert_eq!(batches.last().unwrap().seq, 10);
        let (body, _) = batches.last().unwrap().body().unwrap();
        assert!(String::from_utf8(body).unwrap().contains("\"i\":99"));
    }
}
