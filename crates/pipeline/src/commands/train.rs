//! `pipeline train --config configs/train/<name>.toml`: fine-tune a
//! bi-encoder (MNRL) or a cross-encoder (BCE or listwise) for skill
//! retrieval.
//!
//! data (labelled split, or the pseudo-labelled recipe from skills alone) →
//! the first stage embeds skills and queries (cached) → hard negatives →
//! tokenise → train with checkpoints (resumable) → the model directory,
//! written whole at the end.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use candle_core::Device;
use embedder::chat::ChatInputs;
use embedder::{
    EmbedderOptions, Encoder, EncoderOptions, Kind, Prompts, SentenceTransformersConfig, Tokens,
};
use eval::Skill;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use train::recipe::{self, Draft, Sample};
use train::trainer::{Example, RunDir, StepLog, Summary};
use train::{Bert, Head, LoadOptions};

use crate::cache::{hex, model_fingerprint};
use crate::cli::TrainArgs;
use crate::config::DataSource;
use crate::report::StageTiming;
use crate::stages::{Vectors, load_dataset, resolve_model, summary};
use crate::train_config::{Objective, Source, TrainSettings};

/// What `training.json` in a trained model's directory records.
#[derive(Debug, Serialize, Deserialize)]
struct Provenance {
    fingerprint: String,
    config: PathBuf,
    base: String,
    objective: String,
    examples: usize,
    summary: serde_json::Value,
}

pub(crate) fn run(args: &TrainArgs) -> Result<()> {
    let settings = TrainSettings::load(&args.config, args.data.as_deref(), args.out.as_deref())?;
    train::tune_allocator();
    let base_dir = resolve_model(&settings.base, "model")?;
    let miner_dir = resolve_model(&settings.miner, "negatives")?;
    if settings.out.exists() && !settings.out.join("training.json").is_file() {
        bail!(
            "{}: exists and is not a model trained by `pipeline train`; remove it or pass --out",
            settings.out.display()
        );
    }
    let mut timings = Vec::new();

    let started = Instant::now();
    let (skills, drafts, documents) = load(&settings)?;
    timings.push(StageTiming::new(
        "data",
        started,
        match &drafts {
            Some(d) => format!("{} skills; {} labelled queries", skills.len(), d.len()),
            None => format!(
                "{} skills (the pseudo-labelled recipe reads nothing else)",
                skills.len()
            ),
        },
    ));
    summary(timings.last());

    let samples = mine(&settings, &miner_dir, &skills, drafts, &mut timings)?;
    let examples = tokenize(&settings, &base_dir, &samples, &documents, &mut timings)?;
    let fingerprint = fingerprint(&settings, &base_dir, &examples)?;

    if settings.out.exists() {
        let path = settings.out.join("training.json");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let done: Provenance = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a training record", path.display()))?;
        if done.fingerprint == fingerprint {
            eprintln!(
                "{} is already trained by this configuration on these data (training.json); nothing to do",
                settings.out.display()
            );
            return Ok(());
        }
        bail!(
            "{}: holds a model trained by another configuration or on other data ({}); remove it or pass --out",
            settings.out.display(),
            path.display()
        );
    }
    write_samples(&settings.work, &samples, &skills, &documents)?;

    let device = device();
    let head = match settings.objective {
        Objective::BiEncoder => Head::MeanPooling,
        Objective::CrossEncoder => Head::Classifier,
    };
    let model = Bert::load(
        &base_dir,
        &LoadOptions {
            head,
            dropout: settings.dropout,
            frozen_layers: settings.frozen_layers,
            seed: settings.run.seed,
        },
        &device,
    )
    .with_context(|| format!("loading {} for training", base_dir.display()))?;
    let plan = train::trainer::plan(&examples, &settings.run)?;
    let tokens: usize = examples.iter().map(Example::tokens).sum();
    eprintln!(
        "training {} ({:?}, {} trainable tensors) on {device:?}: {} examples, {} tokens per epoch, {} epochs, {} steps",
        base_dir.display(),
        settings.objective,
        model.params().iter().filter(|p| p.trainable).count(),
        examples.len(),
        tokens,
        settings.run.epochs,
        plan.len()
    );
    let run = RunDir {
        dir: settings.work.clone(),
        fingerprint: fingerprint.clone(),
        base: base_dir.display().to_string(),
        checkpoint_every: settings.checkpoint_every,
    };
    let started = Instant::now();
    let bar = crate::progress::steps(plan.len() as u64);
    let (mut window_tokens, mut window_seconds) = (0usize, 0f64);
    let mut on_step = |s: &StepLog| {
        window_tokens += s.tokens;
        window_seconds += s.seconds;
        if bar.position() == 0 {
            bar.set_position(s.step - 1);
            bar.reset_eta();
        }
        bar.set_message(format!(
            "loss {:.4}  {:.0} tok/s",
            s.loss,
            window_tokens as f64 / window_seconds.max(1e-9)
        ));
        bar.set_position(s.step);
    };
    let result = train::trainer::train(&model, &examples, &settings.run, &run, &mut on_step)?;
    bar.finish_and_clear();
    timings.push(StageTiming::new(
        "train",
        started,
        format!(
            "{} steps ({} resumed), loss {:.4} → {:.4}, {:.0} tokens/s",
            result.steps,
            result.resumed_from,
            result.first_loss,
            result.last_loss,
            result.tokens_per_second
        ),
    ));
    summary(timings.last());

    let started = Instant::now();
    save(
        &settings,
        &model,
        &base_dir,
        &fingerprint,
        examples.len(),
        &result,
    )?;
    let checkpoints = settings.work.join("checkpoints");
    if checkpoints.is_dir() {
        std::fs::remove_dir_all(&checkpoints)
            .with_context(|| format!("removing {}", checkpoints.display()))?;
    }
    timings.push(StageTiming::new(
        "save",
        started,
        settings.out.display().to_string(),
    ));
    summary(timings.last());
    println!(
        "trained {} → {}\n  steps {} · loss (first/last tenth) {:.4} → {:.4} · {:.0} tokens/s · {:.0} s in steps\n  log {}",
        base_dir.display(),
        settings.out.display(),
        result.steps,
        result.first_loss,
        result.last_loss,
        result.tokens_per_second,
        result.seconds,
        settings.work.join("train_log.jsonl").display()
    );
    Ok(())
}

