//! The `checkpoint` fuzz target (see skillret_fuzz::TARGETS): `scripts/fuzz.sh checkpoint`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| skillret_fuzz::fuzz("checkpoint", data));
