//! The `chat_template` fuzz target (see skillret_fuzz::TARGETS): `scripts/fuzz.sh chat_template`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| skillret_fuzz::fuzz("chat_template", data));