/// The device of training: the first CUDA GPU where built with `cuda`
/// and one is present, else the CPU.
fn device() -> Device {
    #[cfg(feature = "cuda")]
    match Device::new_cuda(0) {
        Ok(d) => return d,
        Err(e) => {
            let first = e.to_string();
            eprintln!(
                "note: no CUDA device ({}); training on the CPU",
                first.lines().next().unwrap_or_default()
            );
        }
    }
    Device::Cpu
}

/// Skills, labelled drafts (labelled source) and each skill's training text.
type Loaded = (Vec<Skill>, Option<Vec<Draft>>, Vec<String>);

fn load(settings: &TrainSettings) -> Result<Loaded> {
    match settings.source {
        Source::Pseudo => {
            // Only the skills file is opened: the pseudo-labelled recipe
            // never reads queries or qrels.
            let path = match &settings.data {
                DataSource::Dir(dir) => {
                    let path = dir.join("skills").join(format!("{}.jsonl", settings.split));
                    if !path.is_file() {
                        bail!(
                            "{}: missing (the pseudo-labelled recipe needs skills/{}.jsonl)",
                            path.display(),
                            settings.split
                        );
                    }
                    path
                }
                DataSource::Hub(revision) => {
                    let revision = eval::hub::Revision::find(revision)?;
                    let name = format!("data/skills/{}.jsonl", settings.split);
                    let file = revision.file(&name).with_context(|| {
                        format!("{} has no pinned {name}", eval::hub::DATASET_REPO)
                    })?;
                    eval::hub::fetch_file(revision, file, &eval::hub::HubOptions::from_env())?
                }
            };
            let mut warnings = Vec::new();
            let skills = eval::data::read_skills(&path, &mut warnings)?;
            for w in &warnings {
                eprintln!("warning: {w}");
            }
            let text = settings
                .pseudo
                .as_ref()
                .map(|p| p.documents)
                .unwrap_or_default();
            let documents = skills.iter().map(|s| text.of(s)).collect();
            Ok((skills, None, documents))
        }
        Source::Labelled => {
            let data = load_dataset(&settings.data, &settings.split)?;
            let drafts = recipe::labelled_drafts(&data)?;
            let documents = data.skills.iter().map(Skill::text).collect();
            Ok((data.skills, Some(drafts), documents))
        }
    }
}

