//! The `run_config` fuzz target (see skillret_fuzz::TARGETS): `scripts/fuzz.sh run_config`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| skillret_fuzz::fuzz("run_config", data));
