//! The candle engine's unpadded batches (the CUDA graph, run here on the CPU
//! with `Backend::Candle`) equal the native engine for every family, on
//! batches that mix lengths: a few tokens beside 640 (256 for the real-size
//! BERTs; two thousand on the native engine alone), so that
//! padding, positions, the span bounds of every query and the sliding
//! windows (far shorter than the long inputs in the TEST Gemma3, Mistral
//! and NV-Embed models, both of Gemma3's bidirectional and causal rules)
//! are all exercised, with mean, CLS and last-token pooling. Each vector is
//! the same whether its input shares a batch with the others or runs alone
//! (in the native engine, which runs two batches at once, bit for bit),
//! and bf16 through the same graph stays within cosine 0.999 (the families'
//! bf16 bound). A kernel that cannot run is refused, naming why.
//!
//! Models: scripts/fetch-models.sh, scripts/make_qwen3_models.py,
//! scripts/make_registry_models.py; texts: ../shared/skillret-sample.
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

use crate::common;

use std::sync::OnceLock;

use common::cosine;
use embedder::{
    Attention, AttentionKernel, Backend, EmbedderOptions, Embeddings, Kind, LocalEmbedder,
    ModelConfig, Pooling, Precision,
};

const SCRIPT: &str = "scripts/fetch-models.sh && python3 scripts/make_qwen3_models.py && python3 scripts/make_registry_models.py";

/// A model, and what the options select.
struct Case {
    dir: &'static str,
    pooling: Option<Pooling>,
    attention: Option<Attention>,
}

const fn case(dir: &'static str) -> Case {
    Case {
        dir,
        pooling: None,
        attention: None,
    }
}

const CASES: [Case; 12] = [
    // BERT (mean), and the same weights with CLS pooling (picked rows).
    case("all-MiniLM-L6-v2"),
    Case {
        pooling: Some(Pooling::Cls),
        ..case("all-MiniLM-L6-v2")
    },
    // XLM-R positions (from padding_idx + 1).
    case("multilingual-e5-small"),
    // Qwen3, causal, last token (picked rows).
    case("test-qwen3-embedding"),
    Case {
        pooling: Some(Pooling::Mean),
        ..case("test-qwen3-embedding")
    },
    // Gemma3: sliding windows of 16 (causal) and 40 → 21 a side
    // (bidirectional) on some layers, full attention on the others.
    case("test-gemma3-embedding"),
    case("test-gemma3-bidirectional"),
    // pplx-embed's bidirectional Qwen3, mean pooling.
    case("test-pplx-embedding"),
    // jina-embeddings-v5: LoRA merged.
    case("test-jina-v5"),
    // Mistral in a window of 24.
    case("test-mistral-embedding"),
    // NV-Embed: latent-attention pooling; official batches of 4 (causal in
    // the window where lengths differ) and bidirectional.
    case("test-nv-embed"),
    Case {
        attention: Some(Attention::Bidirectional),
        ..case("test-nv-embed")
    },
];

/// Texts from a few tokens to more than two thousand.
fn texts() -> Option<Vec<String>> {
    let sample = common::sample()?;
    let (skills, _) = common::sample_texts(&sample);
    let long: Vec<&str> = skills.iter().take(40).map(|(_, t)| t.as_str()).collect();
    let mut texts = vec![
        "pdf".to_owned(),
        long.join("\n\n"),
        skills[3].1.chars().take(200).collect(),
    ];
    // Two whole skills, of about 1,100 and 2,100 tokens (MiniLM's tokenizer).
    texts.extend([5, 7].map(|i| skills[i].1.clone()));
    texts.push("merge two csv files".to_owned());
    Some(texts)
}

/// The longest input, in tokens, where only the native engine runs.
const NATIVE_LONGEST: usize = 2048;
/// Where the candle graph runs beside it (its exact attention on the CPU is slow at two
/// thousand): still sixteen times the widest sliding window of the TEST models, and more than
/// one attention tile of the native engine.
const CANDLE_LONGEST: usize = 640;
/// The same for the real-size models (MiniLM, multilingual-e5-small; 512 positions): a few
/// tokens beside 256 shows their padding and positions as well, in a quarter of the attention
/// (tests/parity.rs holds their candle graph to sentence-transformers at full length).
const CANDLE_LONGEST_REAL_SIZE: usize = 256;

