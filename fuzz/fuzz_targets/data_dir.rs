//! The `data_dir` fuzz target (see skillret_fuzz::TARGETS): `scripts/fuzz.sh data_dir`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| skillret_fuzz::fuzz("data_dir", data));
