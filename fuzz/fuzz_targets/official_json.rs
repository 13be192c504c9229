//! The `official_json` fuzz target (see skillret_fuzz::TARGETS): `scripts/fuzz.sh official_json`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| skillret_fuzz::fuzz("official_json", data));
