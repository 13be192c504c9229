//! The `sentence_transformers` fuzz target (see skillret_fuzz::TARGETS): `scripts/fuzz.sh sentence_transformers`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| skillret_fuzz::fuzz("sentence_transformers", data));
