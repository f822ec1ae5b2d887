//! Mahimahi packet-delivery traces: reading, writing, converting.
//!
//! Format (mahimahi `mm-link`): one non-negative integer per line, the time in
//! milliseconds of one delivery opportunity of 1500 bytes; timestamps never
//! decrease; several equal lines are several opportunities in that
//! millisecond; a millisecond with no line has none. The trace repeats with a
//! period equal to its last timestamp, which must therefore be positive. A
//! trailing newline (or several blank lines at the very end) is accepted;
//! anything else is an error naming the file and the 1-based line.
//!
//! Parsing is strict (digits only, an optional trailing `\r`) because a trace
//! that silently parses wrong gives a link that silently runs at the wrong rate.

use std::fmt::Write as _;
use std::path::Path;

use thiserror::Error;

/// Bytes delivered by one trace opportunity (mahimahi's fixed MTU).
pub const OPPORTUNITY_BYTES: usize = 1500;

/// Why a trace was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum TraceError {
    /// The file could not be read or written.
    #[error("{file}: {message}")]
    Io {
        /// File name.
        file: String,
        /// The I/O error's text.
        message: String,
    },
    /// A line is not one non-negative integer.
    #[error("{file}:{line}: expected one non-negative integer (milliseconds), found {found:?}")]
    NotAnInteger {
        /// File name (or `<inline>`).
        file: String,
        /// 1-based line number.
        line: usize,
        /// The offending text.
        found: String,
    },
    /// A timestamp is smaller than the one before it.
    #[error("{file}:{line}: timestamp {value} ms is smaller than the previous one ({previous} ms)")]
    Decreasing {
        /// File name.
        file: String,
        /// 1-based line number.
        line: usize,
        /// This line's value.
        value: u64,
        /// The previous line's value.
        previous: u64,
    },
    /// No timestamps at all.
    #[error("{file}: trace is empty (no delivery opportunities)")]
    Empty {
        /// File name.
        file: String,
    },
    /// The last timestamp is 0, so the trace has no duration to repeat over.
    #[error("{file}: trace lasts 0 ms (all timestamps are 0); the last timestamp must be positive")]
    ZeroDuration {
        /// File name.
        file: String,
    },
    /// A throughput series that cannot be converted.
    #[error("throughput series: {0}")]
    Series(String),
}

/// A validated mahimahi trace: non-decreasing millisecond timestamps, last > 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    timestamps_ms: Vec<u64>,
}

impl Trace {
    /// Validates timestamps (non-decreasing, non-empty, last > 0); `name` goes into errors.
    pub fn from_timestamps(timestamps_ms: Vec<u64>, name: &str) -> Result<Self, TraceError> {
        for (i, w) in timestamps_ms.windows(2).enumerate() {
            if w[1] < w[0] {
                return Err(TraceError::Decreasing {
                    file: name.into(),
                    line: i + 2,
                    value: w[1],
                    previous: w[0],
                });
            }
        }
        match timestamps_ms.last() {
            None => Err(TraceError::Empty { file: name.into() }),
            Some(0) => Err(TraceError::ZeroDuration { file: name.into() }),
            Some(_) => Ok(Trace { timestamps_ms }),
        }
    }

    /// Parses mahimahi text; `name` (usually the file name) goes into errors.
    pub fn parse(text: &str, name: &str) -> Result<Self, TraceError> {
        let lines: Vec<&str> = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
        // Blank lines are tolerated only at the end of the file.
        let last_content = lines.iter().rposition(|l| !l.is_empty()).map_or(0, |i| i + 1);
        let mut out = Vec::with_capacity(last_content);
        let mut previous = 0u64;
        for (i, line) in lines[..last_content].iter().enumerate() {
            let lineno = i + 1;
            let bad = || TraceError::NotAnInteger {
                file: name.into(),
                line: lineno,
                found: (*line).into(),
            };
            if line.is_empty() || !line.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            let value: u64 = line.parse().map_err(|_| bad())?;
            if value < previous {
                return Err(TraceError::Decreasing {
                    file: name.into(),
                    line: lineno,
                    value,
                    previous,
                });
            }
            previous = value;
            out.push(value);
        }
        Self::from_timestamps(out, name)
    }

