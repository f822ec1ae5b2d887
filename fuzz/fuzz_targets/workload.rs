//! The workload spec parser and its checks.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = gearbox_workload::WorkloadSpec::from_toml_str(text, "fuzz.toml");
    }
});