/// The longest input of the candle graph's checks for a model.
fn candle_longest(case: &Case) -> usize {
    if case.dir.starts_with("test-") {
        CANDLE_LONGEST
    } else {
        CANDLE_LONGEST_REAL_SIZE
    }
}

fn options(
    case: &Case,
    backend: Backend,
    precision: Precision,
    batch: usize,
    longest: usize,
) -> EmbedderOptions {
    let dir = common::root().join("models").join(case.dir);
    let limit = ModelConfig::read(&dir.join("config.json"))
        .unwrap()
        .max_input_length();
    let mut options = EmbedderOptions::default()
        .with_max_length(limit.min(longest))
        .with_backend(backend)
        .with_precision(precision)
        .with_batch_tokens(batch);
    if let Some(p) = case.pooling {
        options = options.with_pooling(p);
    }
    if let Some(a) = case.attention {
        options = options.with_attention(a);
    }
    options
}

fn embed(case: &Case, options: EmbedderOptions, texts: &[String]) -> (Embeddings, String) {
    let dir = common::root().join("models").join(case.dir);
    let model = LocalEmbedder::from_dir(&dir, options).unwrap();
    let lengths: Vec<usize> = model
        .tokenize(texts, Kind::Document)
        .unwrap()
        .iter()
        .map(Vec::len)
        .collect();
    let (shortest, longest) = (lengths.iter().min().unwrap(), lengths.iter().max().unwrap());
    assert!(
        *shortest <= 8 && *longest >= CANDLE_LONGEST_REAL_SIZE,
        "{}: {lengths:?}",
        case.dir
    );
    let description = model.device().to_owned();
    (model.embed(texts, Kind::Document).unwrap(), description)
}

/// The native engine's f32 vectors of case `i` at the candle checks' length, all in one batch:
/// what the candle graph is held to, in f32 and in bf16 (made once, by whichever test asks
/// first).
fn native_reference(i: usize, texts: &[String]) -> &'static Embeddings {
    static REFERENCES: [OnceLock<Embeddings>; CASES.len()] =
        [const { OnceLock::new() }; CASES.len()];
    REFERENCES[i].get_or_init(|| {
        let case = &CASES[i];
        let options = options(
            case,
            Backend::Native,
            Precision::F32,
            1 << 20,
            candle_longest(case),
        );
        embed(case, options, texts).0
    })
}

fn worst(a: &Embeddings, b: &Embeddings) -> f64 {
    (0..a.len())
        .map(|i| cosine(a.row(i), b.row(i)))
        .fold(1.0, f64::min)
}

fn installed(case: &Case) -> bool {
    common::model(case.dir, SCRIPT).is_some()
}

#[test]
fn unpadded_candle_batches_equal_the_native_engine_for_every_family() {
    let Some(texts) = texts() else { return };
    for (i, case) in CASES.iter().enumerate().filter(|(_, c)| installed(c)) {
        let label = format!("{} {:?} {:?}", case.dir, case.pooling, case.attention);
        // Everything in one batch, and each input alone.
        let native = native_reference(i, &texts);
        let (mixed, description) = embed(
            case,
            options(
                case,
                Backend::Candle,
                Precision::F32,
                1 << 20,
                candle_longest(case),
            ),
            &texts,
        );
        let (alone, _) = embed(
            case,
            options(
                case,
                Backend::Candle,
                Precision::F32,
                1,
                candle_longest(case),
            ),
            &texts,
        );
        assert!(
            description.contains("f32, exact attention"),
            "{label}: {description}"
        );
        let to_native = worst(native, &mixed);
        let to_alone = worst(&alone, &mixed);
        eprintln!("{label}: candle f32 vs native {to_native:.9}, one batch vs alone {to_alone:.9}");
        assert!(
            to_native >= 0.99999,
            "{label}: candle vs native {to_native}"
        );
        // NV-Embed's official attention depends on the batch by design.
        if case.dir != "test-nv-embed" || case.attention.is_some() {
            assert!(to_alone >= 0.999999, "{label}: batched vs alone {to_alone}");
        }
    }
}

