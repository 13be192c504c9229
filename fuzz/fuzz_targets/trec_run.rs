//! The `trec_run` fuzz target (see skillret_fuzz::TARGETS): `scripts/fuzz.sh trec_run`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| skillret_fuzz::fuzz("trec_run", data));
