//! The `hnsw_index` fuzz target (see skillret_fuzz::TARGETS): `scripts/fuzz.sh hnsw_index`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| skillret_fuzz::fuzz("hnsw_index", data));
