//! The `train_config` fuzz target (see skillret_fuzz::TARGETS): `scripts/fuzz.sh train_config`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| skillret_fuzz::fuzz("train_config", data));