/// Unit vectors of `texts` by the miner, through the vector cache.
#[allow(clippy::too_many_arguments)]
fn vectors(
    settings: &TrainSettings,
    model: &mut Option<Vectors>,
    dir: &Path,
    what: &str,
    ids: &[&str],
    texts: &[String],
    kind: Kind,
    timings: &mut Vec<StageTiming>,
) -> Result<Vec<f32>> {
    let key = format!(
        "model={} revision={:?} max_length=None pooling=None precision=F32 backend=Native prompt=None kind={kind:?} miner",
        model_fingerprint(dir)?,
        settings.miner.revision
    );
    if model.is_none() {
        let options = EmbedderOptions::default().with_normalize(false);
        *model = Some(Vectors::local(dir, options, String::new(), true)?);
    }
    let model = model.as_mut().context("the miner is set up")?;
    let dim = model.dim();
    let mut v = model.embed_cached(&settings.cache, what, &key, ids, texts, kind, timings)?;
    for row in v.chunks_exact_mut(dim) {
        embedder::normalize(row);
    }
    Ok(v)
}

/// Drafts (made here for the pseudo-labelled recipe) with mined negatives.
fn mine(
    settings: &TrainSettings,
    miner_dir: &Path,
    skills: &[Skill],
    drafts: Option<Vec<Draft>>,
    timings: &mut Vec<StageTiming>,
) -> Result<Vec<Sample>> {
    let dim = embedder::ModelConfig::read(&miner_dir.join("config.json"))?.hidden_size();
    let mut model = None;
    let ids: Vec<&str> = skills.iter().map(|s| s.id.as_str()).collect();
    let texts: Vec<String> = skills.iter().map(Skill::text).collect();
    let docs = vectors(
        settings,
        &mut model,
        miner_dir,
        "skills",
        &ids,
        &texts,
        Kind::Document,
        timings,
    )?;
    let drafts = match drafts {
        Some(d) => d,
        None => {
            let started = Instant::now();
            let intents: Vec<recipe::Intents> = skills.iter().map(recipe::intents).collect();
            let options = settings.pseudo.as_ref().context("[pseudo] is set")?;
            let drafts = recipe::pseudo_drafts(&intents, &docs, dim, options)?;
            timings.push(StageTiming::new(
                "queries",
                started,
                format!(
                    "{} pseudo-labelled ({} single, {} composed)",
                    drafts.len(),
                    drafts.iter().filter(|d| d.positives.len() == 1).count(),
                    drafts.iter().filter(|d| d.positives.len() > 1).count()
                ),
            ));
            summary(timings.last());
            drafts
        }
    };
    let q_ids: Vec<String> = (0..drafts.len()).map(|i| format!("train-{i}")).collect();
    let q_ids: Vec<&str> = q_ids.iter().map(String::as_str).collect();
    let q_texts: Vec<String> = drafts.iter().map(|d| d.query.clone()).collect();
    let queries = vectors(
        settings,
        &mut model,
        miner_dir,
        "training queries",
        &q_ids,
        &q_texts,
        Kind::Query,
        timings,
    )?;
    let started = Instant::now();
    let (samples, dropped) = recipe::mine(&drafts, &queries, &docs, dim, &settings.negatives)?;
    timings.push(StageTiming::new(
        "negatives",
        started,
        format!(
            "{} samples × {} hard negatives ({dropped} dropped: too few below their positives within rank {})",
            samples.len(),
            settings.negatives.count,
            settings.negatives.depth
        ),
    ));
    summary(timings.last());
    if samples.is_empty() {
        bail!("no training sample is left after mining negatives");
    }
    Ok(samples)
}