#[test]
fn the_native_engine_gives_the_same_bits_whatever_the_batching() {
    // The native engine runs two batches side by side, each with half the
    // token budget: one batch of everything, a budget in between and each
    // input alone must give every vector bit for bit, and the progress
    // counts must grow to the number of texts.
    let Some(texts) = texts() else { return };
    for case in CASES.iter().filter(|c| installed(c)) {
        // NV-Embed's official attention depends on the batch by design.
        if case.dir == "test-nv-embed" && case.attention.is_none() {
            continue;
        }
        let label = format!("{} {:?} {:?}", case.dir, case.pooling, case.attention);
        let dir = common::root().join("models").join(case.dir);
        let runs = [1 << 20, 1200, 1].map(|batch| {
            let options = options(case, Backend::Native, Precision::F32, batch, NATIVE_LONGEST);
            let model = LocalEmbedder::from_dir(&dir, options).unwrap();
            let seen = std::sync::Mutex::new(Vec::new());
            let vectors = model
                .embed_with_progress(&texts, Kind::Document, &|n| seen.lock().unwrap().push(n))
                .unwrap();
            let seen = seen.into_inner().unwrap();
            assert!(
                seen.windows(2).all(|w| w[0] < w[1]) && seen.last() == Some(&texts.len()),
                "{label}, budget {batch}: progress {seen:?}"
            );
            vectors
        });
        for (run, batch) in runs[1..].iter().zip(["1200 tokens", "one input"]) {
            for i in 0..texts.len() {
                let bits =
                    |e: &Embeddings| e.row(i).iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(run),
                    bits(&runs[0]),
                    "{label}: text {i}, batches of {batch}"
                );
            }
        }
    }
}

#[test]
fn bf16_through_the_candle_graph_stays_within_its_bound() {
    let Some(texts) = texts() else { return };
    for (i, case) in CASES.iter().enumerate().filter(|(_, c)| installed(c)) {
        let label = format!("{} {:?} {:?}", case.dir, case.pooling, case.attention);
        let native = native_reference(i, &texts);
        let (bf16, description) = embed(
            case,
            options(
                case,
                Backend::Candle,
                Precision::Bf16,
                1 << 20,
                candle_longest(case),
            ),
            &texts,
        );
        assert!(
            description.contains("bf16, exact attention"),
            "{label}: {description}"
        );
        let c = worst(native, &bf16);
        eprintln!("{label}: candle bf16 vs native f32 {c:.6}");
        assert!(c >= 0.999, "{label}: bf16 {c}");
    }
}

#[test]
fn a_kernel_that_cannot_run_is_refused_naming_why() {
    let case = case("all-MiniLM-L6-v2");
    if !installed(&case) {
        return;
    }
    let dir = common::root().join("models").join(case.dir);
    let refused = |options: EmbedderOptions| {
        LocalEmbedder::from_dir(&dir, options.with_attention_kernel(AttentionKernel::Flash))
            .unwrap_err()
            .to_string()
    };
    let cpu = refused(options(
        &case,
        Backend::Candle,
        Precision::Bf16,
        8192,
        CANDLE_LONGEST,
    ));
    let native = refused(options(
        &case,
        Backend::Native,
        Precision::F32,
        8192,
        CANDLE_LONGEST,
    ));
    for text in [&cpu, &native] {
        assert!(text.contains("attention kernel flash"), "{text}");
    }
    if cfg!(feature = "flash-attn") {
        assert!(cpu.contains("CUDA"), "{cpu}");
    } else {
        assert!(cpu.contains("flash-attn"), "{cpu}");
    }
    assert!(native.contains("candle engine"), "{native}");
    // The exact kernel runs everywhere, named in the description.
    let model = LocalEmbedder::from_dir(
        &dir,
        options(&case, Backend::Candle, Precision::F32, 8192, CANDLE_LONGEST)
            .with_attention_kernel(AttentionKernel::Exact),
    )
    .unwrap();
    assert_eq!(model.device(), "cpu (candle, f32, exact attention)");
}
