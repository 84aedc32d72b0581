//! `cargo fuzz run http_json`: see charon_fuzz_props::http_json for the property.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = charon_fuzz_props::http_json(data);
});
