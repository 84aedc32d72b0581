//! `cargo fuzz run amqp091_properties`: see charon_fuzz_props::amqp091_properties for the property.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = charon_fuzz_props::amqp091_properties(data);
});
