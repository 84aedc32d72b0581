//! `cargo fuzz run store_message`: see charon_fuzz_props::store_message for the property.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = charon_fuzz_props::store_message(data);
});
