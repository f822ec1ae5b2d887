//! The mahimahi trace reader: any text is a trace or a `TraceError`, never a panic.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = gearbox_link::Trace::parse(text, "fuzz.trace");
    }
});