    /// Reads and parses a trace file.
    pub fn read_file(path: impl AsRef<Path>) -> Result<Self, TraceError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| TraceError::Io {
            file: name.clone(),
            message: e.to_string(),
        })?;
        Self::parse(&text, &name)
    }

    /// The trace in mahimahi text form (one line per opportunity, final newline).
    pub fn to_mahimahi_string(&self) -> String {
        let mut s = String::with_capacity(self.timestamps_ms.len() * 6);
        for t in &self.timestamps_ms {
            let _ = writeln!(s, "{t}");
        }
        s
    }

    /// Writes the trace in mahimahi format.
    pub fn write_file(&self, path: impl AsRef<Path>) -> Result<(), TraceError> {
        let path = path.as_ref();
        std::fs::write(path, self.to_mahimahi_string()).map_err(|e| TraceError::Io {
            file: path.display().to_string(),
            message: e.to_string(),
        })
    }

    /// The opportunity timestamps, ms.
    pub fn timestamps_ms(&self) -> &[u64] {
        &self.timestamps_ms
    }

    /// The repeat period, ms (the last timestamp).
    pub fn period_ms(&self) -> u64 {
        // Construction guarantees a non-empty trace.
        self.timestamps_ms.last().copied().unwrap_or(1)
    }

    /// Mean capacity over one period, bits per second: each period carries every
    /// line once (a line at 0 of the next period coincides with the last line of
    /// this one, and is counted in the next).
    pub fn mean_rate_bps(&self) -> f64 {
        self.timestamps_ms.len() as f64 * (OPPORTUNITY_BYTES * 8) as f64 * 1000.0 / self.period_ms() as f64
    }

    /// Capacity per bin of `bin_ms` over one period, bits per second (for statistics).
    pub fn binned_rate_bps(&self, bin_ms: u64) -> Vec<f64> {
        let bin_ms = bin_ms.max(1);
        let bins = self.period_ms().div_ceil(bin_ms) as usize;
        let bins = bins.max(1);
        let mut counts = vec![0u64; bins];
        for &t in &self.timestamps_ms {
            // An opportunity at exactly the period belongs to the last bin.
            let b = ((t.saturating_sub(1)) / bin_ms) as usize;
            counts[b.min(bins - 1)] += 1;
        }
        counts
            .iter()
            .map(|&c| (c as usize * OPPORTUNITY_BYTES * 8) as f64 * 1000.0 / bin_ms as f64)
            .collect()
    }

    /// Converts a throughput series into a trace.
    ///
    /// `series` holds `(time_s, throughput_bps)` samples sorted by time; each
    /// throughput holds from its time until the next sample, and the last one
    /// until `duration_s`. Time before the first sample has no capacity. Each
    /// millisecond `m` (1..=duration) accrues `rate/8/1000/1500` opportunities
    /// of the rate in force during `[m-1, m)`; whole opportunities are emitted
    /// at `m` and the fraction is carried forward, so the conversion is
    /// deterministic and loses at most one opportunity in total.
    pub fn from_throughput_series(series: &[(f64, f64)], duration_s: f64) -> Result<Self, TraceError> {
        if !(duration_s.is_finite() && duration_s > 0.0) {
            return Err(TraceError::Series(format!(
                "duration_s must be positive, got {duration_s}"
            )));
        }
        for (i, &(t, r)) in series.iter().enumerate() {
            if !(t.is_finite() && t >= 0.0 && r.is_finite() && r >= 0.0) {
                return Err(TraceError::Series(format!(
                    "sample {i}: ({t}, {r}) must be finite and non-negative"
                )));
            }
            if i > 0 && t < series[i - 1].0 {
                return Err(TraceError::Series(format!(
                    "sample {i}: time {t} s is before the previous sample"
                )));
            }
        }
        let duration_ms = (duration_s * 1000.0).round() as u64;
        let mut out = Vec::new();
        let mut carry = 0.0f64;
        let mut idx = 0usize;
        for m in 1..=duration_ms {
            let slot_start_s = (m - 1) as f64 / 1000.0;
            while idx + 1 < series.len() && series[idx + 1].0 <= slot_start_s + 1e-12 {
                idx += 1;
            }
            let rate = match series.get(idx) {
                Some(&(t, r)) if t <= slot_start_s + 1e-12 => r,
                _ => 0.0,
            };
            carry += rate / 8.0 / 1000.0 / OPPORTUNITY_BYTES as f64;
            let whole = carry.floor();
            carry -= whole;
            for _ in 0..whole as u64 {
                out.push(m);
            }
        }
        Self::from_timestamps(out, "<throughput series>")
            .map_err(|_| TraceError::Series("throughput is zero everywhere: no delivery opportunity".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mahimahi_lines_with_repeats_gaps_and_trailing_newline() {
        let t = Trace::parse("0\n0\n3\n3\n3\n10\n", "x.trace").unwrap();
        assert_eq!(t.timestamps_ms(), &[0, 0, 3, 3, 3, 10]);
        assert_eq!(t.period_ms(), 10);
        assert_eq!(Trace::parse(&t.to_mahimahi_string(), "y").unwrap(), t);
        assert!(Trace::parse("1\r\n2\r\n\r\n", "crlf").is_ok());
    }

    #[test]
    fn trace_parser_errors_name_file_and_line() {
        let e = Trace::parse("1\n2\nabc\n4\n", "up.trace").unwrap_err();
        assert_eq!(
            e,
            TraceError::NotAnInteger {
                file: "up.trace".into(),
                line: 3,
                found: "abc".into()
            }
        );
        assert!(e.to_string().starts_with("up.trace:3:"), "{e}");
        let e = Trace::parse("1\n5\n4\n", "down.trace").unwrap_err();
        assert!(e.to_string().starts_with("down.trace:3:"), "{e}");
        for bad in ["-1\n", "1.5\n", " 2\n", "+3\n", "1\n\n2\n", "99999999999999999999999\n"] {
            assert!(
                matches!(Trace::parse(bad, "f").unwrap_err(), TraceError::NotAnInteger { .. }),
                "{bad:?}"
            );
        }
        assert_eq!(
            Trace::parse("", "e").unwrap_err(),
            TraceError::Empty { file: "e".into() }
        );
        assert_eq!(
            Trace::parse("\n\n", "e").unwrap_err(),
            TraceError::Empty { file: "e".into() }
        );
        assert_eq!(
            Trace::parse("0\n0\n", "z").unwrap_err(),
            TraceError::ZeroDuration { file: "z".into() }
        );
        let e = Trace::read_file("/nonexistent/dir/t.trace").unwrap_err();
        assert!(e.to_string().contains("/nonexistent/dir/t.trace"), "{e}");
    }

    #[test]
    fn throughput_series_converts_with_carried_fractions() {
        // 12 Mbit/s = exactly one opportunity per ms.
        let t = Trace::from_throughput_series(&[(0.0, 12e6)], 1.0).unwrap();
        assert_eq!(t.timestamps_ms().len(), 1000);
        assert_eq!(t.timestamps_ms()[0], 1);
        // 6 Mbit/s = one every 2 ms, from carried halves.
        let t = Trace::from_throughput_series(&[(0.0, 6e6)], 1.0).unwrap();
        assert_eq!(&t.timestamps_ms()[..3], &[2, 4, 6]);
        // A step: 12 Mbit/s for 0.5 s then 24 Mbit/s.
        let t = Trace::from_throughput_series(&[(0.0, 12e6), (0.5, 24e6)], 1.0).unwrap();
        assert_eq!(t.timestamps_ms().len(), 500 + 1000);
        assert!((t.mean_rate_bps() - 18e6).abs() < 1.0);
        assert!(Trace::from_throughput_series(&[(0.0, 0.0)], 1.0).is_err());
        assert!(Trace::from_throughput_series(&[(1.0, 1e6), (0.5, 1e6)], 2.0).is_err());
    }
}