/// The examples the trainer sees, tokenised by the base model's tokenizer.
fn tokenize(
    settings: &TrainSettings,
    base: &Path,
    samples: &[Sample],
    documents: &[String],
    timings: &mut Vec<StageTiming>,
) -> Result<Vec<Example>> {
    let started = Instant::now();
    let encoder = Encoder::from_dir(
        base,
        &EncoderOptions {
            max_length: Some(settings.max_length),
            ..EncoderOptions::default()
        },
        None,
    )
    .with_context(|| format!("loading the tokenizer of {}", base.display()))?;
    // A base saved with sentence-transformers 6.x's message modality reads
    // its inputs through the chat template: it is trained on them too (texts
    // as user messages with their kind's task, pairs as query/document
    // messages), and the saved model keeps the template and the modality.
    let st = SentenceTransformersConfig::read(base)?;
    let family = encoder.config().family();
    let template;
    let examples: Vec<Example> = match settings.objective {
        Objective::BiEncoder => {
            let chat = ChatInputs::load(
                base,
                &st,
                family,
                encoder.tokenization(),
                &Prompts::default(),
            )?;
            let tokenize = |texts: &[&str], kind: Kind| -> Result<Vec<Tokens>> {
                Ok(match &chat {
                    Some(chat) => chat
                        .tokenize(encoder.tokenization(), texts, "", kind)?
                        .into_iter()
                        .map(|ids| Tokens {
                            types: vec![0; ids.len()],
                            ids,
                        })
                        .collect(),
                    None => encoder.tokenize(texts)?,
                })
            };
            template = chat.as_ref().map(|c| c.template().path().to_path_buf());
            let queries: Vec<&str> = samples.iter().map(|s| s.query.as_str()).collect();
            let documents: Vec<&str> = documents.iter().map(String::as_str).collect();
            let anchors = tokenize(&queries, Kind::Query)?;
            let docs = tokenize(&documents, Kind::Document)?;
            samples
                .iter()
                .zip(anchors)
                .map(|(s, anchor)| Example::Triplet {
                    anchor,
                    positive: docs[s.positives[0]].clone(),
                    negatives: s.negatives.iter().map(|&n| docs[n].clone()).collect(),
                })
                .collect()
        }
        Objective::CrossEncoder => {
            // A cross-encoder saved by sentence-transformers reads its
            // default prompt before each query, as the reranker does.
            let prompt = match (
                &st.default_prompt_name,
                train::save::is_cross_encoder(base)?,
            ) {
                (Some(name), true) => st.prompt(base, name)?.to_owned(),
                _ => String::new(),
            };
            let chat = ChatInputs::load_pairs(base, &st, family, encoder.tokenization(), &prompt)?;
            template = chat.as_ref().map(|c| c.template().path().to_path_buf());
            let mut examples = Vec::with_capacity(samples.len());
            for s in samples {
                let pairs: Vec<(&str, &str)> = s
                    .positives
                    .iter()
                    .chain(&s.negatives)
                    .map(|&d| (s.query.as_str(), documents[d].as_str()))
                    .collect();
                let mut labels = vec![1.0f32; s.positives.len()];
                labels.resize(pairs.len(), 0.0);
                let pairs =
                    reranker::classifier::pair_inputs(&encoder, chat.as_ref(), &prompt, &pairs)?;
                examples.push(Example::Pairs { pairs, labels });
            }
            examples
        }
    };
    let tokens: usize = examples.iter().map(Example::tokens).sum();
    timings.push(StageTiming::new(
        "tokenize",
        started,
        format!(
            "{} examples, {tokens} tokens (max {} per sequence){}",
            examples.len(),
            settings.max_length,
            template.map_or_else(String::new, |path| format!(
                ", rendered through the chat template of {}",
                path.display()
            ))
        ),
    ));
    summary(timings.last());
    Ok(examples)
}

