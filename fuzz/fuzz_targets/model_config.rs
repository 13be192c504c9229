//! The `model_config` fuzz target (see skillret_fuzz::TARGETS): `scripts/fuzz.sh model_config`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| skillret_fuzz::fuzz("model_config", data));
