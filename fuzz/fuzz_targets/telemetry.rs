//! The telemetry record parser: edge and client records.
#![no_main]
use gearbox_dataplane::telemetry::{ClientRecord, EdgeRecord};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = serde_json::from_slice::<EdgeRecord>(data);
    let _ = serde_json::from_slice::<ClientRecord>(data);
});
