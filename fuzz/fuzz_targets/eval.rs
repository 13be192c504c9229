//! The `eval` fuzz target (see skillret_fuzz::TARGETS): `scripts/fuzz.sh eval`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| skillret_fuzz::fuzz("eval", data));
