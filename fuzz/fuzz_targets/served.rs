//! The `served` fuzz target (see skillret_fuzz::TARGETS): `scripts/fuzz.sh served`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| skillret_fuzz::fuzz("served", data));
