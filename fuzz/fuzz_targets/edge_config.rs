//! The edge config parser and its validation (including `[limits]`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(c) = gearbox_edge::EdgeConfig::from_toml(text, std::path::Path::new("fuzz.toml")) {
            let _ = c.validate();
        }
    }
});
