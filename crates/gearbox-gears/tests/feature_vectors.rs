//! The Feature Extractor against the shared test vectors (WiseTrans §III-B, Table I, and
//! gearbox's four additions, `transport::features`): `tests/vectors/wisetrans_features.json`
//! is read here and by python/tests/test_wisetrans.py, which checks the Python transcription
//! (`gearbox.wisetrans.features`) against the same numbers, so the two cannot drift apart.

use std::path::Path;
use std::time::{Duration, Instant};

use gearbox_gear_api::ClientRecord;
use gearbox_gears::transport::{FeatureExtractor, Transport, FEATURE_NAMES};
use serde_json::Value;

fn close(got: f64, want: f64) -> bool {
    (got - want).abs() <= 1e-9 * want.abs().max(1.0)
}

#[test]
fn the_extractor_reproduces_the_shared_vectors() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/wisetrans_features.json");
    let text = std::fs::read_to_string(&path).expect("read the vector file");
    let doc: Value = serde_json::from_str(&text).expect("vector file is JSON");
    let names: Vec<&str> = doc["feature_names"]
        .as_array()
        .expect("feature_names")
        .iter()
        .map(|v| v.as_str().expect("a name"))
        .collect();
    assert_eq!(names, FEATURE_NAMES, "the file names the extractor's features in order");
    let window = Duration::from_secs_f64(doc["window_ms"].as_f64().expect("window_ms") / 1e3);
    let cap = doc["max_requests"].as_u64().expect("max_requests") as usize;
    let mut fx = FeatureExtractor::new(window, cap);
    let t0 = Instant::now();
    let steps = doc["steps"].as_array().expect("steps");
    assert!(steps.len() >= 10, "the file has its steps");
    let mut checked_present = 0;
    for (k, step) in steps.iter().enumerate() {
        let now = t0 + Duration::from_secs_f64(step["at_ms"].as_f64().expect("at_ms") / 1e3);
        let record: ClientRecord =
            serde_json::from_value(step["record"].clone()).unwrap_or_else(|e| panic!("step {k}: record: {e}"));
        fx.observe(&record, now);
        let query = match step["query"].as_str() {
            Some("tcp") => Transport::Tcp,
            Some("quic") => Transport::Quic,
            other => panic!("step {k}: query {other:?}"),
        };
        let f = fx.features(query, now);
        let expect = &step["expect"];
        for name in FEATURE_NAMES {
            let got = f.get(name).expect("a known name");
            match expect[name].as_f64() {
                None => assert!(got.is_nan(), "step {k} {name}: want missing, got {got}"),
                Some(want) => {
                    assert!(close(got, want), "step {k} {name}: want {want}, got {got}");
                    checked_present += 1;
                }
            }
        }
        assert_eq!(
            f.requests as u64,
            expect["requests"].as_u64().expect("requests"),
            "step {k}"
        );
        assert_eq!(
            f.ok_requests as u64,
            expect["ok_requests"].as_u64().expect("ok_requests"),
            "step {k}"
        );
    }
    assert!(checked_present > 100, "most values are present: {checked_present}");
}
