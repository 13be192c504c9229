//! The `cache` fuzz target (see skillret_fuzz::TARGETS): `scripts/fuzz.sh cache`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| skillret_fuzz::fuzz("cache", data));
