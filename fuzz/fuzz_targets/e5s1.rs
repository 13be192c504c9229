//! The `e5s1` fuzz target (see skillret_fuzz::TARGETS): `scripts/fuzz.sh e5s1`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| skillret_fuzz::fuzz("e5s1", data));
