//! `cargo fuzz run amqp10_connection`: see charon_fuzz_props::amqp10_connection for the property.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = charon_fuzz_props::amqp10_connection(data);
});
