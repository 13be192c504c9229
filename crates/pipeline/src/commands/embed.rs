//! `pipeline embed`: texts, skills or queries in, vectors out.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use embedder::{Backend, EmbedderOptions, Kind, LocalEmbedder, Precision};
use serde::Deserialize;

use crate::cli::{BackendArg, EmbedArgs, KindArg, PrecisionArg};
use crate::hub::model_dir;

pub(crate) fn run(args: &EmbedArgs) -> Result<()> {
    let texts = read_inputs(&args.input)?;
    let kind = match args.kind {
        KindArg::Query => Kind::Query,
        KindArg::Document => Kind::Document,
    };
    let (vectors, dim) = match &args.config {
        Some(config) => from_config(config, &texts, kind)?,
        None => local(args, &texts, kind)?,
    };
    eval::io::write_atomically(&args.output, |out| {
        for row in vectors.chunks_exact(dim.max(1)) {
            serde_json::to_writer(&mut *out, row)?;
            out.write_all(b"\n")?;
        }
        Ok(())
    })
    .with_context(|| format!("writing {}", args.output.display()))?;
    Ok(())
}

/// The embedder of a run configuration's [embedder] (local or served).
fn from_config(config: &Path, texts: &[String], kind: Kind) -> Result<(Vec<f32>, usize)> {
    let settings = crate::config::Settings::load(config, &crate::config::Overrides::default())?;
    let Some(e) = &settings.embedder else {
        bail!("{}: has no [embedder] section", config.display());
    };
    let dir = crate::stages::model_dir_of(e.model.as_ref(), e.served.is_some(), "embedder")?;
    let mut model = crate::stages::Vectors::open(e, dir.as_deref())?;
    eprintln!(
        "{}: {}, {} texts",
        config.display(),
        model.describe()?,
        texts.len()
    );
    let started = Instant::now();
    let bar = crate::progress::bar(texts.len() as u64, "embedding");
    let (mut vectors, stats) = model.embed(texts, kind, &|done, note| {
        bar.set_position(done as u64);
        if !note.is_empty() {
            bar.set_message(format!("embedding · {note}"));
        }
    })?;
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "embedded {} texts ({} tokens) in {seconds:.2} s: {:.0} tokens/s",
        texts.len(),
        stats.tokens,
        stats.tokens as f64 / seconds.max(1e-9)
    );
    for note in &stats.notes {
        eprintln!("  {note}");
    }
    let dim = model.dim();
    if model.normalize() {
        for row in vectors.chunks_exact_mut(dim) {
            embedder::normalize(row);
        }
    }
    Ok((vectors, dim))
}

/// A local model given by --model and the flags.
fn local(args: &EmbedArgs, texts: &[String], kind: Kind) -> Result<(Vec<f32>, usize)> {
    let Some(model) = &args.model else {
        bail!("give --model or --config");
    };
    let mut options = EmbedderOptions::default()
        .with_batch_tokens(args.batch_tokens)
        .with_backend(backend(args.backend))
        .with_precision(precision(args.precision));
    if let Some(n) = args.max_length {
        options = options.with_max_length(n);
    }
    if let Some(p) = &args.query_prompt {
        options = options.with_query_prompt(p);
    }
    if let Some(p) = &args.document_prompt {
        options = options.with_document_prompt(p);
    }
    if let Some(name) = &args.query_prompt_name {
        options = options.with_query_prompt_name(name);
    }
    if let Some(name) = &args.document_prompt_name {
        options = options.with_document_prompt_name(name);
    }
    if let Some(task) = &args.task {
        options = options.with_task(task);
    }
    if let Some(a) = args.attention {
        options = options.with_attention(a);
    }
    if let Some(kernel) = args.attention_kernel {
        options = options.with_attention_kernel(kernel);
    }
    let dir = model_dir(model, args.revision.as_deref())?;
    let model = LocalEmbedder::from_dir(&dir, options)
        .with_context(|| format!("loading the model {}", dir.display()))?;
    let prompt = model.prompt(kind);
    eprintln!(
        "{}: {}, {} texts, max {} tokens, {:?} pooling{}{}{}{}, on {}",
        dir.display(),
        model.config().family(),
        texts.len(),
        model.max_length(),
        model.pooling(),
        match model.attention() {
            Some(a) => format!(", {} attention", a.name()),
            None => String::new(),
        },
        match model.chat_template() {
            Some((path, format)) => format!(
                ", rendered through the chat template of {} ({} messages)",
                path.display(),
                format.name()
            ),
            None => String::new(),
        },
        if prompt.is_empty() {
            String::new()
        } else {
            format!(", prompt {prompt:?}")
        },
        if model.normalize() {
            ", normalised"
        } else {
            ""
        },
        model.device()
    );

    let started = Instant::now();
    let ids = model.tokenize(texts, kind)?;
    let tokens: usize = ids.iter().map(Vec::len).sum();
    let bar = crate::progress::bar(texts.len() as u64, "embedding");
    let vectors = model.embed_tokens(&ids, kind, &|done| bar.set_position(done as u64))?;
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "embedded {} texts ({tokens} tokens) in {seconds:.2} s: {:.0} tokens/s",
        texts.len(),
        tokens as f64 / seconds.max(1e-9)
    );
    Ok((vectors.as_slice().to_vec(), vectors.dim()))
}

/// The engine a command-line choice names.
pub(crate) fn backend(arg: BackendArg) -> Backend {
    match arg {
        BackendArg::Native => Backend::Native,
        BackendArg::Candle => Backend::Candle,
        BackendArg::Cuda => Backend::Cuda,
    }
}

/// The precision a command-line choice names.
pub(crate) fn precision(arg: PrecisionArg) -> Precision {
    match arg {
        PrecisionArg::F32 => Precision::F32,
        PrecisionArg::Bf16 => Precision::Bf16,
        PrecisionArg::Int8 => Precision::Int8,
    }
}

/// One input line: a string, a skill or a query.
#[derive(Deserialize)]
#[serde(untagged)]
enum Input {
    Text(String),
    Query {
        query: String,
    },
    Skill {
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        description: Option<String>,
        #[serde(default)]
        skill_md: Option<String>,
    },
}

fn read_inputs(path: &Path) -> Result<Vec<String>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut texts = Vec::new();
    for (i, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let line = i + 1;
        let text = std::str::from_utf8(raw)
            .with_context(|| format!("{}:{line}: invalid UTF-8", path.display()))?;
        if text.trim().is_empty() {
            continue;
        }
        let input: Input = serde_json::from_str(text).map_err(|e| {
            anyhow::anyhow!(
                "{}:{line}: expected a JSON string, a SkillRet skill (name, description, skill_md) or a query (query): {e}",
                path.display()
            )
        })?;
        texts.push(match input {
            Input::Text(t) => t,
            Input::Query { query } => query,
            Input::Skill {
                name,
                description,
                skill_md,
            } => {
                if name.is_none() && description.is_none() && skill_md.is_none() {
                    bail!(
                        "{}:{line}: a record needs `query`, or a skill's `name`, `description` and `skill_md`",
                        path.display()
                    );
                }
                eval::document_text(
                    name.as_deref().unwrap_or_default(),
                    description.as_deref().unwrap_or_default(),
                    skill_md.as_deref().unwrap_or_default(),
                )
            }
        });
    }
    Ok(texts)
}
