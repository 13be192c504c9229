//! `pipeline rerank`: rescore the top N of any first-stage run with a
//! cross-encoder.

use std::collections::HashMap;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use eval::{Dataset, Run};
use reranker::{Activation, CrossEncoder, Reranker, RerankerOptions};

use crate::cli::RerankArgs;
use crate::commands::embed::{backend, precision};
use crate::hub::model_dir;

pub(crate) fn run(args: &RerankArgs) -> Result<()> {
    if args.top_n == 0 {
        bail!("--top-n must be at least 1");
    }
    let data = Dataset::load(&args.data, &args.split)
        .with_context(|| format!("loading SkillRet data from {}", args.data.display()))?;
    let first = Run::read(&args.run, &args.split)
        .with_context(|| format!("reading the run {}", args.run.display()))?;
    let mut options = RerankerOptions::default()
        .with_batch_tokens(args.batch_tokens)
        .with_backend(backend(args.backend))
        .with_precision(precision(args.precision))
        .with_activation(if args.sigmoid {
            Activation::Sigmoid
        } else {
            Activation::Identity
        });
    if let Some(n) = args.max_length {
        options = options.with_max_length(n);
    }
    if let Some(text) = &args.instruction {
        options = options.with_instruction(text);
    }
    if let Some(kernel) = args.attention_kernel {
        options = options.with_attention_kernel(kernel);
    }
    let dir = model_dir(&args.model, args.revision.as_deref())?;
    let model = CrossEncoder::from_dir(&dir, options)
        .with_context(|| format!("loading the reranker {}", dir.display()))?;
    let queries: HashMap<String, String> = data
        .queries
        .iter()
        .map(|q| (q.id.clone(), q.text.clone()))
        .collect();
    let skills: HashMap<&str, &eval::Skill> =
        data.skills.iter().map(|s| (s.id.as_str(), s)).collect();
    let pool = reranker::Pool {
        depth: args.top_n,
        oracle: args.oracle.then_some(&data.qrels),
    };
    let pairs = crate::stages::pool_pairs(&first, &pool);
    eprintln!(
        "{}; {} queries, top {}{} → {pairs} pairs",
        model.describe(),
        first.len(),
        args.top_n,
        if args.oracle {
            " and the gold skills (oracle)"
        } else {
            ""
        },
    );
    let started = Instant::now();
    let bar = crate::progress::bar(pairs as u64, "reranking");
    let reranked = model.rerank_run(
        &first,
        &queries,
        &|id| skills.get(id).map(|s| s.text()),
        &pool,
        &|done| bar.set_position(done as u64),
    )?;
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64().max(1e-9);
    eprintln!(
        "reranked {pairs} pairs in {seconds:.2} s: {:.1} pairs/s",
        pairs as f64 / seconds
    );
    reranked
        .write_trec(&args.output, &args.tag)
        .with_context(|| format!("writing {}", args.output.display()))?;
    Ok(())
}
