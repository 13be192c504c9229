//! The `model_config_structured` fuzz target (see skillret_fuzz::TARGETS): `scripts/fuzz.sh model_config_structured`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| skillret_fuzz::fuzz("model_config_structured", data));