/// Identifies what decides the weights: the base model's files, the
/// examples' tokens and labels, the model options and the run settings.
fn fingerprint(settings: &TrainSettings, base: &Path, examples: &[Example]) -> Result<String> {
    let mut h = Sha256::new();
    h.update(model_fingerprint(base)?.as_bytes());
    h.update(
        serde_json::to_string(&(
            settings.objective,
            settings.max_length,
            settings.frozen_layers,
            settings.dropout,
            &settings.run,
        ))?
        .as_bytes(),
    );
    let feed = |h: &mut Sha256, t: &Tokens| {
        h.update((t.ids.len() as u64).to_le_bytes());
        for id in &t.ids {
            h.update(id.to_le_bytes());
        }
        for id in &t.types {
            h.update(id.to_le_bytes());
        }
    };
    for e in examples {
        match e {
            Example::Triplet {
                anchor,
                positive,
                negatives,
            } => {
                h.update(b"T");
                for t in std::iter::once(anchor).chain([positive]).chain(negatives) {
                    feed(&mut h, t);
                }
            }
            Example::Pairs { pairs, labels } => {
                h.update(b"P");
                for (t, l) in pairs.iter().zip(labels) {
                    feed(&mut h, t);
                    h.update(l.to_le_bytes());
                }
            }
        }
    }
    Ok(hex(&h.finalize()))
}

#[derive(Serialize)]
struct Candidate<'a> {
    id: &'a str,
    text: &'a str,
}

#[derive(Serialize)]
struct SampleLine<'a> {
    query: &'a str,
    positives: Vec<Candidate<'a>>,
    negatives: Vec<Candidate<'a>>,
}

/// `training_data.jsonl` in the work directory: each sample with its texts
/// (for inspection, and for the PyTorch side of `scripts/bench_train.py`).
fn write_samples(
    work: &Path,
    samples: &[Sample],
    skills: &[Skill],
    documents: &[String],
) -> Result<()> {
    std::fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
    let path = work.join("training_data.jsonl");
    let mut file = tempfile::NamedTempFile::new_in(work)?;
    {
        let mut w = std::io::BufWriter::new(file.as_file_mut());
        let candidate = |&i: &usize| Candidate {
            id: &skills[i].id,
            text: &documents[i],
        };
        for s in samples {
            let line = SampleLine {
                query: &s.query,
                positives: s.positives.iter().map(candidate).collect(),
                negatives: s.negatives.iter().map(candidate).collect(),
            };
            serde_json::to_writer(&mut w, &line)?;
            w.write_all(b"\n")?;
        }
        w.flush()?;
    }
    file.persist(&path)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

fn save(
    settings: &TrainSettings,
    model: &Bert,
    base: &Path,
    fingerprint: &str,
    examples: usize,
    result: &Summary,
) -> Result<()> {
    let provenance = Provenance {
        fingerprint: fingerprint.to_owned(),
        config: settings.path.clone(),
        base: base.display().to_string(),
        objective: format!("{:?}", settings.objective),
        examples,
        summary: serde_json::to_value(result)?,
    };
    let readme = format!(
        "# {name}\n\nFine-tuned from `{base}` by `pipeline train --config {config}` ({objective:?}, {source:?} data from split `{split}`; {examples} examples, {steps} steps).\n\nSettings, summary and fingerprint: training.json. Per-step log: {work}/train_log.jsonl.\n",
        name = settings
            .out
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        base = base.display(),
        config = settings.path.display(),
        objective = settings.objective,
        source = settings.source,
        split = settings.split,
        steps = result.steps,
        work = settings.work.display(),
    );
    let record = serde_json::to_string_pretty(&serde_json::json!({
        "fingerprint": provenance.fingerprint,
        "config": provenance.config,
        "base": provenance.base,
        "objective": provenance.objective,
        "examples": provenance.examples,
        "summary": provenance.summary,
        "settings": settings,
    }))?;
    train::save::save_model(
        model,
        base,
        &settings.out,
        settings.max_length,
        &[("README.md", &readme), ("training.json", &record)],
    )
    .with_context(|| format!("writing {}", settings.out.display()))
}
