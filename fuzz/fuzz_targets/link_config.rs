//! The link config (as scenario files carry it) and its validation.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(c) = toml::from_str::<gearbox_link::LinkConfig>(text) {
            let _ = c.validate();
        }
    }
});
