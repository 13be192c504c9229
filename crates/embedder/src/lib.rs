//! Bi-encoders (BERT and XLM-R-vocabulary BERTs) that turn SkillRet skills and
//! queries into normalised vectors, with candle on CPU or CUDA.
//!
//! Not implemented yet: this crate is filled by the embedder issue (#3). It
//! exports nothing so that no caller can mistake it for a working encoder.
