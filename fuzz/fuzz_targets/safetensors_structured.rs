//! The `safetensors_structured` fuzz target (see skillret_fuzz::TARGETS): `scripts/fuzz.sh safetensors_structured`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| skillret_fuzz::fuzz("safetensors_structured", data));
